"""Shrinking by what a trace is made of: from the failing step back (windows), then
sessions, steps and clears, then lines and the tasks of groups."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedcli.engine.shrink import Shrunk, failure_test, shrink
from schedcli.engine.shrink.candidates import Candidate, Lines, Ranges
from schedcli.engine.shrink.stated import keeping, units_of_state
from schedcli.engine.shrink.units import Keeping, units_of
from tests.helpers import REQUEST_HEADER, run_in_process, write_lines

Event = dict[str, Any]
PARAMS = {
    "fair": {"max_batch_tokens": 300},
    "decode-first": {"max_batch_tokens": 300, "max_prefill_chunk_size": 256},
    "fcfs": {"max_batch_tokens": 300, "max_num_seqs": 6},
}


def traffic(
    rng: random.Random, steps: int, cancels: bool = True, busy: bool = False
) -> list[Event]:
    """A runner's explicit call log: prompts as chunk groups (a group may hold two
    sessions' prompts), a decode a step for each live session, the odd cancel. ``busy``:
    some thirty sessions live at once (as a production recording has them), not a few."""
    events: list[Event] = []
    tid = sid = 0
    live: dict[int, int] = {}
    for _ in range(steps):
        for _ in range(rng.randint(0, 2) if not busy or len(live) > 30 else 3):
            chunks = []
            for _ in range(rng.choice([1, 1, 1, 2])):
                sid += 1
                for pos in range(0, rng.randint(10, 400), 256):
                    tid += 1
                    size = rng.randint(1, 256)
                    chunks.append({"tid": tid, "sid": sid, "kind": "prefill", "size": size,
                                   "position": pos})  # fmt: skip
                live[sid] = rng.randint(1, 60 if busy else 8)
            events.append({"op": "submit", "tasks": chunks})
        for s in sorted(live):
            tid += 1
            events.append({"op": "submit", "tid": tid, "sid": s, "kind": "decode", "size": 1})
            live[s] -= 1
            if not live[s]:
                del live[s]
        if cancels and live and rng.random() < 0.1:
            victim = rng.choice(sorted(live))
            events.append({"op": "cancel", "sid": victim})
            del live[victim]
        events.append({"op": "get_work"})
    return events


def recorded(
    folder: Path, policy: str, events: list[Event], params: dict[str, Any] | None = None
) -> tuple[list[Event], list[list[Any]]]:
    """The events with every get_work's expect what ``policy`` dispatched (a recording),
    and the batches."""
    header = {"schedcli": 1, "policy": policy, "params": params or PARAMS[policy]}
    path = write_lines(folder / "plain.jsonl", [header, *events])
    dump = run_in_process("replay", str(path), "-f", "jsonl")
    assert dump.returncode == 0, dump.stderr
    batches = [
        [e["tid"] for e in r["batch"]]
        for r in map(orjson.loads, dump.stdout.splitlines())
        if "batch" in r
    ]
    steps = iter(batches)
    out = [{**e, "expect": next(steps)} if e["op"] == "get_work" else e for e in events]
    return [header, *out], batches


def planted(
    folder: Path,
    policy: str,
    events: list[Event],
    at: float,
    params: dict[str, Any] | None = None,
) -> Path | None:
    """A recording whose expect at fraction ``at`` of its steps leaves out the last task
    of the batch (None where no batch from there on holds two)."""
    lines, batches = recorded(folder, policy, events, params)
    get_works = [i for i, e in enumerate(lines) if e.get("op") == "get_work"]
    step = int(len(get_works) * at)
    while step < len(batches) and len(batches[step]) < 2:
        step += 1
    if step >= len(batches):
        return None
    lines[get_works[step]] = {"op": "get_work", "expect": batches[step][:-1]}
    return write_lines(folder / "trace.jsonl", lines)


def events_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def shrunk_to(
    trace: Path, out: Path, until: str = "check", policy: str | None = None
) -> tuple[Shrunk, Path]:
    """``trace`` shrunk in this process, the result written to ``out``."""
    shrunk = shrink(str(trace), until, policy, {})
    try:
        with out.open("wb") as f:
            shrunk.write(f)
    finally:
        shrunk.lines.close()
    return shrunk, out


def fails_like(
    path: Path, signature: tuple[Any, ...], until: str = "check", policy: str | None = None
) -> bool:
    failure = failure_test(until, policy, {})(str(path), None)
    return failure is not None and failure.signature == signature


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(PARAMS)),
    st.integers(0, 2**32 - 1),
    st.integers(4, 40),
    st.floats(0.1, 0.95),
)
def test_a_shrunk_trace_fails_the_same_way_and_no_single_event_can_go(
    policy: str, seed: int, steps: int, at: float
) -> None:
    """Over generated recordings with one wrong expect: the result reproduces the
    signature, through shrink's test and through ``replay --check`` (a second path),
    and dropping any one of its events (a group, a decode, a cancel, a get_work) loses it."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = planted(folder, policy, traffic(random.Random(seed), steps), at)
        assume(trace is not None)
        assert trace is not None
        shrunk, out = shrunk_to(trace, folder / "small.jsonl")
        assert fails_like(out, shrunk.signature)
        assert run_in_process("replay", str(out), "--check").returncode == 1
        header, *events = events_of(out)
        for k in range(len(events)):
            fewer = folder / "fewer.jsonl"
            fewer.write_bytes(b"\n".join([header, *events[:k], *events[k + 1 :]]) + b"\n")
            assert not fails_like(fewer, shrunk.signature), f"event {k + 2} could go"
        # A state it begins from is 1-minimal too: no queued task, no counter can go.
        if events and orjson.loads(events[0]).get("op") == "state":
            line = orjson.loads(events[0])
            units = units_of_state(line)
            for k in range(len(units)):
                fewer = folder / "fewer.jsonl"
                smaller = keeping(line, units[:k] + units[k + 1 :])
                fewer.write_bytes(b"\n".join([header, orjson.dumps(smaller), *events[1:]]) + b"\n")
                assert not fails_like(fewer, shrunk.signature), f"state {units[k]} could go"


def test_a_cause_in_the_middle_of_a_fair_recording_takes_tens_of_replays(
    tmp_path: Path,
) -> None:
    """Regression (#44): a busy fair recording (some thirty live sessions, an expect on
    every batch) of 12,000 lines with one wrong expect at its middle was still at 916
    lines after 120 s and 20,784 replays (every candidate a cut of the history that moved
    fair's counters). The window at the failing step finds it in tens: what is left is the
    failing batch's own submits (its expect names them all) and its get_work."""
    events = traffic(random.Random(44), 300, cancels=False, busy=True)
    trace = planted(tmp_path, "fair", events, 0.5, {"max_batch_tokens": 544})
    assert trace is not None
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl")
    expect = orjson.loads(events_of(out)[-1])["expect"]
    assert shrunk.count == len(expect) + 3  # the header, one submit more, the get_work
    assert shrunk.tests <= 100, shrunk.tests


def _needs_history() -> list[Event]:
    """fair serves the session with the lowest counter: which of two chunks the last batch
    takes depends on what each session was served before."""
    params = {"max_batch_tokens": 201, "max_prefill_chunk_size": 200}
    header = {"schedcli": 1, "policy": "fair", "params": params}
    chunk = {"kind": "prefill", "size": 100}
    lines: list[Event] = [header]
    for i in range(8):  # history that plays no part: sessions served and gone
        lines += [{"op": "submit", "tid": 100 + i, "sid": f"z{i}", **chunk}, {"op": "get_work"}]
    lines += [
        {"op": "submit", "tasks": [{"tid": 1, "sid": "a", **chunk},
                                   {"tid": 2, "sid": "a", **chunk}]},
        {"op": "submit", "tasks": [{"tid": 3, "sid": "b", **chunk},
                                   {"tid": 4, "sid": "b", **chunk}]},
        {"op": "submit", "tid": 5, "sid": "c", "kind": "prefill", "size": 100},
        {"op": "get_work", "expect": [1, 3]},  # c sits out: 200 of 201 tokens spent
        {"op": "submit", "tid": 6, "sid": "d", "kind": "decode", "size": 1},
        {"op": "get_work", "expect": [5, 6]},  # c's counter is lowest; a's chunk 2 fits too
    ]  # fmt: skip
    return lines


def test_a_failing_step_that_needs_history_begins_from_the_policys_state_there(
    tmp_path: Path,
) -> None:
    """The window at the failing step alone (counters reset) takes the other chunk; the
    state at that step holds the counters, so the shrunk trace is that state, reduced to
    what decides the batch, and the failing get_work."""
    trace = write_lines(tmp_path / "t.jsonl", _needs_history())
    assert run_in_process("replay", str(trace), "--check").returncode == 1
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl")
    assert fails_like(out, shrunk.signature)
    state, get_work = (orjson.loads(x) for x in events_of(out)[1:])
    assert get_work == {"op": "get_work", "expect": [5, 6]}
    assert (state["op"], state["step"]) == ("state", 9)
    queued = [t["tid"] for g in state["state"]["queued"] for t in g]
    assert 5 in queued and 6 in queued and len(queued) <= 4
    assert not any(str(c[0]).startswith("z") for c in state["state"]["counters"])
    assert state["ledger"]["dispatched"] == 0  # nothing before it matters
    assert shrunk.tests <= 100, shrunk.tests


def test_a_policy_without_snapshots_finds_its_window_further_back_as_before(
    tmp_path: Path,
) -> None:
    """Without snapshots, the window at the failing step alone takes the other chunk, so
    the shrunk trace keeps the step that charged the other session's counter."""
    trace = write_lines(tmp_path / "t.jsonl", _needs_history())
    policy = "tests.plugin_policies:FairWithoutSnapshots"
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl", policy=policy)
    assert fails_like(out, shrunk.signature, policy=policy)
    kept = [orjson.loads(x) for x in events_of(out)]
    assert not any(e.get("op") == "state" for e in kept)
    assert {"op": "get_work"} in kept, "the earlier step is needed, its expect dropped"
    assert not any(str(e.get("sid", "")).startswith("z") for e in kept)


def test_a_group_partly_dispatched_before_the_window_is_cut_to_its_queued_tasks(
    tmp_path: Path,
) -> None:
    """A prompt's first chunk ran before the failing step and its second is queued there:
    the window keeps the group with the second chunk only."""
    header = {"schedcli": 1, "policy": "fcfs", "params": {"max_batch_tokens": 256}}
    big = {"kind": "prefill", "size": 200}
    lines: list[Event] = [header]
    for i in range(30):  # history that plays no part
        lines += [{"op": "submit", "tid": 100 + i, "sid": 100 + i, "kind": "decode", "size": 1},
                  {"op": "get_work"}]  # fmt: skip
    lines += [
        {"op": "submit", "tasks": [{"tid": 1, "sid": 1, **big}, {"tid": 2, "sid": 1, **big}]},
        {"op": "get_work"},  # [1]: 2 does not fit
        {"op": "submit", "tid": 3, "sid": 2, "kind": "decode", "size": 1},
        {"op": "get_work", "expect": [2]},  # [2, 3]
    ]
    trace = write_lines(tmp_path / "t.jsonl", lines)
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl")
    kept = [orjson.loads(x) for x in events_of(out)[1:]]
    assert kept[0] == {"op": "submit", "tasks": [{"tid": 2, "sid": 1, **big}]}
    assert fails_like(out, shrunk.signature)
    assert shrunk.tests <= 15, shrunk.tests


def test_a_request_level_trace_loses_the_requests_that_play_no_part(tmp_path: Path) -> None:
    """Requests are units as sessions are: fifty that finish before the failing step go
    together, in one candidate (none is held at the failing step), while the step still
    differs from its recording."""
    lines: list[Event] = [REQUEST_HEADER]
    for i in range(50):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 4, "max_tokens": 1})
        lines.append({"op": "step"})
        lines.append({"op": "step"})
    lines.append({"op": "arrive", "rid": "x", "prompt_tokens": 4, "max_tokens": 3})
    lines.append({"op": "step", "expect": {"batch": [["x", 5]]}})
    trace = write_lines(tmp_path / "r.jsonl", lines)
    assert run_in_process("replay", str(trace), "--check").returncode == 1
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl")
    kept = [orjson.loads(x) for x in events_of(out)[1:]]
    assert [e.get("rid") for e in kept if e["op"] == "arrive"] == ["x"]
    assert fails_like(out, shrunk.signature)
    assert shrunk.tests <= 12, shrunk.tests


@given(st.data())
def test_keeping_units_keeps_every_line_outside_them_and_the_chosen_units(
    data: st.DataObject,
) -> None:
    """Whatever the candidate and the units: a candidate built from chosen units holds
    exactly the kept lines outside every unit, and the chosen units' lines."""
    events = data.draw(
        st.lists(
            st.one_of(
                st.builds(
                    lambda s: {"op": "submit", "tid": 1, "sid": s, "kind": "decode", "size": 1},
                    st.integers(0, 4),
                ),
                st.builds(lambda s: {"op": "cancel", "sid": s}, st.integers(0, 4)),
                st.just({"op": "get_work"}),
                st.just({"op": "clear"}),
            ),
            min_size=1,
            max_size=30,
        )
    )
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(events)), max_size=8))))
    kept = Ranges([(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b])
    with tempfile.TemporaryDirectory() as tmp:
        path = write_lines(Path(tmp) / "t.jsonl", events)
        lines = Lines(str(path))
        try:
            found = units_of(Candidate(kept), lines)
            sessions = dict(found.sessions)
            keys = sorted(sessions, key=repr)
            chosen = data.draw(st.sets(st.sampled_from(keys))) if keys else set()
            built = Keeping(Candidate(kept), lines, sessions)(chosen)
        finally:
            lines.close()
    in_units = {i for unit in sessions.values() for i in unit}
    want = [i for i in kept if i not in in_units or any(i in sessions[k] for k in chosen)]
    assert list(built.kept) == want
    for i in kept:
        e = events[i]
        assert (i in in_units) == (e["op"] in ("submit", "cancel"))
        assert (i in found.steps) == (e["op"] == "get_work")
        assert (i in found.clears) == (e["op"] == "clear")


def test_a_contract_break_late_in_a_long_call_log_is_shrunk_from_its_step(
    tmp_path: Path,
) -> None:
    """The step a contract message names is where shrinking starts: the window before it
    holds the one task that breaks the policy, whatever came before."""
    lines: list[Event] = []
    for i in range(400):
        lines.append({"op": "submit", "tid": i, "sid": i % 7, "kind": "decode", "size": 1})
        if i == 300:
            lines.append({"op": "submit", "tid": "x", "sid": "odd", "kind": "decode", "size": 1})
        lines.append({"op": "get_work"})
    trace = write_lines(tmp_path / "t.jsonl", lines)
    plugin = "tests.plugin_policies:DoublesTheOdd"
    assert run_in_process("replay", str(trace), "-p", plugin).returncode == 3
    shrunk, out = shrunk_to(trace, tmp_path / "small.jsonl", "contract", plugin)
    # Without a get_work the trace is plain: drained at its end, where the policy breaks.
    assert [orjson.loads(x) for x in events_of(out)] == [
        {"op": "submit", "tid": "x", "sid": "odd", "kind": "decode", "size": 1},
    ]
    assert shrunk.tests <= 12, shrunk.tests


def test_a_break_in_the_drain_after_the_last_event_shrinks_without_windows(
    tmp_path: Path,
) -> None:
    """``--drain``: the step that breaks comes after the trace's last line, so it has no
    get_work line to cut a window at; the passes after it still shrink the trace."""
    lines: list[Event] = []
    for i in range(40):
        lines.append({"op": "submit", "tid": i, "sid": i % 5, "kind": "decode", "size": 1})
        lines.append({"op": "get_work"})
    lines += [{"op": "submit", "tid": 100 + i, "sid": 9, "kind": "decode", "size": 1}
              for i in range(3)]  # fmt: skip
    lines.append({"op": "submit", "tid": "x", "sid": "odd", "kind": "decode", "size": 1})
    trace = write_lines(tmp_path / "t.jsonl", lines)
    plugin = "tests.plugin_policies:DoublesTheOdd"
    assert run_in_process("replay", str(trace), "-p", plugin, "--drain").returncode == 3
    shrunk = shrink(str(trace), "contract", plugin, {}, drain=True)
    shrunk.lines.close()
    assert shrunk.count == 1


@pytest.mark.parametrize("policy", sorted(PARAMS))
def test_candidates_held_in_memory_and_written_to_files_shrink_alike(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two paths to each candidate's verdict: replayed from the bytes held in memory, or
    written to a file and replayed from there. They try the same candidates and end on
    the same trace."""
    from schedcli.engine.shrink import reduce

    trace = planted(tmp_path, policy, traffic(random.Random(3), 25), 0.6)
    assert trace is not None
    held, out_held = shrunk_to(trace, tmp_path / "held.jsonl")
    monkeypatch.setattr(reduce, "HELD", -1)  # no candidate is small enough: files only
    written, out_written = shrunk_to(trace, tmp_path / "written.jsonl")
    assert out_held.read_bytes() == out_written.read_bytes()
    assert held.tests == written.tests


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(PARAMS)),
    st.integers(0, 2**32 - 1),
    st.integers(4, 30),
    st.floats(0.1, 0.95),
)
def test_candidates_replayed_in_a_worker_under_max_time_shrink_as_in_this_process(
    policy: str, seed: int, steps: int, at: float
) -> None:
    """Two paths to each candidate's verdict: replayed in this process, or (under
    --max-time, with time to spare) in a worker process the time limit could abandon.
    Over generated recordings they try the same candidates and end on the same trace."""
    from schedcli.engine.shrink import bounded

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = planted(folder, policy, traffic(random.Random(seed), steps), at)
        assume(trace is not None)
        assert trace is not None
        here, out_here = shrunk_to(trace, folder / "here.jsonl")
        asked, ask = [0], bounded.Worker.ask

        def counted(self: bounded.Worker, job: Any, until: float) -> Any:
            asked[0] += 1
            return ask(self, job, until)

        bounded.Worker.ask = counted  # type: ignore[method-assign]
        try:
            worker = shrink(str(trace), "check", None, {}, max_time=600)
        finally:
            bounded.Worker.ask = ask  # type: ignore[method-assign]
        try:
            with (folder / "worker.jsonl").open("wb") as f:
                worker.write(f)
        finally:
            worker.lines.close()
        assert asked[0] == worker.tests + 1  # every replay in the worker, the final check too
        assert not (worker.out_of_time or worker.unchecked) and worker.abandoned is None
        assert (folder / "worker.jsonl").read_bytes() == out_here.read_bytes()
        assert worker.tests == here.tests


def test_what_is_held_in_memory_follows_its_byte_cap_not_the_lines_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of a few kilobytes each (a prompt's tokens, a long meta): a candidate of few
    lines may still be large, so what is held for candidates replayed from memory is capped
    in bytes (held whole, this 1.5 MB trace's cut would pass twice the cap), and the result
    is the one without a cap."""
    from schedcli.engine.shrink import candidates, reduce

    trace = planted(tmp_path, "fcfs", traffic(random.Random(5), 60), 0.6)
    assert trace is not None
    header, *rest = events_of(trace)
    fat = [orjson.dumps({**orjson.loads(x), "meta": "x" * 3000}) for x in rest]
    trace.write_bytes(b"\n".join([header, *fat]) + b"\n")
    _, free_out = shrunk_to(trace, tmp_path / "free.jsonl")
    cap, most = 450_000, [0]  # two blocks of 64 such lines and some; the trace takes 1.5 MB
    monkeypatch.setattr(reduce, "HELD", cap)
    monkeypatch.setattr(candidates, "HELD", cap)
    data = candidates.Candidate.data

    def watched(self: candidates.Candidate, lines: candidates.Lines) -> bytes:
        out = data(self, lines)
        most[0] = max(most[0], lines.held_bytes)
        return out

    monkeypatch.setattr(candidates.Candidate, "data", watched)
    _, capped_out = shrunk_to(trace, tmp_path / "capped.jsonl")
    assert 0 < most[0] <= 2 * cap
    assert capped_out.read_bytes() == free_out.read_bytes()
