"""formats/workload.py: a workload's requests, refused at their line when out of bounds."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers import located, run_cli


def test_a_request_of_nine_quintillion_tokens_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"sid":0,"arrival":0,"prompt_tokens":9000000000000000000,"output_tokens":1}\n')
    start = time.monotonic()
    err = located(run_cli("simulate", str(path)), path)
    assert "prompt_tokens must be between 1 and 2,097,152" in err
    assert time.monotonic() - start < 10
