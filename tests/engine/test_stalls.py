"""A policy that can make no more progress is a finding, found as soon as it shows: a stall
(nothing scheduled, its state unchanged) or a cycle (a state seen before with nothing from
outside in between), at either level, in replay --drain, simulate and sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.engine.stall import STUCK_AFTER, Watch
from schedcli.model.state import snapshot
from schedcli.model.task import DECODE, PREFILL, Task
from schedcli.policies import BUILTIN_POLICIES
from schedcli.policies.registry import build_policy
from tests.conftest import Cli

PLUGIN = "tests.plugin_policies:"


def _trace(tmp_path: Path, tasks: int, get_work: bool = False) -> Path:
    lines = [
        {"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1} for i in range(tasks)
    ]
    if get_work:
        lines.append({"op": "get_work"})
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


def _workload(tmp_path: Path, arrivals: list[float]) -> Path:
    path = tmp_path / "w.jsonl"
    rows = [
        {"sid": i, "arrival": t, "prompt_tokens": 8, "output_tokens": 1}
        for i, t in enumerate(arrivals)
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_a_policy_that_stalls_is_stopped_at_once_naming_each_task_and_why(
    cli: Cli, tmp_path: Path
) -> None:
    r = cli("replay", _trace(tmp_path, 1), "-p", PLUGIN + "WaitsForCompany", "-f", "jsonl")
    assert r.code == 3, r.stderr
    assert "stalled since step 1: nothing scheduled" in r.stderr  # step 0 is the trace's
    assert "with nothing left to arrive or cancel, it will never schedule again" in r.stderr
    assert "Stuck: task 0 (company: waits for a second task)" in r.stderr
    steps = [line for line in r.lines if line.startswith(b'{"step"')]
    assert len(steps) == 3  # not a thousand
    assert orjson.loads(r.lines[-1])["partial"]["exit"] == 3


@pytest.mark.parametrize(
    ("policy", "warned"),
    [("WaitsForCompany", False), ("OpaqueWaits", True)],  # OpaqueWaits: after the bound
)
def test_a_policy_that_waits_for_the_next_arrival_is_given_it_in_simulate(
    cli: Cli, tmp_path: Path, policy: str, warned: bool
) -> None:
    # The first request waits alone until the second arrives a second later: time passes
    # to that arrival (it would have been a thousand empty batches, then exit 3).
    r = cli("simulate", _workload(tmp_path, [0.0, 1.0]), "-p", PLUGIN + policy, "-f", "json")
    assert r.code == 0, r.stderr
    result = orjson.loads(r.stdout)
    assert result["finished"] == 2
    assert result["queue_delay"]["mean"] == 0.5  # the first waited the second out
    assert ("its state cannot be compared; the simulation moves on" in r.stderr) == warned
    # One request alone, nothing more to come: the stall, named.
    r = cli("simulate", _workload(tmp_path, [0.0]), "-p", PLUGIN + policy)
    assert r.code == 3
    assert "Stuck: task 0 (company: waits for a second task)" in r.stderr


def test_a_policy_that_cycles_without_progress_is_stopped(cli: Cli, tmp_path: Path) -> None:
    r = cli("replay", _trace(tmp_path, 2), "-p", PLUGIN + "Toggles", "-f", "jsonl")
    assert r.code == 3, r.stderr
    assert "cycles without progress" in r.stderr
    assert "Stuck: task 0, task 1 (the policy gives no reasons)" in r.stderr
    assert len(r.lines) < 10


def test_a_policy_whose_state_never_settles_is_stopped_at_the_bound_saying_so(
    cli: Cli, tmp_path: Path
) -> None:
    for policy, said in (("Counts", "its state keeps changing"), ("OpaqueWaits", "cannot be")):
        r = cli("replay", _trace(tmp_path, 1), "-p", PLUGIN + policy, "--drain", "-o", "-")
        assert r.code == 3, r.stderr
        assert f"{STUCK_AFTER} empty steps in a row" in r.stderr and said in r.stderr


def test_a_sweep_point_whose_policy_stalls_fails_the_sweep_as_the_contract(
    cli: Cli, tmp_path: Path
) -> None:
    workload = _workload(tmp_path, [0.0])
    out = tmp_path / "sweep.jsonl"
    r = cli("sweep", workload, "-p", PLUGIN + "WaitsForCompany", "-j", "1", "-o", out)
    assert r.code == 3, r.stderr
    assert "stalled since step" in r.stderr


def test_shrink_until_contract_keeps_a_stall(cli: Cli, tmp_path: Path) -> None:
    trace = _trace(tmp_path, 1)
    small = tmp_path / "small.jsonl"
    r = cli("shrink", trace, "-p", PLUGIN + "WaitsForCompany", "--until", "contract", "-o", small)
    assert r.code == 0, r.stderr
    again = cli("replay", small, "-p", PLUGIN + "WaitsForCompany", "-o", "-")
    assert again.code == 3 and "stalled" in again.stderr


class _Walk:
    """A deterministic machine: state ``x`` goes to ``f[x]`` at each quiet step."""

    def __init__(self, f: list[int], x: int) -> None:
        self.f, self.x = f, x

    def fingerprint(self) -> object:
        return (self.x,)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_watch_finds_every_cycle_soon_and_never_one_that_is_not_there(data: Any) -> None:
    n = data.draw(st.integers(1, 40))
    f = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    walk = _Walk(f, data.draw(st.integers(0, n - 1)))
    seen: list[int] = []
    watch = Watch(walk)
    for step in range(8 * n + 4):
        walk.x = f[walk.x]
        seen.append(walk.x)
        found = watch.quiet(step, True)
        if found is not None:
            break
    assert found is not None  # every walk on a finite set cycles
    assert seen[found.step] == seen[found.since] and found.since < found.step
    first = seen.index(seen[found.step])
    tail, cycle = first, found.step - first
    assert found.step <= 3 * (tail + cycle) + 2  # Brent's bound, give or take the start
    assert found.stalled == (found.since == found.step - 1)


def _fed(name: str, calls: list[tuple[str, int]]) -> Any:
    policy = build_policy(name, {})
    tid = 0
    for op, sid in calls:
        if op == "submit":
            kind = DECODE if sid % 2 else PREFILL
            policy.submit([Task(tid, sid, kind, 1 if kind is DECODE else 8)])
            tid += 1
        elif op == "cancel":
            policy.cancel(sid)
        else:
            policy.get_work()
    return policy


CALLS = st.lists(
    st.tuples(st.sampled_from(["submit", "cancel", "get_work"]), st.integers(0, 4)), max_size=30
)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(BUILTIN_POLICIES)), CALLS, CALLS)
def test_equal_fingerprints_of_a_built_in_mean_the_same_next_answers(
    name: str, a_calls: list[tuple[str, int]], b_calls: list[tuple[str, int]]
) -> None:
    a, b = _fed(name, a_calls), _fed(name, b_calls)
    assert a.fingerprint() is not None and snapshot(a) == a.fingerprint()
    if a_calls == b_calls:
        assert a.fingerprint() == b.fingerprint()
    if a.fingerprint() == b.fingerprint():
        for _ in range(3):
            assert [t.tid for t in a.get_work()] == [t.tid for t in b.get_work()]
            assert a.fingerprint() == b.fingerprint()


def test_a_golden_pins_a_contract_break_and_fails_once_it_changes(
    cli: Cli, tmp_path: Path, pytester: Any, monkeypatch: Any
) -> None:
    from tests.helpers import ROOT

    suite = tmp_path / "suite"
    suite.mkdir()
    trace = _trace(suite, 1)
    (suite / "pyproject.toml").write_text(
        '[tool.schedcli]\ntraces = ["."]\n[tool.schedcli.folders."."]\n'
        f'policy = "{PLUGIN}WaitsForCompany"\n'
    )
    golden = suite / "golden" / "t.dump.jsonl"
    golden.parent.mkdir()
    # check --update never pins a break in passing.
    r = cli("check", suite, "--update", cwd=suite)
    assert r.code == 3 and not golden.exists()
    policy = ["-p", PLUGIN + "WaitsForCompany"]
    r = cli("replay", trace, *policy, "--golden", golden, "--update-golden")
    assert r.code == 0, r.stderr
    assert "it pins this contract break (exit 3)" in r.stderr
    assert orjson.loads(golden.read_bytes().splitlines()[-1])["partial"]["exit"] == 3
    r = cli("replay", trace, *policy, "--golden", golden)
    assert r.code == 0 and "including the contract break it pins" in r.stderr
    r = cli("check", suite, cwd=suite)
    assert r.code == 0 and "and the contract break it pins" in r.stdout.decode()
    # The pytest plugin gives check's verdict (the second path to it).
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(suite)
    pytester.runpytest_subprocess("--schedcli", "-p", "no:randomly").assert_outcomes(passed=1)
    # The policy no longer stalls: the golden no longer matches (the fix shows).
    r = cli("replay", trace, "-p", "fcfs", "--golden", golden)
    assert r.code == 1 and "dump differs from golden" in r.stderr
    # It stalls otherwise (another reason): not the pinned break either.
    edited = golden.read_bytes().replace(b"company: waits", b"company: sleeps")
    golden.write_bytes(edited)
    r = cli("replay", trace, *policy, "--golden", golden)
    assert r.code == 1
    # A dump ending in a break is still incomplete to stats and diff.
    r = cli("stats", golden)
    assert r.code == 2 and "incomplete dump" in r.stderr


def test_simulate_and_a_replay_of_its_trace_find_the_same_stall(cli: Cli, tmp_path: Path) -> None:
    """The second path to the verdict: the run simulate wrote, replayed with --drain, stalls
    on the same task for the same reason."""
    trace = tmp_path / "run.jsonl"
    policy = ["-p", PLUGIN + "WaitsForCompany"]
    r = cli("simulate", _workload(tmp_path, [0.0]), *policy, "-o", trace)
    assert r.code == 3
    said = r.stderr[r.stderr.index("Stuck: ") :]
    again = cli("replay", trace, *policy, "--drain", "--allow-incomplete", "-o", "-")
    assert again.code == 3
    assert "stalled since step" in again.stderr and said in again.stderr


def test_a_preempt_readmit_cycle_at_the_request_level_is_stopped(cli: Cli, tmp_path: Path) -> None:
    header = {"schedcli": 1, "level": "request", "policy": "tests.doubles:Thrashes", "params": {}}
    arrivals = [{"op": "arrive", "rid": rid, "prompt_tokens": 20, "max_tokens": 2} for rid in "ab"]
    trace = tmp_path / "r.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [header, *arrivals]))
    r = cli("replay", trace, "-f", "jsonl")
    assert r.code == 3, r.stderr
    assert "cycles without progress: the policy's state at step 3 is its state at step 1" in (
        r.stderr
    )  # two steps a cycle, found at its first repeat (step 0 preempted nothing)
    assert 'Stuck: request "b", request "a" (max_num_seqs: 1 requests are running)' in r.stderr
    assert len(r.lines) == 5  # four steps and the partial record
    workload = tmp_path / "w.jsonl"
    rows = [{"sid": s, "arrival": 0.0, "prompt_tokens": 20, "output_tokens": 2} for s in "ab"]
    workload.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in rows))
    r = cli("simulate", workload, "-p", "tests.doubles:Thrashes")
    assert r.code == 3 and "cycles without progress" in r.stderr
