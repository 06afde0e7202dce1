"""Exit 0 means the answer is true: checks say what they covered, commands agree on a file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given

from schedcli import DecodeFirstScheduler, Task
from schedcli.record import RecordingScheduler
from tests.formats.test_hostile_input import FUZZ, mutated_traces
from tests.helpers import EXAMPLES, needs_real, run_cli


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


DECODE = {"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}


# --- validate and replay agree (row 5) ------------------------------------------------------


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
    trace = _write(tmp_path / "t.jsonl", lines)
    replayed = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    validated = run_cli("validate", str(trace))
    assert replayed.returncode == validated.returncode == 2
    refusal = replayed.stderr.decode().strip()
    assert refusal.startswith(f"{trace}:2: ") and refusal in validated.stderr.decode()


def _agree(path: Path) -> None:
    replayed = run_cli("replay", str(path), "-o", str(path.with_suffix(".out")))
    validated = run_cli("validate", str(path))
    assert validated.returncode in (0, 2)
    refused = replayed.returncode == 2
    assert refused == (validated.returncode == 2), (replayed.stderr, validated.stderr)
    if refused:  # the replay's refusal is among the problems validate lists
        assert replayed.stderr.decode().splitlines()[0] in validated.stderr.decode()


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
    trace = _write(tmp_path / "t.jsonl", [{"schedcli": 1, "policy": "nope"}, DECODE])
    assert run_cli("validate", str(trace)).returncode == 2
    assert run_cli("validate", str(trace), "-p", "fcfs").returncode == 0
    r = run_cli("validate", str(trace), "-p", "fcfs", "-P", "max_num_seqs=0")
    assert r.returncode == 2 and b"max_num_seqs must be >= 1" in r.stderr


# --- --check says what it covered (row 8) -----------------------------------------------------


def test_check_says_how_many_batches_it_checked(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [DECODE, {"op": "get_work", "expect": [1]}, {"op": "get_work"}, {"op": "get_work"}],
    )
    r = run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0
    assert f"{trace}: checked 1 of 3 batches" in r.stderr.decode()


def test_require_all_fails_when_a_batch_records_no_expect(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl", [DECODE, {"op": "get_work", "expect": [1]}, {"op": "get_work"}]
    )
    r = run_cli("replay", str(trace), "--check", "--require-all", "-o", str(tmp_path / "d"))
    assert r.returncode == 1
    assert "1 of 2 batches record no expect (--require-all)" in r.stderr.decode()
    full = _write(tmp_path / "f.jsonl", [DECODE, {"op": "get_work", "expect": [1]}])
    ok = run_cli("replay", str(full), "--check", "--require-all", "-o", str(tmp_path / "d"))
    assert ok.returncode == 0


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


# --- a recording names a policy its replay resolves (row 9) ---------------------------------


@pytest.mark.parametrize("plugin", ["Greedy", "Nameless"])
def test_a_recording_of_a_plugin_replays_under_that_plugin(tmp_path: Path, plugin: str) -> None:
    import tests.plugin_policies as plugins

    cls = getattr(plugins, plugin)
    out = io.BytesIO()
    rec = RecordingScheduler(cls(), out)
    rec.submit([Task(1, 10, "decode", 1)])
    rec.submit([Task(2, 11, "decode", 1)])
    rec.get_work()
    rec.get_work()
    path = tmp_path / "rec.jsonl"
    path.write_bytes(out.getvalue())
    header = orjson.loads(out.getvalue().splitlines()[0])
    assert header["policy"] == f"tests.plugin_policies:{plugin}"
    # A trace names code, never supplies it (#55): an import string in a header is refused,
    # saying how to run it; given on the command line, the recording replays under it.
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "an import string (module:Class)" in r.stderr.decode()
    assert "give it with -p on the command line" in r.stderr.decode()
    r = run_cli("replay", str(path), "-p", header["policy"], "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr


def test_a_recording_under_a_policy_that_does_not_load_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{"schedcli": 1, "policy": "greedy"}, DECODE])
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert f"{path}:1: recorded under policy 'greedy', which does not load here" in (
        r.stderr.decode()
    )


def test_an_old_recording_of_an_unnamed_class_is_refused_not_replayed_as_decode_first(
    tmp_path: Path,
) -> None:
    header = {"schedcli": 1, "policy": None, "meta": {"class": "my.mod:Thing"}}
    path = _write(tmp_path / "t.jsonl", [header, DECODE, {"op": "get_work", "expect": [1]}])
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "recorded under policy class my.mod:Thing" in r.stderr.decode()
    assert "-p my.mod:Thing" in r.stderr.decode()
    assert run_cli("validate", str(path)).returncode == 2


# --- a dump is complete only with its end record (row 7) ------------------------------------


def _dump(tmp_path: Path, trace: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    r = run_cli("replay", str(trace), "-f", "jsonl", "-o", str(out), *args)
    assert r.returncode in (0, 3), r.stderr
    return out


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


def test_diff_and_golden_agree_on_a_dump_cut_short(tmp_path: Path) -> None:
    full = _dump(tmp_path, EXAMPLES[0], "full.jsonl")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:-1]))
    diffed = run_cli("diff", str(full), str(cut), "--allow-incomplete")
    golden = run_cli("replay", str(EXAMPLES[0]), "--golden", str(cut))
    assert diffed.returncode == 1  # the end record differs, and diff says so
    assert golden.returncode == 2  # a golden must be complete
    assert b"incomplete dump (no end record)" in golden.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_diff_and_golden_give_the_same_verdict_on_every_pair(example: Path, tmp_path: Path) -> None:
    mine = _dump(tmp_path, example, "mine.jsonl")
    for other_policy in ("fcfs", "fair"):
        other = _dump(tmp_path, example, f"{other_policy}.jsonl", "-p", other_policy)
        diffed = run_cli("diff", str(other), str(mine))
        golden = run_cli("replay", str(example), "--golden", str(other))
        assert diffed.returncode == golden.returncode, (diffed.stdout, golden.stderr)


def test_a_replay_that_breaks_the_contract_leaves_a_dump_marked_partial(tmp_path: Path) -> None:
    trace = _write(
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


# --- the missing-golden hint and every differing record (rows 12, 13) -----------------------


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


def test_every_differing_record_is_shown_with_its_field_and_both_values(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 200},
            {"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 200},
            {"op": "cancel", "sid": 2},
            {"op": "get_work"},
        ],
    )
    a = _dump(tmp_path, trace, "a.jsonl")
    b = _dump(tmp_path, trace, "b.jsonl", "-P", "max_prefill_chunk_size=150")
    r = run_cli("diff", str(a), str(b))
    assert r.returncode == 1
    out = r.stdout.decode()
    assert "records that differ" in out
    assert "submit (line 1, only in B):" in out and "submit (line 2, only in B):" in out
    assert "cancel (line 3):" in out and "dropped: A [2]  B []" in out
    assert "end:" in out and "rejected: A 0  B 2" in out
    assert "{'" not in out  # no Python dicts
    data = orjson.loads(run_cli("diff", str(a), str(b), "-f", "json").stdout)
    kinds = [x["kind"] for x in data["records_differing"]]
    assert kinds == ["submit", "submit", "cancel", "end"]


# --- outputs of a run that stops are kept and marked partial (row 15) -----------------------

ONE_REQUEST = '{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n'


def test_simulate_stopped_by_a_contract_break_keeps_its_trace_marked_partial(
    tmp_path: Path,
) -> None:
    workload, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    workload.write_text(ONE_REQUEST)
    plugin = "tests.plugin_policies:NewestFirst"
    r = run_cli("simulate", str(workload), "-p", plugin, "--chunk-size", "16", "-o", str(trace))
    assert r.returncode == 3
    assert f"note: the run so far is in {trace} (the trace marked partial)" in r.stderr.decode()
    lines = [orjson.loads(x) for x in trace.read_bytes().splitlines()]
    assert lines[0]["policy"] == plugin  # a reference the replay resolves, given with -p
    assert "broke the Scheduler contract" in lines[-1]["partial"]["reason"]
    assert run_cli("replay", str(trace), "-p", plugin, "-o", str(tmp_path / "d")).returncode == 3
    small = tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "-p", plugin, "--until", "contract", "-o", str(small))
    assert r.returncode == 0, r.stderr
    partial = run_cli("validate", str(trace), "-p", plugin)
    assert partial.returncode == 2 and b"partial" in partial.stderr  # said, not passed
    assert run_cli("validate", str(trace), "-p", plugin, "--allow-incomplete").returncode == 0


def test_a_partial_trace_is_refused_after_its_events_unless_allowed(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}\n'
        '{"op": "get_work", "expect": [1]}\n'
        '{"partial": {"reason": "terminated"}}\n'
    )
    dump = tmp_path / "d.jsonl"
    r = run_cli("replay", str(trace), "-f", "jsonl", "-o", str(dump))
    assert r.returncode == 2
    assert f"{trace}:3: partial trace (terminated)" in r.stderr.decode()
    assert orjson.loads(dump.read_bytes().splitlines()[-1])["partial"]  # and so is its dump
    for argv in (["stats", str(trace)], ["diff", str(trace), "--b", "fcfs"]):
        assert run_cli(*argv).returncode == 2, argv
    ok = run_cli("replay", str(trace), "--check", "--allow-incomplete", "-o", str(dump))
    assert ok.returncode == 0, ok.stderr
    trace.write_text(trace.read_text() + '{"op": "get_work"}\n')
    r = run_cli("validate", str(trace), "--allow-incomplete")
    assert r.returncode == 2 and b":4: a line after the partial marker at line 3" in r.stderr


def test_simulate_terminated_keeps_whole_lines_and_a_partial_marker(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    workload, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    workload.write_text(
        "".join(
            json.dumps({"sid": i, "arrival": i * 0.001, "prompt_tokens": 900, "output_tokens": 900})
            + "\n"
            for i in range(3000)
        )
    )
    argv = [sys.executable, "-m", "schedcli", "simulate", str(workload), "-o", str(trace)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = trace.read_bytes().splitlines()
    assert len(lines) > 2
    assert orjson.loads(lines[-1]) == {"partial": {"reason": "terminated"}}
    r = run_cli("replay", str(trace), "--check", "--allow-incomplete", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr


def test_a_file_recording_records_the_call_that_raised() -> None:
    class Faulty(DecodeFirstScheduler):
        def cancel(self, sid: object) -> list[Task]:  # type: ignore[override]
            raise ValueError("no")

    out = io.BytesIO()
    rec = RecordingScheduler(Faulty(10, 2, 4), out)
    with pytest.raises(ValueError):
        rec.cancel(7)
    last = orjson.loads(out.getvalue().splitlines()[-1])
    assert last == {"op": "cancel", "sid": 7, "meta": {"raised": "ValueError: no"}}


# --- messages that said the wrong thing ---------------------------------------------------


def test_a_size_written_as_a_float_is_called_that_not_out_of_range(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 4.0}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "size must be an integer, not a number written with a decimal point" in (
        r.stderr.decode()
    )
    trace.write_text('{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1e30}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert b"size is beyond the 64-bit integer range" in r.stderr


@pytest.mark.parametrize("data", [b"[1, 2, 3]\n", b"\x7fELF\x02\x01,\x00\x00,\x01\n"])
def test_a_json_array_or_a_binary_is_not_called_a_csv_trace(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    for argv in (["replay", str(path)], ["convert", "auto", str(path)], ["stats", str(path)]):
        r = run_cli(*argv)
        assert r.returncode == 2
        assert b"CSV" not in r.stderr, argv


def test_a_null_sid_says_null_not_missing(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "submit", "tid": 1, "sid": null, "kind": "decode", "size": 1}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert r.stderr.decode().strip() == f"{trace}:1: sid must be an integer or a string, not null"


def test_explain_on_an_empty_trace_says_it_has_no_steps(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    r = run_cli("explain", str(trace), "--step", "3")
    assert r.returncode == 2
    assert r.stderr.decode().strip() == f"{trace}: there is no step 3: the replay has no steps"


@needs_real
def test_convert_with_a_window_does_not_undercount_what_it_left_out(tmp_path: Path) -> None:
    from tests.helpers import REAL

    azure = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    r = run_cli(
        "convert", "azure", str(azure), "--start", "10", "--duration", "5",
        "-o", str(tmp_path / "w.jsonl"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    said = r.stderr.decode()
    assert "outside the window" not in said  # the rows after the window were never read
    assert "before the window (--start)" in said
    assert "stopped at the window's end (line" in said and "rest not read" in said


def test_simulate_notes_rejections_once_per_reason_not_per_chunk_size(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            json.dumps(
                {"sid": i, "arrival": i * 0.01, "prompt_tokens": 300 + i, "output_tokens": 2}
            )
            + "\n"
            for i in range(5)
        )
    )
    r = run_cli("simulate", str(workload), "-p", "fcfs", "--chunk-size", "1000")
    assert r.returncode == 0
    note = r.stderr.decode()
    assert "5 of 5 requests were rejected" in note
    assert "  5: prefill chunk of N tokens exceeds max_prefill_chunk_size 256" in note
    assert note.count("exceeds") == 1
