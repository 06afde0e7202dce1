"""The engine's ledger: every answer of a policy checked against what it was given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli import Task
from schedcli.engine.ledger import Ledger
from schedcli.model.errors import InvariantError
from tests.helpers import run_cli, write_lines


def _ledger(budget: int | None = None) -> Ledger:
    return Ledger(InvariantError, lambda message: None, budget=budget)


def _chunk(tid: int, sid: int) -> Task:
    t = Task(tid, sid, "prefill", 1)
    t.produce_output = False
    return t


def test_a_cancel_that_keeps_a_task_of_its_session_is_a_breach() -> None:
    ledger = _ledger()
    a, b, c = _chunk(1, 7), _chunk(2, 7), _chunk(3, 8)
    ledger.accept([a, b, c])
    with pytest.raises(InvariantError, match=r"cancel\(7\) kept 1 of its queued tasks"):
        ledger.cancelled(7, [a])


def test_a_kept_task_is_caught_after_thousands_of_cancels_too() -> None:
    ledger = _ledger()
    waiting = [_chunk(tid, 0) for tid in range(1, 51)]  # a queue the cancels must reckon with
    ledger.accept(waiting)
    for tid in range(100, 3100):
        t = _chunk(tid, tid)
        ledger.accept([t])
        ledger.cancelled(tid, [t])
    kept = _chunk(5000, 5000)
    ledger.accept([kept, _chunk(5001, 5000)])
    with pytest.raises(InvariantError, match=r"cancel\(5000\) kept 1 of its queued tasks"):
        ledger.cancelled(5000, [kept])


def test_a_task_handed_back_twice_after_the_trace_is_a_breach_not_progress() -> None:
    ledger = _ledger()
    a, b = _chunk(1, 7), _chunk(2, 8)
    ledger.accept([a, b])
    waiting = dict(ledger.queued)
    ledger.held_back(waiting, [a])
    assert list(waiting) == [2]
    with pytest.raises(InvariantError, match="returned task 1, which is not queued"):
        ledger.held_back(waiting, [a])
    with pytest.raises(InvariantError, match="returned task 2, which is not queued"):
        ledger.held_back(waiting, [_chunk(2, 8)])  # its tid, not the task handed in


def test_a_batch_with_a_decode_beside_its_sessions_chunk_is_a_breach() -> None:
    ledger = _ledger()
    chunk, decode = _chunk(1, 4), Task(2, 4, "decode", 1)
    ledger.accept([chunk, decode])
    with pytest.raises(InvariantError, match="session 4 has a decode beside another"):
        ledger.dispatched([chunk, decode])


def test_a_batch_owing_a_session_two_outputs_is_a_breach() -> None:
    ledger = _ledger()
    a, b = Task(1, 4, "prefill", 2), Task(2, 4, "prefill", 2)
    a.produce_output = b.produce_output = True
    ledger.accept([a, b])
    with pytest.raises(InvariantError, match="owes session 4 two outputs"):
        ledger.dispatched([a, b])


# Each op: accept a chunk of session s, dispatch the n oldest, or cancel session s
# (keeping its newest task queued when the flag says so).
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("accept"), st.integers(0, 4)),
        st.tuples(st.just("dispatch"), st.integers(1, 3)),
        st.tuples(st.just("cancel"), st.integers(0, 4), st.booleans()),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(ops=_ops)
def test_ledger_accepts_every_honest_answer_and_catches_a_kept_task_at_its_cancel(
    ops: list[tuple[Any, ...]],
) -> None:
    ledger = _ledger()
    queued: list[Task] = []
    tid = 0
    for op in ops:
        if op[0] == "accept":
            tid += 1
            t = _chunk(tid, op[1])
            ledger.accept([t])
            queued.append(t)
        elif op[0] == "dispatch":
            batch, queued = queued[: op[1]], queued[op[1] :]
            tokens, entries = ledger.dispatched(batch)
            assert tokens == len(batch) and [e["tid"] for e in entries] == [t.tid for t in batch]
        else:
            _, sid, keep = op
            mine = [t for t in queued if t.sid == sid]
            dropped = mine[:-1] if keep and mine else mine
            queued = [t for t in queued if t not in dropped]
            if keep and mine:
                with pytest.raises(InvariantError, match=f"cancel\\({sid}\\) kept 1 of"):
                    ledger.cancelled(sid, dropped)
                return
            ledger.cancelled(sid, dropped)
        assert list(ledger.queued.values()) == queued


def test_a_replay_whose_records_nobody_reads_still_counts_and_catches_a_breach() -> None:
    from schedcli.engine.levels.task.replay import Replayer
    from schedcli.model.records import discard
    from tests.plugin_policies import DoublesDispatch, OnePerBatch

    honest = Replayer(OnePerBatch(), discard)
    honest.apply([Task(1, 1, "decode", 1), Task(2, 2, "decode", 1)], 1)
    assert honest.get_work(0) == 1 and honest.totals.tokens == 1  # counted, no record built
    broken = Replayer(DoublesDispatch(), discard)
    broken.apply([Task(1, 1, "decode", 1)], 1)
    broken.get_work(0)
    with pytest.raises(InvariantError, match="returned twice"):
        broken.get_work(1)


@pytest.mark.parametrize("drain", [False, True])
def test_a_task_the_policy_forgets_breaks_the_contract_naming_it(
    tmp_path: Path, drain: bool
) -> None:
    events = [{"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1} for i in range(3)]
    trace = write_lines(tmp_path / "t.jsonl", [*events, {"op": "get_work"}])
    options = ["--drain"] if drain else []
    policy = "tests.plugin_policies:Forgets"
    r = run_cli("replay", str(trace), "-p", policy, "-o", os.devnull, *options)
    err = r.stderr.decode()
    assert r.returncode == 3, err
    assert "Stuck: task 2" in err
    small = tmp_path / "small.jsonl"
    r = run_cli(
        "shrink", str(trace), "--until", "contract", "-p", "tests.plugin_policies:Forgets",
        "-o", str(small),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert run_cli("replay", str(small), "-p", "tests.plugin_policies:Forgets").returncode == 3


def test_tasks_still_queued_by_a_sound_policy_stay_still_queued(tmp_path: Path) -> None:
    events = [{"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1} for i in range(3)]
    trace = write_lines(tmp_path / "t.jsonl", [*events, {"op": "get_work"}])
    r = run_cli("replay", str(trace), "-p", "tests.plugin_policies:OnePerBatch", "-f", "jsonl")
    assert r.returncode == 0
    assert orjson.loads(r.stdout.splitlines()[-1])["end"]["still_queued"] == [1, 2]


# --- a trace that begins from a state -----------------------------------------------------


def _copy(t: Task) -> Task:
    """The policy's own copy of a task it restored from a state (the same fields)."""
    return Task(t.tid, t.sid, t.kind, t.size, produce_output=t.produce_output)


def test_a_task_restored_from_a_state_comes_back_as_the_policys_copy() -> None:
    ledger = _ledger()
    first, second = _chunk(1, 7), _chunk(2, 7)
    ledger.seed([[first, second], [_chunk(3, 8)]])
    own_first, own_third = _copy(first), _copy(Task(3, 8, "prefill", 1))
    own_third.produce_output = False
    tokens, _ = ledger.dispatched([own_first, own_third])
    assert tokens == 2
    assert list(ledger.queued) == [2]
    ledger.dispatched([_copy(second)])
    assert not ledger.queued


def test_a_restored_chunk_still_may_not_leave_before_the_one_ahead_of_it() -> None:
    ledger = _ledger()
    first, second = _chunk(1, 7), _chunk(2, 7)
    ledger.seed([[first, second]])
    with pytest.raises(InvariantError, match="chunk 2 of session 7 before chunk 1"):
        ledger.dispatched([_copy(second)])


def test_a_restored_task_handed_back_changed_or_twice_is_a_breach() -> None:
    ledger = _ledger()
    ledger.seed([[_chunk(1, 7)], [_chunk(2, 8)]])
    changed = Task(1, 7, "prefill", 2)
    with pytest.raises(InvariantError, match="returned task 1, which is not queued"):
        ledger.dispatched([changed])
    own = _copy(_chunk(2, 8))
    ledger.dispatched([own])
    with pytest.raises(InvariantError, match="returned task 2, which is not queued"):
        ledger.dispatched([_copy(own)])
