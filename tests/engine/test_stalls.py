"""A policy that can make no more progress is a finding, found as soon as it shows: a stall
(nothing scheduled, its state unchanged) or a cycle (a state seen before with nothing from
outside in between), at either level, in replay --drain, simulate and sweep. "It will never
schedule again" is said only where a fingerprint the policy declares proves it; any other
policy is reported as what was seen (no batch for N steps with work queued), at a cost
bounded per step whatever the policy holds."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.app.inprocess import run_cli_in_process
from schedcli.catalog.registry import build_policy
from schedcli.engine.stall import BUDGET, PARTS, STALL_STEPS, STALL_STEPS_ENV, Watch, declared
from schedcli.model.state import NotAValue, TooLarge, plain
from schedcli.model.task import DECODE, PREFILL, Task
from schedcli.policies import BUILTIN_POLICIES
from tests.conftest import Cli
from tests.doubles import stalls
from tests.doubles.stalls import ODD, PLACES

PLUGIN = "tests.plugin_policies:"
STALLS = "tests.doubles.stalls:"
# What only a proof may say.
NEVER = ("will never schedule", "repeat those steps forever", "it never will")


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
    assert ("its fingerprint() is None; the simulation moves on" in r.stderr) == warned
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


def test_a_policy_whose_state_never_settles_is_stopped_at_the_bound_saying_only_what_was_seen(
    cli: Cli, tmp_path: Path
) -> None:
    for policy, said in (
        ("Counts", "its state (fingerprint()) kept changing"),
        ("OpaqueWaits", "schedcli cannot see its state: its fingerprint() is None"),
    ):
        r = cli("replay", _trace(tmp_path, 1), "-p", PLUGIN + policy, "--drain", "-o", "-")
        assert r.code == 3, r.stderr
        assert f"no batch for {STALL_STEPS} steps with work queued" in r.stderr
        assert said in r.stderr and "whether it would ever schedule again is not known" in r.stderr
        assert not any(word in r.stderr for word in NEVER)


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
    if name == "reference":
        policy = build_policy("decode-first", {"compat": "reference"})
    else:
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


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([*sorted(BUILTIN_POLICIES), "reference"]), CALLS, CALLS, st.booleans())
def test_equal_fingerprints_of_a_built_in_mean_the_same_next_answers(
    name: str, a_calls: list[tuple[str, int]], b_calls: list[tuple[str, int]], explain: bool
) -> None:
    a, b = _fed(name, a_calls), _fed(name, b_calls)
    read, own, _ = declared(a)
    assert read is not None and own  # declared by its own class: trusted, not walked
    found = a.fingerprint()
    assert found is not None
    plain(found, 10**6)  # plain values already (a built-in's is not checked at run time)
    if a_calls == b_calls:
        assert a.fingerprint() == b.fingerprint()
    a.explaining = explain  # reasons are kept, and decide nothing
    if a.fingerprint() == b.fingerprint():
        for _ in range(3):
            assert [t.tid for t in a.get_work()] == [t.tid for t in b.get_work()]
            if explain:
                a.left_behind()
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
    r = cli("replay", trace, "-p", "tests.doubles:Thrashes", "-f", "jsonl")
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


# --- sound: "never" only where a declared fingerprint proves it ------------------------


def _odd(place: str, *extra: str) -> list[str]:
    return ["-p", STALLS + "OddState", "-P", f"place={place}", *extra]


@pytest.mark.parametrize("place", ODD)
def test_a_policy_whose_state_is_out_of_sight_is_never_said_to_be_stuck_for_good(
    cli: Cli, tmp_path: Path, place: str
) -> None:
    """Its counter is where no walk of the object sees it (a subclass's value or
    attributes, a partial, set.pop's position, signed zeros, the class, the module, a
    function, a default argument, a generator, a cache's name): it resumes on its fifth
    call, and until then nothing can say it never will."""
    trace = _trace(tmp_path, 1)
    r = cli("replay", trace, *_odd(place), "-f", "jsonl")
    assert r.code == 0, r.stderr
    steps = [orjson.loads(line) for line in r.lines if line.startswith(b'{"step"')]
    assert [s["step"] for s in steps if s["batch"]] == [4]  # its fifth call (steps from 0)
    r = cli("simulate", _workload(tmp_path, [0.0]), *_odd(place), "-f", "json")
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["finished"] == 1
    # Asked to wait less than it needs: what was seen, and no more.
    r = cli("replay", trace, *_odd(place), "--stall-steps", "3", "-o", os.devnull)
    assert r.code == 3, r.stderr
    assert "no batch for 3 steps with work queued" in r.stderr
    assert "schedcli cannot see its state: OddState declares no fingerprint()" in r.stderr
    assert not any(word in r.stderr for word in NEVER)


def test_a_subclass_of_a_built_in_is_opaque_unless_it_declares_its_own_fingerprint(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """decode-first's fingerprint knows decode-first's state, not what a subclass adds."""
    (tmp_path / "late.py").write_text(
        "from schedcli.policies.decode_first import DecodeFirstScheduler\n"
        "class Late(DecodeFirstScheduler):\n"
        "    def __init__(self, **params):\n"
        "        super().__init__(**params)\n"
        "        self._countdown = 4\n"
        "    def take_batch(self):\n"
        "        self._countdown -= 1\n"
        "        return super().take_batch() if self._countdown < 0 else []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = _trace(tmp_path, 1)
    r = cli("replay", trace, "-p", "late:Late", "-f", "jsonl")
    assert r.code == 0, r.stderr
    r = cli("replay", trace, "-p", "late:Late", "--stall-steps", "2", "-o", os.devnull)
    assert r.code == 3, r.stderr
    assert (
        "Late declares no fingerprint() of its own (the one it inherits, "
        "DecodeFirstScheduler's, cannot know the state Late adds)"
    ) in r.stderr
    assert not any(word in r.stderr for word in NEVER)


def test_between_a_stepped_traces_steps_only_what_was_seen_is_said(
    cli: Cli, tmp_path: Path
) -> None:
    """A gap of 5,000 steps before the next event: nothing is proven, so the bound says
    what it saw (it said the replay would never finish)."""
    lines = [
        {"op": "submit", "step": 0, "tid": 1, "sid": 1, "kind": "decode", "size": 1},
        {"op": "submit", "step": 5000, "tid": 2, "sid": 2, "kind": "decode", "size": 1},
    ]
    trace = tmp_path / "stepped.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    r = cli("replay", trace, *_odd("int_subclass", "-P", "resume=0"), "-o", os.devnull)
    assert r.code == 3, r.stderr
    assert f"no batch for {STALL_STEPS} steps with work queued" in r.stderr
    assert "before the trace's next step 5000" in r.stderr
    assert not any(word in r.stderr for word in (*NEVER, "never finish"))


def test_tasks_held_at_the_end_by_an_opaque_policy_are_reported_as_seen(
    cli: Cli, tmp_path: Path
) -> None:
    trace = _trace(tmp_path, 1, get_work=True)
    r = cli("replay", trace, *_odd("partial", "-P", "resume=0"), "-o", os.devnull)
    assert r.code == 3, r.stderr
    assert f"gave none in {STALL_STEPS} calls in a row" in r.stderr
    assert "whether it ever would is not known" in r.stderr
    assert not any(word in r.stderr for word in NEVER)
    r = cli("replay", trace, "-p", STALLS + "Idles", "-o", os.devnull)
    assert r.code == 3 and "gives none, its state unchanged: it never will" in r.stderr


def test_a_task_handed_out_again_after_the_trace_is_the_contract_broken_not_a_hang(
    cli: Cli, tmp_path: Path
) -> None:
    # Asked for what it still holds at the end, a policy that keeps giving back a task it
    # returned already was asked again forever (every batch was "progress"). An explicit
    # trace that ends with work queued: only that question hands it back.
    trace = tmp_path / "t.jsonl"
    lines = [{"op": "get_work", "expect": []}] + [
        {"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1} for i in range(2)
    ]
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    r = cli("replay", trace, "-p", PLUGIN + "DoublesDispatch", "-o", os.devnull)
    assert r.code == 3, r.stderr
    assert "returned task 0, which is not queued (returned twice, or never accepted)" in r.stderr
    assert "after the trace" in r.stderr


def test_an_opaque_request_level_policy_that_thrashes_is_stopped_at_the_bound(
    cli: Cli, tmp_path: Path
) -> None:
    """Each step preempts and runs something: never an empty batch, so the bound counts
    quiet steps (empty or preempting). Declared, the same policy is a cycle, proven."""
    header = {"schedcli": 1, "level": "request", "policy": "tests.doubles:Thrashes", "params": {}}
    arrivals = [{"op": "arrive", "rid": rid, "prompt_tokens": 20, "max_tokens": 2} for rid in "ab"]
    trace = tmp_path / "r.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [header, *arrivals]))
    r = cli("replay", trace, "-p", STALLS + "ThrashesUnseen", "--stall-steps", "40", "-o", "-")
    assert r.code == 3, r.stderr
    assert "no progress for 40 steps with work queued (each scheduled nothing or preempted)" in (
        r.stderr
    )
    assert not any(word in r.stderr for word in NEVER)


def _tasks_trace(directory: str, tasks: int) -> str:
    path = os.path.join(directory, "t.jsonl")
    with open(path, "wb") as f:
        for i in range(tasks):
            f.write(orjson.dumps({"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1}))
            f.write(b"\n")
    return path


@settings(max_examples=70, deadline=None)
@given(
    declares=st.booleans(),
    place=st.sampled_from(PLACES),
    resume=st.integers(0, 12),
    period=st.integers(2, 12),
    tasks=st.integers(1, 3),
    steps=st.integers(1, 30),
    how=st.sampled_from(["drain", "end", "simulate"]),
)
def test_every_never_verdict_holds_when_the_policy_is_run_on(
    declares: bool, place: str, resume: int, period: int, tasks: int, steps: int, how: str
) -> None:
    """Random odd-state plugins, declared honestly or not at all: every "never" the engine
    says is checked by running the same policy on for many more steps (the second path to
    the verdict); an undeclared one is never said to be stuck for good."""
    cls = "OddStateDeclared" if declares else "OddState"
    params = [f"place={place}", f"resume={resume}", f"period={period}"]
    with tempfile.TemporaryDirectory() as directory:
        trace = _tasks_trace(directory, tasks)
        if how == "simulate":
            workload = os.path.join(directory, "w.jsonl")
            with open(workload, "wb") as f:
                for i in range(tasks):
                    row = {"sid": i, "arrival": 0.0, "prompt_tokens": 1, "output_tokens": 1}
                    f.write(orjson.dumps(row) + b"\n")
            args = ["simulate", workload]
        else:
            args = ["replay", trace, *(["--drain"] if how == "drain" else [])]
        for p in params:
            args += ["-P", p]
        done = run_cli_in_process(
            [*args, "-p", STALLS + cls, "--stall-steps", str(steps), "-o", os.devnull]
        )
    err = done.stderr.decode()
    assert done.code in (0, 3), err
    never = any(word in err for word in NEVER)
    if not declares:
        assert not never, err
    if done.code == 0:
        assert 0 < resume < period  # it did resume
    if never:
        policy = stalls.OddStateDeclared(place, resume, period)
        policy.submit([Task(i, i, DECODE, 1) for i in range(tasks)])
        for _ in range(20 * (steps + period) + 100):
            assert policy.get_work() == [], err


# --- fingerprints are the policy's: plain values, and its error when they break ---------


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("FingerprintRaises", "raised in fingerprint() at step 1: ValueError: no state here"),
        ("FingerprintMisses", "raised in fingerprint() at step 1: RuntimeError: no attribute"),
        ("ArrayFingerprint", "fingerprint() returned a numpy.ndarray at step 1"),
    ],
)
def test_a_fingerprint_that_breaks_is_the_policys_error_naming_fingerprint(
    cli: Cli, tmp_path: Path, policy: str, said: str
) -> None:
    for command in (
        ["replay", _trace(tmp_path, 1), "--drain"],
        ["simulate", _workload(tmp_path, [0.0])],
    ):
        r = cli(*command, "-p", STALLS + policy, "-o", os.devnull)
        assert r.code == 2, r.stderr
        assert said.replace("step 1", "step 0") in r.stderr or said in r.stderr, r.stderr
        assert "internal error" not in r.stderr


def test_a_getattr_that_raises_does_not_reach_the_watch(cli: Cli, tmp_path: Path) -> None:
    """No fingerprint declared: nothing is looked up on the policy but what it answers."""
    trace = _trace(tmp_path, 1)
    r = cli("replay", trace, "-p", STALLS + "GetattrRaises", "-o", os.devnull)
    assert r.code == 0, r.stderr
    r = cli("replay", trace, "-p", STALLS + "GetattrRaises", "-P", "resume=0", "-o", os.devnull)
    assert r.code == 3 and f"no batch for {STALL_STEPS} steps" in r.stderr, r.stderr


class _MyInt(int):
    pass


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((0.0,), (-0.0,)),  # equal floats, another sign
        ((1,), (1.0,)),
        ((1,), (True,)),
        ((1, 2), [1, 2]),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # equal dicts, another order
        ((b"x",), ("x",)),
    ],
)
def test_plain_values_are_equal_only_when_they_are_the_same(a: object, b: object) -> None:
    assert plain(a, 100)[0] != plain(b, 100)[0]
    assert plain(a, 100)[0] == plain(a, 100)[0]


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ((1, _MyInt(2)), "a tests.engine.test_stalls._MyInt at [1]"),
        ({"k": [object()]}, "a builtins.object at ['k'][0]"),
        ((1, (2, {"x": 3.0}, {1j})), "a builtins.complex at [1][2][...]"),
    ],
)
def test_what_is_not_a_plain_value_is_named_where_it_sits(value: object, what: str) -> None:
    with pytest.raises(NotAValue) as e:
        plain(value, 100)
    assert str(e.value) == what


def test_a_value_that_holds_itself_is_refused_not_followed() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(NotAValue, match="nested deeper than 200 levels"):
        plain(loop, 10**6)


# --- bounded: an opaque policy is never looked into; a fingerprint is compared up to a bound


def test_an_opaque_policy_is_never_looked_into_whatever_it_holds() -> None:
    """100,000 values that count each look at them: the watch looks at none, at any step
    (it walked them all after every empty step, 34 s for a two-line trace)."""
    policy = stalls.HugeState(100_000, touched=True)
    stalls.Touched.looks = 0
    watch = Watch(policy)
    for step in range(STALL_STEPS):
        assert watch.quiet(step, True) is None
        if stalls.Touched.looks:
            break
    assert stalls.Touched.looks == 0
    assert watch.given_up() and watch.opaque


def test_a_fingerprint_too_large_to_compare_is_asked_for_once(cli: Cli, tmp_path: Path) -> None:
    stalls.HugeFingerprint.calls = 0
    r = cli("replay", _trace(tmp_path, 1), "-p", STALLS + "HugeFingerprint", "-P", "size=1000000")
    assert r.code == 3, r.stderr
    assert f"its fingerprint() has more than {PARTS:,} parts to compare" in r.stderr
    assert stalls.HugeFingerprint.calls == 1  # then opaque, remembered


def test_fingerprints_that_keep_changing_are_compared_up_to_a_budget() -> None:
    size = 50_000
    stalls.ChangingFingerprint.calls = 0
    watch = Watch(stalls.ChangingFingerprint(size))
    for step in range(STALL_STEPS):
        watch.quiet(step, True)
    assert watch.given_up() and watch.opaque
    assert stalls.ChangingFingerprint.calls <= BUDGET // size + 1
    assert "its fingerprints kept changing past" in watch.reason()


def test_a_policy_with_a_million_values_that_never_schedules_is_reported_in_seconds(
    cli: Cli, tmp_path: Path
) -> None:
    started = time.perf_counter()
    r = cli("replay", _trace(tmp_path, 1), "-p", STALLS + "HugeState", "-P", "size=1000000")
    assert r.code == 3, r.stderr
    assert f"no batch for {STALL_STEPS} steps with work queued" in r.stderr
    assert time.perf_counter() - started < 30  # about half a second; minutes before


def test_too_large_is_found_within_the_limit_whatever_the_size() -> None:
    with pytest.raises(TooLarge):
        plain([0] * 10**6, 1000)
    with pytest.raises(TooLarge):
        plain(("x" * 10**6,), 1000)  # a long string counts by its length


# --- --stall-steps ---------------------------------------------------------------------


def test_stall_steps_is_an_option_of_any_command_and_bounded(cli: Cli, tmp_path: Path) -> None:
    trace = _trace(tmp_path, 1)
    odd = _odd("module_global", "-P", "resume=0")
    r = cli("replay", trace, *odd, "--stall-steps=7", "-o", os.devnull)
    assert r.code == 3 and "no batch for 7 steps with work queued" in r.stderr, r.stderr
    r = cli("simulate", _workload(tmp_path, [0.0, 100.0]), *odd, "--stall-steps", "7")
    assert r.code == 3 and "warning: step 7: policy" in r.stderr, r.stderr
    assert "no batch for 7 steps with work queued" in r.stderr
    for bad in ("0", "x", "1.5", "1000000001"):
        r = cli("replay", trace, *odd, "--stall-steps", bad)
        assert r.code == 2, r.stderr
        assert "--stall-steps must be an integer from 1 to 1000000000" in r.stderr
    r = cli("replay", trace, *odd, "--stall-steps")
    assert r.code == 2 and "--stall-steps needs a number of steps" in r.stderr
    assert STALL_STEPS_ENV not in os.environ  # set for the run only


def test_the_entry_point_and_the_watch_name_the_same_variable() -> None:
    from schedcli.app import entry

    assert entry.STALL_STEPS_ENV == STALL_STEPS_ENV


def test_an_opaque_policy_stopped_at_the_bound_is_told_which_option_sets_it(
    cli: Cli, tmp_path: Path
) -> None:
    """The engine names the option as a fact; the app words it as the flag, at each level
    and in simulate."""
    said = (
        "whether it would ever schedule again is not known (--stall-steps sets how long to "
        "wait). Stuck: "
    )
    r = cli(
        "simulate", _workload(tmp_path, [0.0]), "-p", PLUGIN + "OpaqueWaits", "--stall-steps", "7"
    )
    assert r.code == 3
    assert r.stderr == (
        "schedcli: policy 'opaque-waits' broke the Scheduler contract at step 7 (simulated "
        "time 0.000000 s): no batch for 7 steps with work queued, and schedcli cannot see its "
        f"state: its fingerprint() is None; {said}task 0 (company: waits for a second task)\n"
    )
    r = cli("replay", _trace(tmp_path, 1), "-p", PLUGIN + "OpaqueWaits", "--drain", "-o", "-")
    assert r.code == 3 and f"its fingerprint() is None; {said}task 0" in r.stderr


def test_the_engine_names_the_stall_bound_as_an_option_the_app_words() -> None:
    """Between a stepped trace's steps the stop names its bound as a fact
    (``Option("stall_steps")``), not as a flag; the plain words stay the same."""
    from schedcli.engine.levels.task.replay import Replayer
    from schedcli.formats.trace import Event
    from schedcli.model.errors import InvariantError, Option
    from schedcli.model.records import discard

    engine = Replayer(stalls.OddState(resume=0), discard, policy_name="odd")
    first = Event("submit", line=1, step=0, tasks=[Task(1, 1, DECODE, 1)])
    later = Event("submit", line=2, step=5000, tasks=[Task(2, 2, DECODE, 1)])
    with pytest.raises(InvariantError) as stopped:
        engine.run([(1, [first, later])])
    assert Option("stall_steps") in stopped.value.parts
    assert "(--stall-steps sets how long to wait)" in str(stopped.value)
