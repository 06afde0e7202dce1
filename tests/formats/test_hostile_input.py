"""Hostile input: a result, or `FILE:LINE: message` and exit 2; never a traceback or a hang."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.app.inprocess import run_cli_in_process
from tests.helpers import TRACES, run_cli

EXAMPLES = sorted(TRACES.glob("*.jsonl"))


def run_main(argv: list[str]) -> tuple[int, bytes, str]:
    """The CLI's entry point in this process (fast enough for fuzzing)."""
    run = run_cli_in_process(argv)
    return run.code, run.stdout, run.stderr.decode("utf-8", "replace")


def assert_result_or_located_error(
    path: Path, code: int, err: str, ok: tuple[int, ...] = (0,)
) -> None:
    assert "Traceback" not in err
    if code in ok:
        return
    assert code == 2, (code, err)
    located = re.compile(rf"^{re.escape(str(path))}(:\d+)?: \S")
    assert any(located.match(line) for line in err.splitlines()), err


# --- explicit cases, one test each -------------------------------------------------------

DECODE = b'{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}'


def replay_bytes(tmp_path: Path, data: bytes, *extra: str) -> tuple[int, bytes, str, Path]:
    p = tmp_path / "t.jsonl"
    p.write_bytes(data)
    r = run_cli("replay", str(p), *extra)
    return r.returncode, r.stdout, r.stderr.decode(), p


def test_invalid_utf8_is_located(tmp_path: Path) -> None:
    code, _, err, p = replay_bytes(
        tmp_path, DECODE + b"\n" + b'{"op": "cancel", "sid": "\xff\xfe"}\n'
    )
    assert code == 2 and err.startswith(f"{p}:2: not valid JSON: invalid UTF-8")


def test_byte_order_mark_at_the_start_is_ignored(tmp_path: Path) -> None:
    code, out, err, _ = replay_bytes(tmp_path, b"\xef\xbb\xbf" + DECODE + b"\n")
    assert code == 0, err
    assert b'"dispatched":1' in out


def test_byte_order_mark_elsewhere_is_an_error(tmp_path: Path) -> None:
    code, _, err, p = replay_bytes(tmp_path, DECODE + b"\n\xef\xbb\xbf" + DECODE + b"\n")
    assert code == 2 and err.startswith(f"{p}:2: byte-order mark in the middle")


def test_crlf_line_ends_replay_like_lf(tmp_path: Path) -> None:
    trace = (TRACES / "cancel-and-rejoin.jsonl").read_bytes()
    lf = replay_bytes(tmp_path, trace)[1]
    crlf = replay_bytes(tmp_path, trace.replace(b"\n", b"\r\n"))[1]
    assert crlf == lf


def test_nul_bytes_are_located(tmp_path: Path) -> None:
    code, _, err, p = replay_bytes(
        tmp_path, DECODE + b"\n" + DECODE[:10] + b"\x00" + DECODE[10:] + b"\n"
    )
    assert code == 2 and err.startswith(f"{p}:2: not valid JSON") and "NUL byte at column 11" in err


def test_truncated_last_line_is_reported_as_truncated(tmp_path: Path) -> None:
    code, _, err, p = replay_bytes(tmp_path, DECODE + b"\n" + DECODE[:30])
    assert code == 2 and err.startswith(f"{p}:2: truncated last line (no newline at end of file)")


def test_complete_last_line_without_newline_is_fine(tmp_path: Path) -> None:
    code, _, err, _ = replay_bytes(tmp_path, DECODE)
    assert code == 0, err


def test_line_over_max_line_bytes_is_rejected_without_reading_it_all(tmp_path: Path) -> None:
    p = tmp_path / "huge.jsonl"
    with p.open("wb") as f:
        f.write(DECODE + b"\n")
        f.write(b'{"op": "cancel", "sid": "' + b"x" * (200 * 1024 * 1024) + b'"}\n')
    r = run_cli("replay", str(p), "--max-line-bytes", "1000000", "-o", "/dev/null")
    assert r.returncode == 2
    assert r.stderr.decode().startswith(
        f"{p}:2: line is longer than --max-line-bytes (1000000 bytes)"
    )
    r = run_cli("validate", str(p), "--max-line-bytes", "4096")
    assert r.returncode == 2 and b":2: line is longer" in r.stderr


def test_deeply_nested_json_is_an_error(tmp_path: Path) -> None:
    deep = b'{"op": "cancel", "sid": 1, "meta": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    code, _, err, p = replay_bytes(tmp_path, deep)
    assert code == 2 and err.startswith(f"{p}:1: not valid JSON") and "depth" in err


def test_nesting_that_could_not_be_written_back_is_an_error(tmp_path: Path) -> None:
    line = b'{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1, "meta": '
    code, _, err, p = replay_bytes(tmp_path, line + b"[" * 500 + b"]" * 500 + b"}\n")
    assert code == 2 and err.startswith(f"{p}:1: nested deeper than 200 levels")
    meta = b"[" * 150 + b"]" * 150
    code, out, err, _ = replay_bytes(tmp_path, line + meta + b"}\n")
    assert code == 0, err
    assert meta in out


@pytest.mark.parametrize("value", [b"9223372036854775808", b"-9223372036854775809", b"1e30"])
def test_integers_beyond_64_bits_are_format_errors(tmp_path: Path, value: bytes) -> None:
    line = b'{"op": "submit", "tid": ' + value + b', "sid": 1, "kind": "decode", "size": 1}\n'
    code, _, err, p = replay_bytes(tmp_path, line)
    assert code == 2 and err.startswith(f"{p}:1: tid is beyond the 64-bit integer range"), err


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_errors(tmp_path: Path, value: bytes) -> None:
    code, _, err, p = replay_bytes(tmp_path, b'{"op": "get_work", "t": ' + value + b"}\n")
    assert code == 2 and err.startswith(f"{p}:1: not valid JSON")


def test_a_scalar_meta_replays(tmp_path: Path) -> None:
    # meta is any JSON value; the key count once iterated a number (exit 4).
    line = b'{"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4, "meta": 10}'
    code, out, err, _ = replay_bytes(tmp_path, line + b"\n", "-f", "jsonl")
    assert code == 0, err
    assert b'"meta":10' in out


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    line = b'{"op": "submit", "tid": 1, "sid": 1, "sid": 2, "kind": "decode", "size": 1}\n'
    code, _, err, p = replay_bytes(tmp_path, line)
    assert code == 2 and err.startswith(f"{p}:1: duplicate key 'sid' in one object")
    task = b'{"tid": 1, "tid": 1, "sid": 1, "kind": "decode", "size": 1}'
    nested = b'{"op": "submit", "tasks": [' + task + b"]}\n"
    code, _, err, p = replay_bytes(tmp_path, nested)
    assert code == 2 and "duplicate key 'tid'" in err


def test_odd_spacing_and_colons_in_strings_are_not_duplicates(tmp_path: Path) -> None:
    line = b'{ "op" : "submit" , "tid" : 1, "sid": "a\\":b", "kind":"decode","size":1}\n'
    code, _, err, _ = replay_bytes(tmp_path, line)
    assert code == 0, err


def test_empty_file_is_an_empty_replay(tmp_path: Path) -> None:
    code, out, err, _ = replay_bytes(tmp_path, b"")
    assert code == 0, err
    end = json.loads(out.splitlines()[-1])["end"]
    assert end["steps"] == 0 and end["accepted"] == 0


def test_header_only_file_is_an_empty_replay(tmp_path: Path) -> None:
    code, out, err, _ = replay_bytes(tmp_path, b'{"schedcli": 1, "policy": "fcfs"}\n\n')
    assert code == 0, err
    assert json.loads(out)["end"]["steps"] == 0


def test_corrupt_gzip_is_located(tmp_path: Path) -> None:
    data = bytearray(gzip.compress((TRACES / "rejections.jsonl").read_bytes() * 50))
    data[40:60] = b"\x00" * 20
    p = tmp_path / "bad.jsonl.gz"
    p.write_bytes(bytes(data))
    r = run_cli("replay", str(p))
    assert r.returncode == 2
    assert re.match(rf"^{re.escape(str(p))}:\d+: corrupt gzip data", r.stderr.decode())


def test_gzip_cut_short_is_located(tmp_path: Path) -> None:
    data = gzip.compress((TRACES / "rejections.jsonl").read_bytes())
    p = tmp_path / "short.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    r = run_cli("replay", str(p))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert re.match(rf"^{re.escape(str(p))}:\d+: gzip data ends early", err), err


def test_unwritable_output_path_is_exit_2(tmp_path: Path) -> None:
    r = run_cli("replay", str(EXAMPLES[0]), "-o", str(tmp_path / "no" / "such" / "dir" / "x.jsonl"))
    assert r.returncode == 2 and b"cannot write" in r.stderr and b"Traceback" not in r.stderr


def test_full_output_device_is_exit_2() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    r = run_cli("replay", str(TRACES / "long-prompts-and-chat.jsonl"), "-o", "/dev/full")
    assert r.returncode == 2
    assert b"No space left on device" in r.stderr and b"Traceback" not in r.stderr


# --- fuzzing --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = [
    "op",
    "tid",
    "sid",
    "kind",
    "size",
    "tasks",
    "step",
    "expect",
    "tokens",
    "prepared",
    "meta",
    "position",
    "priority",
    "produce_output",
    "t",
    "schedcli",
    "policy",
    "params",
]


# A task's prepared input, valid or not: the wrong types and bounds, missing and unknown keys.
prepared_values = st.fixed_dictionaries(
    {"size": st.integers(-2, 2**63) | json_values, "offset": st.integers(-2, 2**63) | json_values},
    optional={"x": json_values},
) | st.builds(lambda s, o: {"size": s, "offset": o}, st.integers(1, 600), st.integers(0, 40))


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    lines = draw(st.sampled_from(EXAMPLES)).read_bytes().splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(
            st.sampled_from(
                ["drop", "dup", "swap", "truncate", "remove", "retype", "rename", "prepare"]
            )
        )
        if how == "drop":
            del lines[i]
        elif how == "dup":
            lines.insert(i, lines[i])
        elif how == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif how == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            target = obj
            tasks = obj.get("tasks")
            has_task = isinstance(tasks, list) and tasks and isinstance(tasks[0], dict)
            if has_task and draw(st.booleans()):
                target = tasks[0]
            if not target:
                continue
            if how == "prepare":  # a prepared input on a task (or wherever it lands)
                target["prepared"] = draw(prepared_values)
                lines[i] = json.dumps(obj).encode()
                continue
            key = draw(st.sampled_from(sorted(target)))
            if how == "remove":
                del target[key]
            elif how == "retype":
                target[key] = draw(json_values)
            else:
                target[draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=5))] = target.pop(key)
            lines[i] = json.dumps(obj).encode()
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_replay_or_validate(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    p.write_bytes(data)
    for argv in (["replay", str(p)], ["validate", str(p)]):
        code, _, err = run_main(argv)
        assert_result_or_located_error(p, code, err)


@FUZZ
@given(values=st.lists(json_values, max_size=6))
def test_arbitrary_json_values_never_crash_replay(
    tmp_path_factory: pytest.TempPathFactory, values: list[object]
) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    p.write_text("\n".join(json.dumps(v) for v in values) + "\n")
    code, _, err = run_main(["replay", str(p), "--drain"])
    assert_result_or_located_error(p, code, err)


@FUZZ
@given(data=mutated_traces(), policy=st.sampled_from(["decode-first", "fcfs", "fair", "sjf"]))
def test_mutated_traces_give_a_result_or_a_located_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, policy: str
) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    p.write_bytes(data)
    code, out, err = run_main(["replay", str(p), "-p", policy, "--drain", "--check"])
    assert_result_or_located_error(p, code, err, ok=(0, 1))
    if code == 0:
        end = json.loads(out.splitlines()[-1])["end"]
        assert end["accepted"] == end["dispatched"] + end["cancelled"] + end["queued"]
    vcode, _, verr = run_main(["validate", str(p)])
    assert_result_or_located_error(p, vcode, verr)


@FUZZ
@given(
    data=st.binary(max_size=200)
    | st.lists(st.text(max_size=20), max_size=5).map(
        lambda rows: ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows)).encode()
    )
)
def test_arbitrary_sources_never_crash_convert(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    p = d / "src.csv"
    p.write_bytes(data)
    for fmt in ("auto", "azure", "mooncake", "lengths"):
        code, _, err = run_main(["convert", fmt, str(p), "--rate", "2", "-o", str(d / "w.jsonl")])
        assert "Traceback" not in err
        assert code in (0, 2), err
        if code == 2:
            assert err.startswith(str(p)) or err.startswith("schedcli: "), err


@FUZZ
@given(
    values=st.lists(
        json_values
        | st.fixed_dictionaries(
            {
                "sid": st.integers(0, 3),
                "arrival": st.floats(0, 5),
                "prompt_tokens": st.integers(-1, 600),
                "output_tokens": st.integers(-1, 30),
            }
        ),
        max_size=6,
    )
)
def test_arbitrary_workloads_never_crash_simulate(
    tmp_path_factory: pytest.TempPathFactory, values: list[object]
) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "w.jsonl"
    p.write_text("\n".join(json.dumps(v) for v in values) + "\n")
    code, _, err = run_main(["simulate", str(p), "-f", "json"])
    assert_result_or_located_error(p, code, err)
