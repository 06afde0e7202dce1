"""formats/kinds.py: what kind of file an input is, told from its bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli


@pytest.mark.parametrize("data", [b"[1, 2, 3]\n", b"\x7fELF\x02\x01,\x00\x00,\x01\n"])
def test_a_json_array_or_a_binary_is_not_called_a_csv_trace(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    for argv in (["replay", str(path)], ["convert", "auto", str(path)], ["stats", str(path)]):
        r = run_cli(*argv)
        assert r.returncode == 2
        assert b"CSV" not in r.stderr, argv
