"""`schedcli replay` and `schedcli validate`, run as the real command."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers import ROOT, TRACES, run_cli

EXAMPLES = sorted(TRACES.glob("*.jsonl"))


def golden_of(trace: Path) -> Path:
    return TRACES / "golden" / f"{trace.stem}.dump.jsonl"


def records(stdout: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stdout.splitlines()]


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines))
    return p


HEADER = (
    '{"schedcli": 1, "policy": "decode-first", "params": {"max_batch_tokens": 10, '
    '"max_decode_sequences": 2, "max_prefill_chunk_size": 4}}'
)


def test_there_are_at_least_six_examples_each_with_a_golden() -> None:
    assert len(EXAMPLES) >= 6
    for trace in EXAMPLES:
        assert golden_of(trace).is_file(), trace


# Each example's verdict against its golden is a test item of the schedcli pytest plugin
# ([tool.schedcli] pytest = true; `pytest --schedcli-update` rewrites them). Here: the dump
# is the golden byte for byte, and a golden run writes nothing to stdout.
@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_dumps_its_golden_byte_for_byte(trace: Path) -> None:
    r = run_cli("replay", str(trace.relative_to(ROOT)), "--golden", str(golden_of(trace)))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""  # a golden run writes nothing to stdout unless asked
    dump = run_cli("replay", str(trace.relative_to(ROOT)), "-f", "jsonl")
    assert dump.stdout == golden_of(trace).read_bytes()


RECORDED = [t for t in EXAMPLES if b'"expect"' in t.read_bytes()]


@pytest.mark.parametrize("trace", RECORDED, ids=lambda p: p.stem)
def test_every_recorded_example_matches_its_recorded_batches(trace: Path) -> None:
    r = run_cli("replay", str(trace), "--check", "-o", os.devnull)
    assert r.returncode == 0, r.stderr.decode()


def test_check_on_a_trace_without_expect_is_exit_2_nothing_to_check() -> None:
    trace = TRACES / "rejections.jsonl"
    r = run_cli("replay", str(trace), "--check", "-o", os.devnull)
    assert r.returncode == 2
    assert "nothing to check: no get_work in this trace records an expect" in r.stderr.decode()


def test_examples_cover_all_three_step_modes() -> None:
    modes = set()
    for trace in EXAMPLES:
        end = records(golden_of(trace).read_bytes())[-1]["end"]
        modes.add(end["mode"])  # type: ignore[index]
    assert modes == {"explicit", "stepped", "plain"}


def test_dump_is_byte_identical_under_any_hash_seed() -> None:
    """Every example under every policy, in one process per hash seed."""
    script = (
        "import sys\n"
        "from schedcli import BUILTIN_POLICIES\n"
        "from tests.helpers import EXAMPLES, run_in_process\n"
        "for t in EXAMPLES:\n"
        "    for p in sorted(BUILTIN_POLICIES):\n"
        "        sys.stdout.buffer.write(run_in_process('replay', str(t), '-p', p).stdout)\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert len(outs) == 1 and len(next(iter(outs))) > 1000


def test_check_shows_the_first_mismatch_side_by_side_and_exits_1(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        [
            HEADER,
            '{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 4}',
            '{"op": "submit", "tid": 2, "sid": 20, "kind": "decode", "size": 1}',
            '{"op": "get_work", "expect": [1, 2]}',
            '{"op": "get_work", "expect": [99]}',
        ],
    )
    r = run_cli("replay", str(trace), "--check")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "step 0" in err and "line 4" in err
    assert "expected" in err and "got" in err
    assert "same tasks, different order" in err
    assert b"Traceback" not in r.stderr


def test_check_names_tasks_that_moved_in_and_out(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        [
            HEADER,
            '{"op": "submit", "tid": 1, "sid": 10, "kind": "decode", "size": 1}',
            '{"op": "submit", "tid": 2, "sid": 20, "kind": "decode", "size": 1}',
            '{"op": "submit", "tid": 3, "sid": 30, "kind": "decode", "size": 1}',
            '{"op": "get_work", "expect": [1, 3]}',
        ],
    )
    r = run_cli("replay", str(trace), "--check")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "moved out (expected, not dispatched): [3]" in err
    assert "moved in (dispatched, not expected): [2]" in err


def test_golden_mismatch_shows_first_divergent_records_and_exits_1(tmp_path: Path) -> None:
    trace = TRACES / "deferral-order.jsonl"
    golden = tmp_path / "g.jsonl"
    lines = golden_of(trace).read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"queued":0', b'"queued":5')
    golden.write_bytes(b"".join(lines))
    r = run_cli("replay", str(trace), "--golden", str(golden))
    assert r.returncode == 1
    assert r.stdout == b""
    err = r.stderr.decode()
    assert "1 of 2 steps differ" in err
    assert "first difference: step 1" in err
    assert "same batch; the record differs: A {'tokens': 9, 'queued': 5}" in err


def test_update_golden_writes_the_dump_and_then_matches(tmp_path: Path) -> None:
    trace = TRACES / "rotation-fairness.jsonl"
    golden = tmp_path / "new.jsonl"
    r = run_cli("replay", str(trace), "--golden", str(golden), "--update-golden", "-o", os.devnull)
    assert r.returncode == 0, r.stderr.decode()
    assert golden.read_bytes() == golden_of(trace).read_bytes()
    assert list(tmp_path.iterdir()) == [golden], "no temporary file left behind"
    assert run_cli("replay", str(trace), "--golden", str(golden)).returncode == 0


def test_interrupted_update_golden_leaves_the_old_golden_whole(tmp_path: Path) -> None:
    golden = tmp_path / "g.jsonl"
    golden.write_bytes(b"old golden\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "schedcli",
            "replay",
            "-",
            "--golden",
            str(golden),
            "--update-golden",
            "-f",
            "jsonl",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}\n')
    proc.stdin.write(b'{"op": "get_work"}\n')
    proc.stdin.flush()
    assert b'"step":0' in proc.stdout.readline()  # ready: mid-replay, the golden half-written
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert b"Traceback" not in err
    assert golden.read_bytes() == b"old golden\n"
    assert list(tmp_path.iterdir()) == [golden]


def test_sigterm_exits_143_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "replay", "-", "-f", "jsonl"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"op": "get_work"}\n')
    proc.stdin.flush()
    assert b'"step":0' in proc.stdout.readline()  # ready: waiting for more input
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert b"Traceback" not in err


def test_output_piped_into_head_ends_quietly() -> None:
    big = ROOT / "traces" / "rotation-fairness.jsonl"
    cmd = f"{sys.executable} -m schedcli replay {big} --drain | head -c 10 > /dev/null"
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, cwd=ROOT, check=False
    )
    assert b"Traceback" not in r.stderr
    assert r.stderr == b""


def test_jsonl_is_the_default_when_stdout_is_not_a_terminal() -> None:
    r = run_cli("replay", str(TRACES / "deferral-order.jsonl"))
    assert r.returncode == 0
    recs = records(r.stdout)
    assert recs[0]["step"] == 0 and "end" in recs[-1]


def test_table_format_shows_steps_events_and_a_summary() -> None:
    r = run_cli("replay", str(TRACES / "rejections.jsonl"), "--format", "table")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "tid 7 is already queued" in out
    assert "prefill chunk of 5 tokens exceeds" in out
    assert "6/10" in out
    for label in ("steps", "dispatched", "cancelled", "rejected submits", "still queued"):
        assert label in out
    assert "mean token utilisation" in out and "peak token utilisation" in out


def test_stdin_and_gzip_give_the_same_dump(tmp_path: Path) -> None:
    trace = TRACES / "cancel-and-rejoin.jsonl"
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    plain = run_cli("replay", str(trace)).stdout
    assert run_cli("replay", str(gz)).stdout == plain
    assert run_cli("replay", "-", input=trace.read_bytes()).stdout == plain
    assert run_cli("replay", "-", input=gzip.compress(trace.read_bytes())).stdout == plain


def test_output_file_option_writes_the_dump(tmp_path: Path) -> None:
    out = tmp_path / "dump.jsonl"
    trace = TRACES / "deferral-order.jsonl"
    r = run_cli("replay", str(trace), "-o", str(out))
    assert r.returncode == 0 and r.stdout == b""
    assert out.read_bytes() == golden_of(trace).read_bytes()


def test_steps_option_keeps_only_that_range() -> None:
    r = run_cli("replay", str(TRACES / "rotation-fairness.jsonl"), "--steps", "1:3")
    recs = records(r.stdout)
    assert [rec["step"] for rec in recs if "step" in rec] == [1, 2]
    assert "end" in recs[-1]


def test_session_option_keeps_only_that_sessions_tasks() -> None:
    r = run_cli("replay", str(TRACES / "rotation-fairness.jsonl"), "--session", "30")
    recs = [rec for rec in records(r.stdout) if "batch" in rec]
    assert [e["tid"] for rec in recs for e in rec["batch"]] == [7, 8, 9]  # type: ignore[attr-defined]
    r = run_cli("replay", str(TRACES / "decode-beside-prefill.jsonl"), "--session", "bob")
    tids = [e["tid"] for rec in records(r.stdout) if "batch" in rec for e in rec["batch"]]  # type: ignore[attr-defined]
    assert tids == ["p3", "d3"]


def test_drain_continues_an_explicit_trace_to_the_end(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        [
            HEADER,
            '{"op": "submit", "tasks": ['
            + ", ".join(f'{{"tid": {i}, "sid": 1, "kind": "prefill", "size": 4}}' for i in range(5))
            + "]}",
            '{"op": "get_work"}',
        ],
    )
    plain = records(run_cli("replay", str(trace)).stdout)
    assert plain[-1]["end"]["queued"] == 3  # type: ignore[index]
    assert plain[-1]["end"]["still_queued"] == [2, 3, 4]  # type: ignore[index]
    drained = records(run_cli("replay", str(trace), "--drain").stdout)
    assert drained[-1]["end"]["queued"] == 0  # type: ignore[index]
    assert drained[-1]["end"]["steps"] == 3  # type: ignore[index]


def test_gaps_between_steps_are_filled_while_work_remains(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        [
            HEADER,
            '{"step": 3, "op": "submit", "tasks": ['
            + ", ".join(f'{{"tid": {i}, "sid": 1, "kind": "prefill", "size": 4}}' for i in range(6))
            + "]}",
            '{"step": 10, "op": "submit", "tid": 9, "sid": 2, "kind": "decode", "size": 1}',
        ],
    )
    recs = records(run_cli("replay", str(trace)).stdout)
    assert [r["step"] for r in recs if "step" in r] == [3, 4, 5, 10]


def test_header_params_apply_and_command_line_overrides_them(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        [HEADER, '{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 8}'],
    )
    rejected = records(run_cli("replay", str(trace)).stdout)
    assert rejected[0]["reason"] == "prefill chunk of 8 tokens exceeds max_prefill_chunk_size 4"
    ok = run_cli(
        "replay", str(trace), "-P", "max_prefill_chunk_size=8", "-P", "max_batch_tokens=20"
    )
    assert ok.returncode == 0, ok.stderr.decode()
    assert records(ok.stdout)[0]["batch"][0]["tid"] == 1  # type: ignore[index]


def test_bad_params_exit_2_naming_the_rule(tmp_path: Path) -> None:
    trace = TRACES / "deferral-order.jsonl"
    r = run_cli("replay", str(trace), "-P", "max_decode_sequences=9")
    assert r.returncode == 2
    assert b"max_decode_sequences (9) must be less than max_batch_tokens (9)" in r.stderr
    r = run_cli("replay", str(trace), "-P", "max_batch_tokns=9")
    assert r.returncode == 2
    assert b"did you mean 'max_batch_tokens'" in r.stderr
    r = run_cli("replay", str(trace), "-P", "max_batch_tokens=lots")
    assert r.returncode == 2 and b"must be an integer" in r.stderr
    r = run_cli("replay", str(trace), "-p", "decode-frist")
    assert r.returncode == 2 and b"did you mean 'decode-first'" in r.stderr
    for out in (r.stderr,):
        assert b"Traceback" not in out


def test_header_param_unknown_to_the_policy_is_reported_at_line_1(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.jsonl",
        ['{"schedcli": 1, "policy": "decode-first", "params": {"max_batch": 5}}'],
    )
    r = run_cli("replay", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:1: header param 'max_batch'")


BAD_LINES = [
    ("not json at all", "not valid JSON"),
    ("[1, 2]", "each line must be a JSON object, not an array"),
    ('{"op": "sumbit", "tid": 1}', "unknown op 'sumbit' (did you mean 'submit'?)"),
    (
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "szie": 1}',
        "unknown field 'szie' in submit (did you mean 'size'?)",
    ),
    (
        '{"op": "submit", "tid": true, "sid": 1, "kind": "decode", "size": 1}',
        "tid must be an integer or a string, not a boolean",
    ),
    (
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1.5}',
        "size must be an integer, not a number with a fraction",
    ),
    ('{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": -1}', "size must be >= 0"),
    (
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": true}',
        "size must be an integer, not a boolean",
    ),
    (
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "token", "size": 1}',
        'kind must be "prefill" or "decode"',
    ),
    ('{"op": "submit", "tid": 1, "kind": "decode", "size": 1}', "has no sid"),
    ('{"op": "submit", "tasks": {"tid": 1}}', "tasks must be an array"),
    ('{"op": "cancel"}', "cancel has no sid"),
    ('{"op": "get_work", "expect": 3}', "expect must be an array of tids"),
    ('{"op": "clear", "sid": 3}', "unknown field 'sid' in clear"),
    ('{"schedcli": 1}', "a header is only allowed on the first line"),
    (
        '{"op": "submit", "tid": 18446744073709551616, "sid": 1, "kind": "decode", "size": 1}',
        "tid is beyond the 64-bit integer range",
    ),
    (
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1, "step": 0}',
        "step 0 goes backwards (line 2 had step 5)",
    ),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_malformed_input_is_file_line_message_and_exit_2(
    tmp_path: Path, line: str, message: str
) -> None:
    trace = write(
        tmp_path,
        "bad.jsonl",
        ['{"schedcli": 1}', '{"op": "get_work", "step": 5}', line],
    )
    r = run_cli("replay", str(trace))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert b"Traceback" not in r.stderr
    assert err.startswith(f"{trace}:3: "), err
    assert message in err, err


def test_unsupported_version_is_rejected(tmp_path: Path) -> None:
    trace = write(tmp_path, "v2.jsonl", ['{"schedcli": 2}'])
    r = run_cli("replay", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:1: unsupported trace format version 2")


def test_missing_file_is_exit_2_without_traceback() -> None:
    r = run_cli("replay", "no/such/trace.jsonl")
    assert r.returncode == 2
    assert r.stderr.decode().startswith("no/such/trace.jsonl: no such file")


def test_validate_reports_every_problem_and_a_count(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "bad.jsonl",
        [
            HEADER,
            '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}',
            "oops",
            '{"op": "cancle", "sid": 1}',
            '{"op": "get_work"}',
            '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "sise": 1}',
        ],
    )
    r = run_cli("validate", str(trace))
    assert r.returncode == 2
    lines = r.stderr.decode().splitlines()
    assert lines[0].startswith(f"{trace}:3: not valid JSON")
    assert lines[1] == (
        f"{trace}:4: unknown op 'cancle' (did you mean 'cancel'?); "
        "expected one of submit, cancel, get_work, clear"
    )
    assert lines[2].startswith(f"{trace}:6: unknown field 'sise' in submit (did you mean 'size'?)")
    assert lines[3] == "3 problem(s); 2 valid event(s)"


def test_validate_accepts_every_example() -> None:
    for trace in EXAMPLES:
        r = run_cli("validate", str(trace))
        assert r.returncode == 0, r.stderr.decode()


def test_exit_codes_are_documented_in_help() -> None:
    r = run_cli("replay", "--help")
    out = r.stdout.decode()
    for code in ("0 ok", "1 ", "2 bad input", "130"):
        assert code in out, out


def test_a_policy_that_never_finishes_is_stopped(tmp_path: Path) -> None:
    plugin = tmp_path / "stuckpolicy.py"
    plugin.write_text(
        "from schedcli.policies.decode_first import DecodeFirstScheduler\n"
        "class Stuck(DecodeFirstScheduler):\n"
        "    def take_batch(self):\n"
        "        return []\n"
    )
    trace = write(
        tmp_path, "t.jsonl", ['{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}']
    )
    env = {"PYTHONPATH": str(tmp_path)}
    r = run_cli("replay", str(trace), "-p", "stuckpolicy:Stuck", "-f", "jsonl", env=env)
    assert r.returncode == 3
    # Its own class declares no fingerprint: nothing proves it stuck for good, so it is
    # stopped at the bound, saying what was seen (engine/stall.py).
    assert b"no batch for 1000 steps with work queued" in r.stderr
    assert b"never" not in r.stderr
    assert b"Stuck: task 1 (the policy gives no reasons)" in r.stderr
    assert len(r.stdout.splitlines()) == 1002  # steps 0-1000 and the partial record
    # A trace that asks for a batch is not drained: the tasks it holds are asked after.
    trace.write_text(trace.read_text() + '{"op": "get_work"}\n')
    r = run_cli("replay", str(trace), "-p", "stuckpolicy:Stuck", env=env)
    assert r.returncode == 3
    assert b"after the trace, it gave none in 1000 calls in a row" in r.stderr
    assert b"whether it ever would is not known" in r.stderr


def test_table_format_can_be_written_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "view.txt"
    r = run_cli("replay", str(TRACES / "rejections.jsonl"), "-f", "table", "-o", str(out))
    assert r.returncode == 0 and r.stdout == b""
    text = out.read_text()
    assert "tid 7 is already queued" in text and "still queued" in text


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a pty")
@pytest.mark.parametrize(
    ("command", "label"),
    [
        ("replay {} -f jsonl -o /dev/null", b"replaying"),
        ("diff {} --b fcfs -f json", b"comparing"),
        ("stats {} -f json", b"measuring"),
        ("report {} -o /dev/null", b"reporting"),
    ],
)
def test_progress_bar_shows_on_a_terminal_stderr(
    tmp_path: Path, command: str, label: bytes
) -> None:
    trace = tmp_path / "long.jsonl"
    lines = [
        f'{{"op": "submit", "tid": {i}, "sid": {i % 50}, "kind": "decode", "size": 1}}\n'
        '{"op": "get_work"}\n'
        for i in range(60_000)
    ]
    trace.write_text("".join(lines))
    cmd = f"{sys.executable} -m schedcli {command.format(trace)}"
    r = subprocess.run(
        ["script", "-qec", cmd, "/dev/null"],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert r.returncode in (0, 1), r.stdout  # diff exits 1 when the policies differ
    assert label in r.stdout  # the pty carries stderr's progress bar


def test_a_command_run_in_this_process_leaves_stop_signals_live_for_what_runs_next() -> None:
    from schedcli.streams.interrupt import guard

    assert run_cli("replay", str(TRACES / "rotation-fairness.jsonl")).returncode == 0
    # The exit holds stops for its last flush; left held, a Ctrl-C in the tests (or the
    # fuzzer) that run in this process afterwards would wait forever.
    assert (guard.writing, guard.held) == (False, None)
