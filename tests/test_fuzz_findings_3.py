"""Fuzzing the request level and the suites (#39): each root a test, named for what it
checks. The request level runs without vLLM here, under the tests' toy policy
(``tests.doubles:ToyRequests``), as the fuzz targets do."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from schedcli import DecodeFirstScheduler, Task
from schedcli.record import RecordingScheduler
from tests.conftest import Cli
from tests.helpers import ROOT, TOY_NAME, TRACES, run_cli, run_process

TOY = "tests.doubles:ToyRequests"
HEADER = {"schedcli": 1, "level": "request", "policy": TOY_NAME, "params": {}}
ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 10, "max_tokens": 3, "t": 0.0}


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return path


# 1: the table view of every request-level record


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
    trace = _write(tmp_path / "r.jsonl", [HEADER, *events])
    r = run_cli("replay", str(trace), "-f", "table")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    said = {"abort": "abort", "rejected-arrival": "rejected", "update": "update, finished"}
    assert any(word in out for word in said.values()), out


# 2: validate of a malformed request-level header


@pytest.mark.parametrize(
    "header",
    [
        {**HEADER, "params": 5},
        {**HEADER, "unknown": 1},
        {**HEADER, "schedcli": 2},
        {**HEADER, "policy": 1},
        {**HEADER, "meta": json.loads("[" * 300 + "]" * 300)},
    ],
    ids=["params", "unknown-key", "version", "policy", "deep-meta"],
)
def test_validate_locates_a_malformed_request_header_as_replay_does(
    tmp_path: Path, header: dict[str, object]
) -> None:
    trace = _write(tmp_path / "r.jsonl", [header, ARRIVE])
    validated, replayed = run_cli("validate", str(trace)), run_cli("replay", str(trace))
    assert (validated.returncode, replayed.returncode) == (2, 2), validated.stderr
    first = replayed.stderr.decode().splitlines()[0]
    assert first.startswith(f"{trace}:1: ") and first in validated.stderr.decode()


# 3: vLLM's parameters and a request's sizes are bounded


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"num_gpu_blocks": 20_000_000}, "num_gpu_blocks must be <= 1,048,576"),
        ({"max_model_len": 2**63 - 1}, "max_model_len must be <= 4,194,304"),
        ({"block_size": 1_048_576}, "block_size must be <= 4,096"),
        ({"max_num_seqs": 10**9}, "max_num_seqs must be <= 65,536"),
    ],
)
def test_vllm_parameters_are_bounded_and_validate_says_so(
    tmp_path: Path, params: dict[str, object], said: str
) -> None:
    trace = _write(tmp_path / "r.jsonl", [{**HEADER, "policy": "vllm", "params": params}, ARRIVE])
    r = run_cli("validate", str(trace))
    assert r.returncode == 2 and said in r.stderr.decode()
    assert r.stderr.decode().startswith(f"{trace}:1: ")


def test_a_request_larger_than_any_cache_is_refused_at_its_line(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "r.jsonl",
        [HEADER, {"op": "arrive", "rid": "a", "prompt_tokens": 2_000_000_000, "max_tokens": 1}],
    )
    for command in ("validate", "replay"):
        r = run_cli(command, str(trace))
        assert r.returncode == 2 and r.stderr.decode().startswith(f"{trace}:2: ")
        assert "prompt_tokens must be <= 2,097,152, not 2000000000" in r.stderr.decode()


def test_a_prompt_longer_than_the_bound_is_named_as_such(tmp_path: Path) -> None:
    prompt = list(range(2**21 + 1))
    trace = _write(
        tmp_path / "r.jsonl",
        [HEADER, {"op": "arrive", "rid": "a", "tokens": prompt, "max_tokens": 1}],
    )
    r = run_cli("validate", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:2: tokens has 2,097,153 entries, more than")


@pytest.mark.parametrize("level", ["task", "request"])
def test_a_header_that_is_not_json_is_one_problem(tmp_path: Path, level: str) -> None:
    header = json.dumps(HEADER if level == "request" else {"schedcli": 1, "policy": "fcfs"})
    trace = tmp_path / "t.jsonl"
    trace.write_text(header[:-1] + "\n")  # the header's closing brace lost
    r = run_cli("validate", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().count(f"{trace}:1: not valid JSON") == 1


# 4: shrink at a split step's update


def test_shrink_until_check_at_an_update_keeps_it(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "r.jsonl",
        [HEADER, ARRIVE, {"op": "schedule"}, {"op": "update", "expect": {"finished": ["a"]}},
         {"op": "schedule"}, {"op": "update"}],
    )  # fmt: skip
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 1
    out = tmp_path / "s.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert run_cli("replay", str(out), "--check", "-o", os.devnull).returncode == 1


# 5: the Python recorder refuses what a trace cannot hold, before its policy sees it


@pytest.mark.parametrize(
    ("tid", "sid"),
    [(1, 2**64), (True, 1), (2**63, 1), (1, -(2**63) - 1)],
    ids=["sid-2^64", "tid-true", "tid-2^63", "sid-below"],
)
def test_the_recorder_refuses_an_id_the_format_cannot_hold(tid: object, sid: object) -> None:
    out = io.BytesIO()
    inner = DecodeFirstScheduler(544, 8, 256)
    with RecordingScheduler(inner, out) as rec:
        reason = rec.try_submit([Task(tid, sid, "decode", 1)])  # type: ignore[arg-type]
        assert reason is not None and "cannot be recorded" in reason
        assert not inner.has_work()  # the policy never saw it
        assert rec.try_submit([Task(7, 7, "decode", 1)]) is None
        rec.get_work()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # the header, the good submit, its get_work


@pytest.mark.parametrize(
    "task",
    [
        Task(1, "\ud800", "decode", 1),
        Task(1, 1, "decode", 1, meta={"handle": object()}),
        Task(1, 1, "decode", 1, meta={1: "a key that is not a string"}),
    ],
    ids=["lone-surrogate-sid", "meta-object", "meta-int-key"],
)
def test_the_recorder_refuses_what_json_cannot_hold_before_the_policy(task: Task) -> None:
    out = io.BytesIO()
    inner = DecodeFirstScheduler(544, 8, 256)
    with RecordingScheduler(inner, out) as rec:
        reason = rec.try_submit([task])
        assert reason is not None and "cannot be recorded" in reason
        assert not inner.has_work()
        rec.get_work()
    assert len(out.getvalue().splitlines()) == 2  # the header and the get_work


def test_a_task_with_a_float_id_is_refused_in_both_cores() -> None:
    for args in ((1.5, 1), (1, 2.5)):
        with pytest.raises(TypeError):
            Task(*args, "decode", 1)  # type: ignore[arg-type]
    code = (
        "from schedcli import Task\ntry:\n Task(1.5, 1, 'decode', 1)\n"
        "except TypeError:\n print('refused')"
    )
    for pure in ("1", ""):
        env = {**os.environ, "SCHEDCLI_PURE_PYTHON": pure}
        import subprocess

        done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
        assert done.stdout.strip() == b"refused"


# 6: --follow of a request-level trace


def test_follow_of_a_request_level_trace_is_refused(tmp_path: Path) -> None:
    trace = _write(tmp_path / "r.jsonl", [HEADER, ARRIVE])
    r = run_cli("replay", str(trace), "--follow")
    assert r.returncode == 2 and b"--follow" in r.stderr


# 7: the level is the header's, read as the reader reads it


def test_a_request_level_trace_is_known_from_stdin(tmp_path: Path) -> None:
    trace = _write(tmp_path / "r.jsonl", [HEADER, ARRIVE])
    data = trace.read_bytes()
    assert run_cli("replay", "-", "-f", "jsonl", input=data).returncode == 0
    r = run_cli("validate", "-", input=data)
    assert r.returncode == 0 and b"valid" in r.stderr
    import gzip

    assert run_cli("replay", "-", "-f", "jsonl", input=gzip.compress(data)).returncode == 0
    # a real pipe, in a process of its own: the toy policy given as the command line gives it
    piped = run_process("replay", "-", "-p", TOY, "-f", "jsonl", input=data)
    assert piped.returncode == 0 and b'"mode":"request"' in piped.stdout


def test_a_request_level_trace_is_known_with_a_bom_or_a_long_header(tmp_path: Path) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + _write(tmp_path / "x.jsonl", [HEADER, ARRIVE]).read_bytes())
    long = _write(tmp_path / "long.jsonl", [{**HEADER, "meta": {"note": "x" * 70_000}}, ARRIVE])
    for trace in (bom, long):
        r = run_cli("replay", str(trace), "-f", "jsonl")
        assert r.returncode == 0, r.stderr
        assert b'"mode":"request"' in r.stdout


# 8: a header parameter's error is located


def test_a_request_header_parameter_error_names_its_file_and_line(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "r.jsonl", [{**HEADER, "params": {"max_num_batched_tokens": 0}}, ARRIVE]
    )
    r = run_cli("replay", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:1: policy 'toy-requests': max_num_batched_tokens")


# 9: a deep folder


def test_check_walks_a_folder_a_thousand_levels_deep(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    levels = [folder]
    for _ in range(1100):  # past the interpreter's recursion limit; one level at a time
        levels.append(levels[-1] / "d")
    for level in levels:
        level.mkdir()
    shutil.copy(TRACES / "rotation-fairness.jsonl", levels[-1])
    try:
        r = run_cli("check", str(folder), "-j", "1", "--allow-missing-golden")
        assert r.returncode == 0, r.stderr
    finally:  # removed bottom up: pytest's own clean-up would recurse past the limit
        (levels[-1] / "rotation-fairness.jsonl").unlink()
        for level in reversed(levels):
            level.rmdir()


# 10: JUnit XML with names XML cannot hold


def test_the_junit_report_is_well_formed_whatever_the_names(tmp_path: Path) -> None:
    suite = tmp_path / "s"
    suite.mkdir()
    for name in ("ctl\x01\x1b.jsonl", "nul\x7f.jsonl", "bad-\udcff.jsonl".encode(
        "utf-8", "surrogateescape").decode("utf-8", "surrogateescape")):  # fmt: skip
        try:
            shutil.copy(TRACES / "rotation-fairness.jsonl", suite / name)
        except UnicodeEncodeError:
            continue
    report = tmp_path / "r.xml"
    allowed = ("-j", "1", "--allow-missing-golden")
    r = run_cli("check", str(suite), *allowed, "--junit-xml", str(report))
    assert r.returncode == 0, r.stdout
    cases = list(ET.parse(report).getroot().iter("testcase"))
    assert len(cases) >= 2
    json_run = run_cli("check", str(suite), "-j", "1", "--allow-missing-golden", "-f", "json")
    for line in json_run.stdout.splitlines():
        orjson.loads(line)


# 11: a split trace's coverage in one unit


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
    trace = _write(tmp_path / "split.jsonl", split)
    r = run_cli("replay", str(trace), "--check", "-o", os.devnull)
    steps = sum(1 for x in split if x.get("op") == "schedule")
    assert r.returncode == 0, r.stderr
    assert f"checked {2 * steps} of {2 * steps} calls".encode() in r.stderr


# 12: no more workers than cores


def test_check_never_starts_more_workers_than_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedcli.engine.check import runner as checking

    started: list[int] = []

    def answers(fn: object, jobs: object, workers: int, setup: object = None) -> None:
        started.append(workers)
        raise SystemExit(0)

    monkeypatch.setattr(checking, "answers", answers)
    suite = tmp_path / "s"
    suite.mkdir()
    for i in range(8):
        shutil.copy(TRACES / "rotation-fairness.jsonl", suite / f"t{i}.jsonl")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    r = run_cli("check", str(suite), "-j", "1024", "--allow-missing-golden")
    assert started == [2], (started, r.stderr)
    assert b"--jobs 1024: checking on the 2 cores" in r.stderr
    assert checking  # imported for the monkeypatch's sake


# 13 is #38's rows 3, 8 and 9 (tests/test_honest_verdicts_2.py); the links of this report:


def test_links_to_the_folder_itself_neither_hang_nor_count_twice(tmp_path: Path) -> None:
    suite = tmp_path / "s"
    suite.mkdir()
    shutil.copy(TRACES / "rotation-fairness.jsonl", suite)
    (suite / "a").symlink_to(".")
    (suite / "b").symlink_to(".")
    r = run_cli("check", str(suite), "-j", "1", "--allow-missing-golden")
    assert r.returncode == 0 and r.stdout.decode().splitlines()[-1].startswith("1 trace:")


def test_a_cancel_record_compares_json_types(tmp_path: Path) -> None:
    dump = tmp_path / "a.jsonl"
    run_cli("replay", str(TRACES / "cancel-and-rejoin.jsonl"), "-f", "jsonl", "-o", str(dump))
    other = tmp_path / "b.jsonl"
    text = dump.read_text()
    cancel = next(x for x in text.splitlines() if '"op":"cancel"' in x)
    record = json.loads(cancel)
    record["line"] = float(record["line"])
    other.write_text(text.replace(cancel, json.dumps(record, separators=(",", ":"))))
    assert run_cli("diff", str(dump), str(other)).returncode == 1


# 14: the request level everywhere the task level goes


def test_require_all_counts_at_the_request_level(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "r.jsonl",
        [HEADER, ARRIVE, {"op": "step", "expect": {"batch": [["a", 10]], "preempted": [],
                                                   "finished": []}},
         {"op": "step"}],
    )  # fmt: skip
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 0
    r = run_cli("replay", str(trace), "--check", "--require-all", "-o", os.devnull)
    assert r.returncode == 1 and b"--require-all" in r.stderr


def test_check_the_plugin_and_report_take_request_level_traces(
    tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            json.dumps({"sid": i, "arrival": i / 10, "prompt_tokens": 20 + i, "output_tokens": 3})
            + "\n"
            for i in range(4)
        )
    )
    suite = pytester.path / "suite"
    suite.mkdir()
    trace = suite / "t.jsonl"
    simulated = run_cli("simulate", str(workload), "-p", TOY, "-o", str(trace), "-f", "json")
    assert simulated.returncode == 0
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 0
    assert run_cli("check", str(suite), "--update", "-j", "1").returncode == 0
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 0 and b"golden: " in r.stdout
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # where the toy policy is
    # In a process of its own the toy has no name a header may give: its folder names it.
    (pytester.path / "pyproject.toml").write_text(
        f'[tool.schedcli.folders."suite"]\npolicy = "{TOY}"\n'
    )
    pytester.runpytest_subprocess("--schedcli=suite").assert_outcomes(passed=1)
    assert run_cli("report", str(trace), "-o", str(tmp_path / "r.html")).returncode == 0


def test_a_dump_whose_dropped_is_not_a_list_is_a_located_error(tmp_path: Path, cli: Cli) -> None:
    # Found by CI's diff fuzz target: `"dropped": 1` in a clear record was an internal
    # error (len() of an int) in diff and stats; the dump reader now refuses it at its line.
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
