"""Each built-in policy's own rule, in scenarios (the shared promises are in test_conformance)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli import BUILTIN_POLICIES, Task, build_policy
from schedcli.policies import (
    FairScheduler,
    FcfsScheduler,
    PrefillFirstScheduler,
    PriorityScheduler,
    SjfScheduler,
)
from tests.helpers import dc, ids, pf, run_cli


def test_every_builtin_declares_typed_params_and_states_its_rule() -> None:
    assert set(BUILTIN_POLICIES) == {
        "decode-first",
        "fcfs",
        "prefill-first",
        "priority",
        "sjf",
        "fair",
    }
    for name, cls in BUILTIN_POLICIES.items():
        assert cls.name == name
        assert len(vars(cls)["RULE"].strip().splitlines()) >= 2
        assert cls.PARAMS
        for p in cls.PARAMS:
            assert p.help and p.type in (int, float, str)
            assert (p.type is str) == bool(p.choices)
        built = build_policy(name)
        assert built.params() == {p.name: p.default for p in cls.PARAMS}


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
def test_every_builtin_refuses_a_chunk_it_could_never_dispatch(name: str) -> None:
    with pytest.raises(Exception, match="max_prefill_chunk_size"):
        build_policy(name, {"max_batch_tokens": 100, "max_prefill_chunk_size": 200})


# --- fcfs ---------------------------------------------------------------------


def test_fcfs_first_task_that_does_not_fit_ends_the_batch() -> None:
    s = FcfsScheduler(max_batch_tokens=10, max_num_seqs=8, max_prefill_chunk_size=8)
    s.submit([pf(1, 1, 8)])
    s.submit([pf(2, 2, 4)])
    s.submit([dc(3, 3)])
    assert ids(s.get_work()) == [1]  # 2 does not fit; the decode behind it waits too
    assert ids(s.get_work()) == [2, 3]


def test_fcfs_task_breaking_the_session_rule_waits_in_place() -> None:
    s = FcfsScheduler(max_batch_tokens=10, max_num_seqs=8, max_prefill_chunk_size=8)
    for t in (dc(1, 1), dc(2, 1), dc(3, 2), pf(4, 1, 2)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 3]
    assert ids(s.get_work()) == [2]
    assert ids(s.get_work()) == [4]


def test_fcfs_takes_a_prompts_chunks_together_and_caps_sequences() -> None:
    s = FcfsScheduler(max_batch_tokens=100, max_num_seqs=3, max_prefill_chunk_size=8)
    s.submit([pf(1, 1, 8), pf(2, 1, 8)])
    s.submit([dc(3, 2)])
    s.submit([dc(4, 3)])
    assert ids(s.get_work()) == [1, 2, 3]
    assert ids(s.get_work()) == [4]


def test_fcfs_rejects_chunks_over_the_limit_with_a_reason() -> None:
    s = FcfsScheduler(max_batch_tokens=10, max_num_seqs=8, max_prefill_chunk_size=8)
    assert (
        s.try_submit([pf(1, 1, 9)]) == "prefill chunk of 9 tokens exceeds max_prefill_chunk_size 8"
    )


# --- priority -----------------------------------------------------------------


def test_priority_runs_lower_values_first_and_ties_in_arrival_order() -> None:
    s = PriorityScheduler(max_batch_tokens=3, max_num_seqs=8, max_prefill_chunk_size=3)
    s.submit([Task(1, 1, "decode", 1, priority=5)])
    s.submit([Task(2, 2, "decode", 1, priority=0)])
    s.submit([Task(3, 3, "decode", 1, priority=5)])
    s.submit([Task(4, 4, "decode", 1, priority=-1)])
    assert ids(s.get_work()) == [4, 2, 1]
    assert ids(s.get_work()) == [3]


def test_priority_never_reorders_a_sessions_own_tasks() -> None:
    s = PriorityScheduler(max_batch_tokens=8, max_num_seqs=8, max_prefill_chunk_size=4)
    s.submit([Task(1, 1, "prefill", 4, priority=9), Task(2, 1, "prefill", 4, priority=0)])
    assert ids(s.get_work()) == [1, 2]


# --- prefill-first --------------------------------------------------------------


def test_prefill_first_batches_hold_only_prefill_while_prompts_wait() -> None:
    s = PrefillFirstScheduler(max_batch_tokens=8, max_decode_sequences=2, max_prefill_chunk_size=4)
    s.submit([dc(1, 1)])
    s.submit([dc(2, 2)])
    s.submit([dc(3, 3)])
    s.submit([pf(4, 4, 4), pf(5, 4, 4), pf(6, 4, 4)])
    assert ids(s.get_work()) == [4, 5]
    assert ids(s.get_work()) == [6]
    assert ids(s.get_work()) == [1, 2]  # then decodes, up to the cap
    assert ids(s.get_work()) == [3]


# --- sjf ------------------------------------------------------------------------


def test_sjf_serves_the_shortest_remaining_prompt_first() -> None:
    s = SjfScheduler(max_batch_tokens=9, max_decode_sequences=1, max_prefill_chunk_size=4)
    s.submit([pf(1, "long", 4), pf(2, "long", 4), pf(3, "long", 4)])
    s.submit([pf(4, "short", 3)])
    s.submit([pf(5, "mid", 4), pf(6, "mid", 2)])
    # Pass 1 by remaining tokens: short (3), mid (6), long (12, does not fit in 2).
    # Pass 2: mid has 2 left and fits.
    assert ids(s.get_work()) == [4, 5, 6]
    assert ids(s.get_work()) == [1, 2]
    assert ids(s.get_work()) == [3]


def test_sjf_still_serves_decodes_first() -> None:
    s = SjfScheduler(max_batch_tokens=9, max_decode_sequences=1, max_prefill_chunk_size=4)
    s.submit([pf(1, 1, 1)])
    s.submit([dc(2, 2)])
    assert ids(s.get_work()) == [2, 1]


# --- fair -----------------------------------------------------------------------


def test_fair_serves_the_session_with_the_lowest_counter() -> None:
    s = FairScheduler(max_batch_tokens=4, max_num_seqs=8, max_prefill_chunk_size=4)
    s.submit([pf(1, "heavy", 4), pf(2, "heavy", 4), pf(3, "heavy", 4)])
    assert ids(s.get_work()) == [1]
    s.submit([pf(4, "light", 4)])  # lifted to heavy's counter (4), ties by arrival
    assert ids(s.get_work()) == [2]
    assert s.counter("heavy") == 8.0 and s.counter("light") == 4.0
    assert ids(s.get_work()) == [4]
    assert ids(s.get_work()) == [3]


def test_fair_charges_decode_tokens_by_their_weight() -> None:
    s = FairScheduler(max_batch_tokens=2, max_num_seqs=8, max_prefill_chunk_size=1, decode_weight=3)
    s.submit([dc(1, "a")])
    s.submit([pf(2, "b", 1)])
    s.submit([dc(3, "a")])
    s.submit([pf(4, "b", 1)])
    assert ids(s.get_work()) == [1, 2]
    assert s.counter("a") == 3.0 and s.counter("b") == 1.0
    assert ids(s.get_work()) == [4, 3]  # b is lower now


def test_fair_lets_a_smaller_task_through_when_the_lowest_does_not_fit() -> None:
    s = FairScheduler(max_batch_tokens=5, max_num_seqs=8, max_prefill_chunk_size=4)
    s.submit([pf(1, "a", 3)])
    s.submit([pf(2, "b", 4)])
    s.submit([pf(3, "c", 2)])
    assert ids(s.get_work()) == [1, 3]
    assert ids(s.get_work()) == [2]


# Each op: ("submit", sid, kind, size, priority step), ("get_work",) or ("cancel", sid).
_queue_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.integers(1, 5),
            st.sampled_from(["prefill", "decode"]),
            st.integers(1, 4),
            st.integers(0, 2),
        ),
        st.tuples(st.just("get_work")),
        st.tuples(st.just("cancel"), st.integers(1, 5)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=_queue_ops, start=st.integers(-3, 3))
def test_priority_batches_like_fcfs_when_priorities_never_decrease(
    ops: list[tuple[object, ...]], start: int
) -> None:
    """A priority order that agrees with arrival order is FCFS, batch for batch: whether
    every priority is 0 (no heap), one value throughout, or rising from 0 mid-stream."""
    params = {"max_batch_tokens": 6, "max_num_seqs": 4, "max_prefill_chunk_size": 4}
    fcfs, prio = FcfsScheduler(**params), PriorityScheduler(**params)
    priority, tid = start, 0
    for op in ops:
        if op[0] == "submit":
            _, sid, kind, size, rise = op
            tid += 1
            priority += rise  # type: ignore[operator]
            size = 1 if kind == "decode" else size
            a = fcfs.submit([Task(tid, sid, kind, size)])  # type: ignore[arg-type]
            b = prio.submit([Task(tid, sid, kind, size, priority=priority)])  # type: ignore[arg-type]
            assert a == b
        elif op[0] == "get_work":
            assert ids(prio.get_work()) == ids(fcfs.get_work())
        else:
            assert ids(prio.cancel(op[1])) == ids(fcfs.cancel(op[1]))  # type: ignore[arg-type]
    while fcfs.has_work() or prio.has_work():
        assert ids(prio.get_work()) == ids(fcfs.get_work())


def test_a_float_parameter_given_as_an_integer_is_a_float_everywhere(tmp_path: Path) -> None:
    built = build_policy("fair", {"prefill_weight": 0, "decode_weight": "3"})
    assert built.params()["prefill_weight"] == 0.0
    assert type(built.params()["prefill_weight"]) is float
    assert type(built.params()["decode_weight"]) is float
    direct = FairScheduler(prefill_weight=0)  # the constructor normalises too
    assert type(direct.params()["prefill_weight"]) is float
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"schedcli": 1, "policy": "fair", "params": {"prefill_weight": 0}}\n'
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}\n'
    )
    r = run_cli("diff", str(trace), "--b", "fcfs", "-f", "json")
    assert b'"prefill_weight":0.0' in r.stdout.replace(b" ", b"")
