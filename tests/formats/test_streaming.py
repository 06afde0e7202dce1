"""Input is read once, as it arrives: the step mode is decided on the way, pipes are live."""

from __future__ import annotations

import gzip
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import Cli
from tests.helpers import ROOT

DECODE = '{"op": "submit", "tid": %d, "sid": %d, "kind": "decode", "size": 1}'
GET_WORK = '{"op": "get_work"}'


def write(tmp_path: Path, *lines: str, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def records(stdout: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stdout.splitlines()]


def read_line(proc: subprocess.Popen[bytes], timeout: float = 20) -> bytes:
    """One line of the child's stdout, or fail if none comes in time."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output arrived: the replay is not live"
    return proc.stdout.readline()


def schedcli(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="0")
    return subprocess.Popen(
        [sys.executable, "-m", "schedcli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


# --- the step mode, decided as events arrive ------------------------------------------


def test_events_before_the_first_get_work_are_applied_then_the_trace_is_explicit(
    cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path, DECODE % (1, 1), DECODE % (2, 2), GET_WORK, DECODE % (3, 3))
    r = cli("replay", path, "-f", "jsonl")
    assert r.code == 0, r.stderr
    recs = records(r.stdout)
    assert recs[0] == {
        "step": 0,
        "batch": [
            {"tid": 1, "sid": 1, "kind": "decode", "size": 1},
            {"tid": 2, "sid": 2, "kind": "decode", "size": 1},
        ],
        "tokens": 2,
        "queued": 0,
    }
    assert recs[-1]["end"]["mode"] == "explicit"  # type: ignore[index]
    assert recs[-1]["end"]["queued"] == 1  # type: ignore[index]


def test_events_before_the_first_step_belong_to_step_0(cli: Cli, tmp_path: Path) -> None:
    stepped = '{"op": "submit", "tid": 2, "sid": 2, "kind": "decode", "size": 1, "step": 3}'
    r = cli("replay", write(tmp_path, DECODE % (1, 1), stepped), "-f", "jsonl")
    assert r.code == 0, r.stderr
    recs = records(r.stdout)
    assert [rec["step"] for rec in recs if "step" in rec] == [0, 3]
    assert recs[-1]["end"]["mode"] == "stepped"  # type: ignore[index]


def test_a_get_work_in_a_stepped_trace_is_an_error_at_its_line(cli: Cli, tmp_path: Path) -> None:
    stepped = '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1, "step": 0}'
    path = write(tmp_path, stepped, GET_WORK)
    r = cli("replay", path, "-f", "jsonl")
    assert r.code == 2
    assert r.stderr.startswith(f"{path}:2: get_work in a stepped trace (line 1 gave a step")


def test_a_step_in_an_explicit_trace_is_an_error_at_its_line(cli: Cli, tmp_path: Path) -> None:
    stepped = '{"op": "cancel", "sid": 1, "step": 4}'
    path = write(tmp_path, GET_WORK, stepped)
    r = cli("replay", path, "-f", "jsonl")
    assert r.code == 2
    assert r.stderr.startswith(f"{path}:2: cancel with a step in an explicit trace")


def test_a_get_work_may_carry_its_own_step_number(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, DECODE % (1, 1), '{"op": "get_work", "step": 0, "expect": [1]}')
    r = cli("replay", path, "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr


# --- inputs that used to crash the pre-scan ---------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        GET_WORK,
        DECODE % (1, 1),
        '{"op": "cancel", "sid": 1}',
        '{"op": "clear"}',
        '{"schedcli": 1}',
        '{"op": "get\\u005fwork"}',
    ],
)
def test_a_byte_order_mark_before_any_first_line_is_ignored(
    cli: Cli, tmp_path: Path, first: str
) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + first.encode() + b"\n" + GET_WORK.encode() + b"\n")
    r = cli("replay", path, "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert records(r.stdout)[-1]["end"]["mode"] == "explicit"  # type: ignore[index]


def _gzip_trace(events: int) -> bytes:
    lines = "".join(f"{DECODE % (i, i)}\n{GET_WORK}\n" for i in range(events))
    return gzip.compress(lines.encode(), mtime=0)


def test_gzip_cut_at_every_kibibyte_is_a_located_error(cli: Cli, tmp_path: Path) -> None:
    data = _gzip_trace(4000)
    path = tmp_path / "cut.jsonl.gz"
    assert len(data) > 8 * 1024
    for cut in range(1024, len(data), 1024):
        path.write_bytes(data[:cut])
        r = cli("replay", path, "-f", "jsonl")
        assert r.code == 2, (cut, r.stderr)
        assert r.stderr.startswith(f"{path}:"), (cut, r.stderr)
        assert "gzip" in r.stderr and "Traceback" not in r.stderr


def test_gzip_with_a_broken_checksum_is_a_located_error(cli: Cli, tmp_path: Path) -> None:
    data = bytearray(_gzip_trace(50))
    data[-6] ^= 0xFF  # inside the CRC32 trailer
    path = tmp_path / "crc.jsonl.gz"
    path.write_bytes(bytes(data))
    r = cli("replay", path, "-f", "jsonl")
    assert r.code == 2
    assert r.stderr.startswith(f"{path}:") and "corrupt gzip data" in r.stderr


# --- live input ---------------------------------------------------------------------------


def test_a_pipe_replays_incrementally() -> None:
    proc = schedcli("replay", "-", "-f", "jsonl")
    assert proc.stdin is not None
    try:
        proc.stdin.write(f"{DECODE % (1, 1)}\n{GET_WORK}\n".encode())
        proc.stdin.flush()
        first = orjson.loads(read_line(proc))
        assert first["step"] == 0 and first["batch"][0]["tid"] == 1
        proc.stdin.write(f"{DECODE % (2, 2)}\n{GET_WORK}\n".encode())
        proc.stdin.close()
        assert proc.stdout is not None
        rest = [orjson.loads(line) for line in proc.stdout.read().splitlines()]
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert rest[0]["step"] == 1 and rest[-1]["end"]["dispatched"] == 2
    assert proc.returncode == 0


def test_follow_replays_a_growing_file_until_interrupted(tmp_path: Path) -> None:
    path = write(tmp_path, DECODE % (1, 1), GET_WORK)
    proc = schedcli("replay", "--follow", str(path), "-f", "jsonl")
    try:
        assert orjson.loads(read_line(proc))["step"] == 0
        with path.open("a") as f:
            f.write(f"{DECODE % (2, 2)}\n{GET_WORK}\n")
        assert orjson.loads(read_line(proc))["step"] == 1
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert b"interrupted" in err


def test_follow_refuses_stdin(cli: Cli) -> None:
    r = cli("replay", "-", "--follow")
    assert r.code == 2
    assert "--follow reads a file" in r.stderr
