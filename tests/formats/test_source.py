"""formats/source.py: reading a file, gzip or plain, a line at a time."""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.helpers import located, run_cli


def test_a_gzip_trace_cut_short_is_a_located_error(tmp_path: Path) -> None:
    data = gzip.compress(b'{"op": "get_work"}\n' * 5000, mtime=0)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "gzip data ends early" in located(run_cli("replay", str(path)), path)
