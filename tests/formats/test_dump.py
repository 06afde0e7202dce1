"""formats/dump.py: a dump read back by diff, stats, report and --golden, refused at its line."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli
from tests.helpers import EXAMPLES, located, run_cli

DUMP_LINE = (
    '{"step":0,"batch":[{"tid":1,"sid":1,"kind":"decode","size":SIZE}],"tokens":1,"queued":0}'
)


def _dump(tmp_path: Path, trace: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    r = run_cli("replay", str(trace), "-f", "jsonl", "-o", str(out), *args)
    assert r.returncode in (0, 3), r.stderr
    return out


def test_a_dump_with_a_negative_size_is_refused_by_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(DUMP_LINE.replace("SIZE", "-1") + "\n")
    for argv in (["diff", str(path), str(path)], ["stats", str(path)], ["report", str(path)]):
        err = located(
            run_cli(*argv, "-o", str(tmp_path / "r.html"))
            if argv[0] == "report"
            else run_cli(*argv),
            path,
        )
        assert "a size >= 0" in err, argv


def test_a_dump_whose_dropped_is_not_a_list_is_a_located_error(tmp_path: Path, cli: Cli) -> None:
    # `"dropped": 1` in a clear record: the dump reader refuses it at its line, so diff and
    # stats never take the length of an int.
    dump = tmp_path / "d.jsonl"
    dump.write_text(
        '{"step":0,"batch":[{"tid":1,"sid":1,"kind":"prefill","size":4}],"tokens":4,"queued":0}\n'
        '{"line":8,"op":"clear","dropped":1,"queued":0}\n'
        '{"end":{"steps":1,"dispatched":1,"cancelled":0,"rejected":0,"queued":0}}\n'
    )
    for command in (["diff", dump, dump, "-f", "json"], ["stats", dump, "-f", "json"]):
        r = cli(*command)
        assert r.code == 2, r.stderr
        assert f"{dump}:2: a clear record's dropped is a list" in r.stderr


def test_a_dump_without_its_end_record_is_incomplete_everywhere(tmp_path: Path) -> None:
    full = _dump(tmp_path, EXAMPLES[0], "full.jsonl")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:-1]))
    for argv in (["stats", str(cut)], ["diff", str(full), str(cut)]):
        r = run_cli(*argv)
        assert r.returncode == 2, argv
        assert f"{cut}: incomplete dump (no end record)" in r.stderr.decode()
    r = run_cli("report", str(cut), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 2 and b"incomplete dump (no end record)" in r.stderr
    assert run_cli("stats", str(cut), "--allow-incomplete").returncode == 0
    assert run_cli("diff", str(full), str(cut), "--allow-incomplete").returncode == 1


def test_a_dump_whose_steps_repeat_is_refused_at_its_line(tmp_path: Path) -> None:
    full = _dump(tmp_path, EXAMPLES[0], "full.jsonl")
    lines = full.read_bytes().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith(b'{"step":0,'))
    golden = tmp_path / "dup.jsonl"
    golden.write_bytes(b"".join(lines[: k + 1]) + lines[k] + b"".join(lines[k + 1 :]))
    r = run_cli("replay", str(EXAMPLES[0]), "--golden", str(golden))
    assert r.returncode == 2
    message = f"{golden}:{k + 2}: step 0 after step 0: a dump's steps only increase"
    assert message in r.stderr.decode()
    assert b"(no batch)" not in r.stderr
