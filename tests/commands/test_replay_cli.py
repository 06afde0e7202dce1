"""`schedcli replay` and `schedcli validate`, run as the real command."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given

from schedcli import DecodeFirstScheduler, Task
from schedcli.record import RecordingScheduler
from tests.conftest import Cli
from tests.formats.test_hostile_input import FUZZ, mutated_traces
from tests.helpers import REQUEST_HEADER, ROOT, TOY, TRACES, refused, run_cli, write_lines

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


ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 10, "max_tokens": 3, "t": 0.0}


DECODE = {"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}


def _agree(path: Path) -> None:
    replayed = run_cli("replay", str(path), "-o", str(path.with_suffix(".out")))
    validated = run_cli("validate", str(path))
    assert validated.returncode in (0, 2)
    refused = replayed.returncode == 2
    assert refused == (validated.returncode == 2), (replayed.stderr, validated.stderr)
    if refused:  # the replay's refusal is among the problems validate lists
        assert replayed.stderr.decode().splitlines()[0] in validated.stderr.decode()


def _recording(tmp_path: Path) -> Path:
    """A recording whose one rejected submit a differently configured replay accepts."""
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), out)
    rec.submit([Task(1, 10, "prefill", 9)])  # over the 4-token chunk limit: rejected
    rec.submit([Task(2, 10, "decode", 1)])
    rec.get_work()
    path = tmp_path / "rec.jsonl"
    path.write_bytes(out.getvalue())
    return path


GOLDENS = TRACES / "golden"


@pytest.mark.parametrize(
    "event",
    [
        {"op": "abort", "rid": "a", "t": 0.1},
        {"op": "arrive", "rid": "a", "prompt_tokens": 1, "max_tokens": 1},  # refused: held
        "split",
    ],
    ids=["abort", "rejected-arrival", "update"],
)
def test_the_table_view_draws_aborts_rejections_and_updates(tmp_path: Path, event: object) -> None:
    events: list[dict[str, object]] = [ARRIVE]
    if event == "split":
        events += [{"op": "schedule"}, {"op": "update"}] * 4
    else:
        events.append(event)  # type: ignore[arg-type]
    trace = write_lines(tmp_path / "r.jsonl", [REQUEST_HEADER, *events])
    r = run_cli("replay", str(trace), "-f", "table")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    said = {"abort": "abort", "rejected-arrival": "rejected", "update": "update, finished"}
    assert any(word in out for word in said.values()), out


@pytest.mark.parametrize(
    "header",
    [
        {**REQUEST_HEADER, "params": 5},
        {**REQUEST_HEADER, "unknown": 1},
        {**REQUEST_HEADER, "schedcli": 2},
        {**REQUEST_HEADER, "policy": 1},
        {**REQUEST_HEADER, "meta": json.loads("[" * 300 + "]" * 300)},
    ],
    ids=["params", "unknown-key", "version", "policy", "deep-meta"],
)
def test_validate_locates_a_malformed_request_header_as_replay_does(
    tmp_path: Path, header: dict[str, object]
) -> None:
    trace = write_lines(tmp_path / "r.jsonl", [header, ARRIVE])
    validated, replayed = run_cli("validate", str(trace)), run_cli("replay", str(trace))
    assert (validated.returncode, replayed.returncode) == (2, 2), validated.stderr
    first = replayed.stderr.decode().splitlines()[0]
    assert first.startswith(f"{trace}:1: ") and first in validated.stderr.decode()


@pytest.mark.parametrize("level", ["task", "request"])
def test_a_header_that_is_not_json_is_one_problem(tmp_path: Path, level: str) -> None:
    header = json.dumps(REQUEST_HEADER if level == "request" else {"schedcli": 1, "policy": "fcfs"})
    trace = tmp_path / "t.jsonl"
    trace.write_text(header[:-1] + "\n")  # the header's closing brace lost
    r = run_cli("validate", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().count(f"{trace}:1: not valid JSON") == 1


def test_follow_of_a_request_level_trace_is_refused(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "r.jsonl", [REQUEST_HEADER, ARRIVE])
    r = run_cli("replay", str(trace), "--follow")
    assert r.returncode == 2 and b"--follow" in r.stderr


def test_a_split_trace_counts_its_checked_calls_in_one_unit(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 8, "output_tokens": 3}\n')
    simulated = run_cli("simulate", str(workload), "-p", TOY, "-o", str(out), "-f", "json")
    assert simulated.returncode == 0
    # the same traffic as split steps: each step a schedule, then its update
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    split: list[dict[str, object]] = [lines[0]]
    for x in lines[1:]:
        if x.get("op") == "step":
            e = x["expect"]
            split.append({"op": "schedule", "expect": {"batch": e["batch"], "preempted": []}})
            split.append({"op": "update", "expect": {"finished": e["finished"]}})
        else:
            split.append(x)
    trace = write_lines(tmp_path / "split.jsonl", split)
    r = run_cli("replay", str(trace), "--check", "-o", os.devnull)
    steps = sum(1 for x in split if x.get("op") == "schedule")
    assert r.returncode == 0, r.stderr
    assert f"checked {2 * steps} of {2 * steps} calls".encode() in r.stderr


def test_require_all_counts_at_the_request_level(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl",
        [REQUEST_HEADER, ARRIVE, {"op": "step", "expect": {"batch": [["a", 10]], "preempted": [],
                                                   "finished": []}},
         {"op": "step"}],
    )  # fmt: skip
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 0
    r = run_cli("replay", str(trace), "--check", "--require-all", "-o", os.devnull)
    assert r.returncode == 1 and b"--require-all" in r.stderr


@pytest.mark.parametrize(
    "lines",
    [
        [{**DECODE, "step": 0}, {"op": "get_work"}],
        [{"op": "get_work"}, {**DECODE, "step": 3}],
    ],
    ids=["step-then-get_work", "get_work-then-step"],
)
def test_validate_refuses_a_trace_mixing_steps_and_get_work_as_replay_does(
    tmp_path: Path, lines: list[dict[str, object]]
) -> None:
    trace = write_lines(tmp_path / "t.jsonl", lines)
    replayed = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    validated = run_cli("validate", str(trace))
    assert replayed.returncode == validated.returncode == 2
    refusal = replayed.stderr.decode().strip()
    assert refusal.startswith(f"{trace}:2: ") and refusal in validated.stderr.decode()


@pytest.mark.slow
@FUZZ
@given(data=mutated_traces())
def test_validate_and_replay_agree_on_every_hostile_trace(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("agree") / "t.jsonl"
    path.write_bytes(data)
    _agree(path)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_validate_and_replay_agree_on_every_example(example: Path, tmp_path: Path) -> None:
    copy = tmp_path / example.name
    copy.write_bytes(example.read_bytes())
    _agree(copy)


def test_validate_takes_the_policy_replay_would_use(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "t.jsonl", [{"schedcli": 1, "policy": "nope"}, DECODE])
    assert run_cli("validate", str(trace)).returncode == 2
    assert run_cli("validate", str(trace), "-p", "fcfs").returncode == 0
    r = run_cli("validate", str(trace), "-p", "fcfs", "-P", "max_num_seqs=0")
    assert r.returncode == 2 and b"max_num_seqs must be >= 1" in r.stderr


def test_check_says_how_many_batches_it_checked(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "t.jsonl",
        [DECODE, {"op": "get_work", "expect": [1]}, {"op": "get_work"}, {"op": "get_work"}],
    )
    r = run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0
    assert f"{trace}: checked 1 of 3 batches" in r.stderr.decode()


def test_require_all_fails_when_a_batch_records_no_expect(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "t.jsonl", [DECODE, {"op": "get_work", "expect": [1]}, {"op": "get_work"}]
    )
    r = run_cli("replay", str(trace), "--check", "--require-all", "-o", str(tmp_path / "d"))
    assert r.returncode == 1
    assert "1 of 2 batches record no expect (--require-all)" in r.stderr.decode()
    full = write_lines(tmp_path / "f.jsonl", [DECODE, {"op": "get_work", "expect": [1]}])
    ok = run_cli("replay", str(full), "--check", "--require-all", "-o", str(tmp_path / "d"))
    assert ok.returncode == 0


def test_check_compares_a_recorded_rejection_with_the_replays_outcome(tmp_path: Path) -> None:
    path = _recording(tmp_path)
    same = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert same.returncode == 0, same.stderr
    assert "checked 1 of 1 batches and 2 submit outcomes" in same.stderr.decode()
    wider = run_cli(
        "replay", str(path), "--check", "-P", "max_prefill_chunk_size=9",
        "-P", "max_batch_tokens=11", "-o", str(tmp_path / "d"),
    )  # fmt: skip
    assert wider.returncode == 1
    assert f"{path}:2: the recording rejected this submit" in wider.stderr.decode()


def test_check_fails_when_the_replay_rejects_what_the_recording_accepted(tmp_path: Path) -> None:
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), out)
    rec.submit([Task(1, 10, "prefill", 4)])
    rec.get_work()
    path = tmp_path / "rec.jsonl"
    path.write_bytes(out.getvalue())
    r = run_cli(
        "replay", str(path), "--check", "-P", "max_prefill_chunk_size=2",
        "-P", "max_batch_tokens=6", "-o", str(tmp_path / "d"),
    )  # fmt: skip
    assert r.returncode == 1
    assert f"{path}:2: the recording accepted this submit; the replay rejected it" in (
        r.stderr.decode()
    )


def test_a_recording_under_a_policy_that_does_not_load_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [{"schedcli": 1, "policy": "greedy"}, DECODE])
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert f"{path}:1: recorded under policy 'greedy', which does not load here" in (
        r.stderr.decode()
    )


def test_an_old_recording_of_an_unnamed_class_is_refused_not_replayed_as_decode_first(
    tmp_path: Path,
) -> None:
    header = {"schedcli": 1, "policy": None, "meta": {"class": "my.mod:Thing"}}
    path = write_lines(tmp_path / "t.jsonl", [header, DECODE, {"op": "get_work", "expect": [1]}])
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "recorded under policy class my.mod:Thing" in r.stderr.decode()
    assert "-p my.mod:Thing" in r.stderr.decode()
    assert run_cli("validate", str(path)).returncode == 2


def test_a_replay_that_breaks_the_contract_leaves_a_dump_marked_partial(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "t.jsonl",
        [{"op": "submit", "tid": i, "sid": i % 3, "kind": "decode", "size": 1} for i in range(5)],
    )
    out = tmp_path / "d.jsonl"
    r = run_cli(
        "replay", str(trace), "-p", "tests.plugin_policies:LosesTasks", "-f", "jsonl",
        "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 3
    last = orjson.loads(out.read_bytes().splitlines()[-1])
    assert last["partial"]["reason"].startswith("policy 'loses-tasks' broke the Scheduler")
    s = run_cli("stats", str(out))
    assert s.returncode == 2 and b"incomplete dump (partial: policy 'loses-tasks'" in s.stderr


def test_the_missing_golden_hint_repeats_the_policy_and_params(tmp_path: Path) -> None:
    golden = tmp_path / "g.jsonl"
    r = run_cli(
        "replay", str(EXAMPLES[0]), "-p", "fcfs", "-P", "max_num_seqs=4", "--golden", str(golden)
    )
    assert r.returncode == 2
    hint = r.stderr.decode().split("run: ", 1)[1].strip()
    assert hint == (
        f"schedcli replay {EXAMPLES[0]} -p fcfs -P max_num_seqs=4 --golden {golden} --update-golden"
    )
    import shlex

    assert run_cli(*shlex.split(hint)[1:]).returncode == 0
    assert run_cli(*shlex.split(hint)[1:-1]).returncode == 0  # the golden it made passes


@pytest.mark.parametrize(("field", "value"), [("tokens", 8.0), ("rejected", False)])
def test_a_golden_number_of_another_json_type_is_a_difference(
    tmp_path: Path, field: str, value: object
) -> None:
    trace = TRACES / "rotation-fairness.jsonl"
    golden = tmp_path / "g.jsonl"
    source = (GOLDENS / "rotation-fairness.dump.jsonl").read_bytes()
    lines = [orjson.loads(x) for x in source.splitlines()]
    for record in lines:
        target = record.get("end", record)
        if field in target and type(target[field]) is int and target[field] == value:
            target[field] = value
            break
    else:
        raise AssertionError(f"no {field} == {value!r} in the golden")
    golden.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    assert run_cli("replay", str(trace), "--golden", str(golden)).returncode == 1
    dump = tmp_path / "d.jsonl"
    run_cli("replay", str(trace), "-f", "jsonl", "-o", str(dump))
    assert run_cli("diff", str(golden), str(dump)).returncode == 1  # diff of dumps agrees


def test_a_check_mismatch_names_its_file_and_line(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "t.jsonl", [DECODE, {"op": "get_work", "expect": [2]}])
    r = run_cli("replay", str(trace), "--check", "-f", "jsonl", "-o", os.devnull)
    assert r.returncode == 1
    assert f"{trace}:2: step 0 differs from the recorded batch" in r.stderr.decode()


def test_an_interrupted_follow_check_says_what_it_checked(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "t.jsonl", [DECODE, {"op": "get_work", "expect": [1]}])
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "replay", "--follow", str(trace), "--check",
         "-f", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert orjson.loads(proc.stdout.readline())["step"] == 0
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert b"checked 1 of 1 batches, before it stopped" in err


def test_a_get_works_own_step_skipping_numbers_never_renumbers_the_batches(
    tmp_path: Path, cli: Cli
) -> None:
    """docs/trace-format.md: a recorder's count on get_work may skip; batches still count
    get_work calls from 0, so explain --step 1 is the second call's batch."""
    trace = write_lines(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1},
            {"op": "get_work", "step": 5},
            {"op": "submit", "tid": 2, "sid": 1, "kind": "decode", "size": 1},
            {"op": "get_work", "step": 9},
        ],
    )
    r = cli("replay", trace, "-f", "jsonl")
    assert r.code == 0, r.stderr
    steps = [orjson.loads(x)["step"] for x in r.lines if b'"step"' in x]
    assert steps == [0, 1]
    assert cli("explain", trace, "--step", "1", "-f", "json").code == 0
    assert cli("explain", trace, "--step", "9").code == 2


# --- a trace that begins from a state (docs/trace-format.md) -------------------------------


def _from_state(tmp_path: Path, trace: Path, step: int, **swap: object) -> Path:
    """``trace`` cut at ``step`` (``state_at``), its state line's fields swapped."""
    from schedcli.engine.levels.task.states import state_at

    lines = [orjson.loads(line) for line in state_at(str(trace), step)]
    lines[1].update(swap)
    return write_lines(tmp_path / f"from-{step}.jsonl", lines)


def test_a_trace_from_a_state_replays_the_full_replays_batches_and_end(tmp_path: Path) -> None:
    trace = TRACES / "cancel-and-rejoin.jsonl"
    full = records(run_cli("replay", str(trace), "-f", "jsonl").stdout)
    for step in (0, 1, 2):
        cut = _from_state(tmp_path, trace, step)
        r = run_cli("replay", str(cut), "-f", "jsonl", "--check")
        assert r.returncode == 0, r.stderr
        got = records(r.stdout)
        batches = [x for x in got if "step" in x]
        assert batches == [x for x in full if "step" in x and x["step"] >= step]  # type: ignore[operator]
        assert got[-1] == full[-1]  # the end record: the counts go on from the ledger's
        assert b"checked" in r.stderr


def _refused_alike(trace: Path, *args: str) -> str:
    """replay's exit 2 at the state line, and validate's first problem in its words."""
    err = refused(run_cli("replay", str(trace), *args)).splitlines()[-1]  # after any note
    assert err.startswith(f"{trace}:"), err
    said = refused(run_cli("validate", str(trace), *args)).splitlines()
    assert err in said, (said, err)
    return err


def test_a_state_restores_only_into_the_policy_it_names(tmp_path: Path) -> None:
    cut = _from_state(tmp_path, TRACES / "cancel-and-rejoin.jsonl", 1)
    err = _refused_alike(cut, "-p", "fcfs")
    assert err == (
        f"{cut}:2: the state is of policy 'decode-first': a state restores only into the "
        "policy it names, not into 'fcfs': replay it under decode-first"
    )


def test_a_policy_without_snapshots_cannot_replay_a_trace_from_a_state(tmp_path: Path) -> None:
    cut = _from_state(tmp_path, TRACES / "cancel-and-rejoin.jsonl", 1)
    err = _refused_alike(cut, "-p", "tests.plugin_policies:OnePerBatch")
    assert "has no snapshots: it does not implement snapshot() and restore()" in err
    assert err.startswith(f"{cut}:2: policy ")


def test_a_bad_state_is_refused_at_its_line_naming_the_field(tmp_path: Path) -> None:
    trace = TRACES / "cancel-and-rejoin.jsonl"
    good = orjson.loads(_from_state(tmp_path, trace, 1).read_text().splitlines()[1])
    state = good["state"]
    cases: list[tuple[dict[str, object], str]] = [
        ({"state": {**state, "version": 9}}, "state.version: is 9"),
        ({"state": {**state, "extra": 1}}, "state: has an unknown field 'extra'"),
        ({"state": {**state, "decodes": [99]}}, "state.decodes[0]: tid 99"),
        (
            {"ledger": {**good["ledger"], "tokens": 2**63 - 1}},
            f"ledger: tokens {2**63 - 1} + the 8 tokens the state holds queued is past ",
        ),
        (
            {"ledger": {**good["ledger"], "accepted": 9}},
            "ledger: accepted 9 - dispatched 2 - cancelled 3 = 4 tasks still queued, but "
            "the state holds 2",
        ),
    ]
    for swap, said in cases:
        cut = _from_state(tmp_path, trace, 1, **swap)
        err = _refused_alike(cut)
        assert err.startswith(f"{cut}:2: {said}"), err


def test_a_trace_from_a_state_is_explicit_from_its_step(tmp_path: Path) -> None:
    cut = _from_state(tmp_path, TRACES / "cancel-and-rejoin.jsonl", 1)
    lines = cut.read_text().splitlines()
    lines.insert(2, '{"op": "cancel", "sid": 1, "step": 4}')
    cut.write_text("\n".join(lines) + "\n")
    err = _refused_alike(cut)
    assert err == (
        f"{cut}:3: cancel with a step in an explicit trace (the state line at line 2 made it "
        "one); a trace uses get_work events or steps, not both"
    )


def test_a_request_level_trace_cannot_begin_from_a_state(tmp_path: Path) -> None:
    state = {"op": "state", "step": 0, "state": {}, "ledger": {"accepted": 0, "dispatched": 0,
             "cancelled": 0, "rejected": 0, "rejected_tasks": 0, "tokens": 0}}  # fmt: skip
    trace = write_lines(tmp_path / "r.jsonl", [REQUEST_HEADER, state])
    err = _refused_alike(trace)
    assert err == f"{trace}:2: request-level policies have no snapshots: a request-level trace " \
        "cannot begin from a state"  # fmt: skip
    no_policy = {"schedcli": 1, "level": "request"}  # replay refuses the state first
    trace = write_lines(tmp_path / "r.jsonl", [no_policy, state, {"op": "step"}])
    assert _refused_alike(trace) == err


def test_tokens_dispatched_past_int64_are_refused_as_input_not_an_internal_error(
    tmp_path: Path, cli: Cli
) -> None:
    """Each size is within its bound; their sum is written in the end record (and stats):
    past 2^63-1 it is the trace's limit (exit 2), never an exit 4 from the JSON writer."""
    half = 2**62
    trace = write_lines(
        tmp_path / "t.jsonl",
        [{"op": "submit", "tid": i, "sid": i, "kind": "prefill", "size": half} for i in range(5)],
    )
    params = ["-P", f"max_batch_tokens={2**63 - 1}", "-P", f"max_prefill_chunk_size={half}"]
    r = cli("replay", trace, *params, "-f", "jsonl")
    assert r.code == 2, r.stderr
    assert r.stderr == (
        f"{trace}: the tokens dispatched up to step 1 add up to {2**63}, past {2**63 - 1} "
        "(2^63-1), the largest count schedcli writes\n"
    )
    assert b'"partial"' in r.lines[-1]
    assert cli("stats", trace, *params).code == 2
    one = write_lines(
        tmp_path / "one.jsonl",
        [{"op": "submit", "tid": 0, "sid": 0, "kind": "prefill", "size": half}],
    )
    assert cli("replay", one, *params, "-f", "jsonl").code == 0


def test_a_state_whose_step_numbers_get_work_past_int64_is_refused_at_that_line(
    tmp_path: Path,
) -> None:
    cut = _from_state(tmp_path, TRACES / "cancel-and-rejoin.jsonl", 0)
    lines = cut.read_text().splitlines()
    state = orjson.loads(lines[1])
    state["step"] = 2**63 - 1  # the first get_work is step 2^63-1, the next one past it
    lines[1] = orjson.dumps(state).decode()
    cut.write_text("\n".join(lines) + "\n")
    err = _refused_alike(cut)
    assert err.startswith(f"{cut}:10: this get_work would be step {2**63}, past "), err
    cut.write_text("\n".join(lines[:3]) + "\n")  # one get_work; --drain takes the next step
    r = run_cli("replay", str(cut), "--drain", "-f", "jsonl")
    assert r.returncode == 2 and b"would take step 9223372036854775808" in r.stderr, r.stderr
    assert all(x.get("step", 0) <= 2**63 - 1 for x in records(r.stdout))  # type: ignore[operator]
