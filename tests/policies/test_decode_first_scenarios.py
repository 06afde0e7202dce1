"""Every scenario of shared/specs/decode-first.md, one test each, in the spec's order."""

from __future__ import annotations

from collections import Counter

import pytest

from schedcli import DecodeFirstScheduler, Task, TaskKind, UsageError, build_policy
from tests.helpers import dc, ids, make, pf

# --- limits -----------------------------------------------------------------


def test_defaults_are_544_32_256() -> None:
    s = DecodeFirstScheduler()
    assert (s.max_batch_tokens, s.max_decode_sequences, s.max_prefill_chunk_size) == (544, 32, 256)


def test_floor_is_exactly_a_full_decode_batch_plus_one_full_chunk() -> None:
    DecodeFirstScheduler(288, 32, 256)
    with pytest.raises(ValueError, match=r"max_prefill_chunk_size \(256\) must be <= .* \(255\)"):
        DecodeFirstScheduler(287, 32, 256)


@pytest.mark.parametrize(
    ("limits", "rule"),
    [
        ((544, 544, 256), "max_decode_sequences .* less than max_batch_tokens"),
        ((544, 600, 256), "max_decode_sequences .* less than max_batch_tokens"),
        ((544, 32, 2**40), "max_prefill_chunk_size .* must be <="),
        ((0, 32, 256), "max_batch_tokens must be >= 1"),
        ((544, 0, 256), "max_decode_sequences must be >= 1"),
        ((544, 32, 0), "max_prefill_chunk_size must be >= 1"),
        ((544, 32, -1), "max_prefill_chunk_size must be >= 1"),
    ],
)
def test_invalid_limits_are_refused_naming_the_rule(
    limits: tuple[int, int, int], rule: str
) -> None:
    with pytest.raises(ValueError, match=rule):
        DecodeFirstScheduler(*limits)


@pytest.mark.parametrize("value", [544.0, True, "lots"])
def test_a_limit_of_the_wrong_type_is_refused_naming_the_rule(value: object) -> None:
    with pytest.raises(UsageError, match="max_batch_tokens must be an integer"):
        build_policy("decode-first", {"max_batch_tokens": value, "max_decode_sequences": 32})


def test_huge_budget_with_small_decode_cap_and_chunk_is_valid() -> None:
    s = DecodeFirstScheduler(2**62, 32, 256)
    assert s.token_budget == 2**62


# --- construction, admission, classification --------------------------------


def test_decode_goes_before_an_earlier_one_token_prefill() -> None:
    s = make(2, 4)
    assert s.submit([pf(1, 10, 1)])
    assert s.submit([dc(2, 20)])
    assert ids(s.get_work()) == [2, 1]


def test_one_token_prompt_chunk_stays_a_prefill() -> None:
    assert Task(1, 10, "prefill", 1).kind is TaskKind.PREFILL
    assert not Task(1, 10, "prefill", 1).is_decode


@pytest.mark.parametrize("size", [2, 4])
def test_decode_wider_than_one_token_is_rejected(size: int) -> None:
    s = make(2, 4)
    assert not s.submit([Task(1, 10, "decode", size)])
    assert not s.has_work()


def test_one_token_decode_is_accepted() -> None:
    s = make(2, 4)
    assert s.submit([dc(1, 10)])
    assert s.has_work()


def test_empty_and_oversized_prefill_are_rejected_and_queue_nothing() -> None:
    s = make(1, 4)
    assert not s.submit([pf(1, 10, 0)])
    assert not s.has_work()
    assert not s.submit([pf(2, 10, 5)])
    assert not s.has_work()
    assert s.get_work() == []


def test_tid_already_queued_is_rejected_across_sessions() -> None:
    s = make(2, 4)
    assert s.submit([dc(7, 10)])
    assert not s.submit([dc(7, 20)])
    assert ids(s.get_work()) == [7]
    assert not s.has_work()


def test_tid_repeated_inside_a_group_rejects_the_group() -> None:
    s = make(2, 4)
    assert not s.submit([pf(5, 10, 4), pf(5, 10, 4)])
    assert not s.has_work()
    assert s.clear() == []


def test_one_bad_task_rejects_the_whole_group() -> None:
    s = make(2, 4)
    assert not s.submit([pf(1, 10, 4), pf(2, 10, 0), pf(3, 10, 4)])
    assert not s.has_work()


def test_group_clashing_with_a_queued_tid_is_rejected_whole() -> None:
    s = make(2, 4)
    assert s.submit([dc(7, 10)])
    assert not s.submit([pf(8, 20, 4), pf(7, 20, 4)])
    assert ids(s.get_work()) == [7]
    assert not s.has_work()


def test_tid_is_free_again_after_dispatch_and_after_cancel() -> None:
    s = make(2, 4)
    assert s.submit([dc(7, 10)])
    assert ids(s.get_work()) == [7]
    assert s.submit([dc(7, 10)])
    assert ids(s.get_work()) == [7]
    assert s.submit([dc(7, 10)])
    assert ids(s.cancel(10)) == [7]
    assert s.submit([dc(7, 10)])
    assert ids(s.get_work()) == [7]


def test_decodes_then_prefills_fill_one_batch_with_summed_tokens() -> None:
    s = make(2, 8)
    for t in (dc(1, 10), dc(2, 20), pf(3, 30, 6), pf(4, 40, 5)):
        assert s.submit([t])
    batch = s.get_work()
    assert ids(batch) == [1, 2, 3, 4]
    assert sum(t.size for t in batch) == 13


def test_rejection_reasons_name_the_broken_rule() -> None:
    s = make(1, 4)
    assert (
        s.try_submit([pf(1, 10, 5)]) == "prefill chunk of 5 tokens exceeds max_prefill_chunk_size 4"
    )
    assert s.try_submit([pf(1, 10, 0)]) == "task 1 has size 0"
    assert s.try_submit([Task(2, 10, "decode", 2)]) == "decode 2 has size 2; a decode is 1 token"
    assert s.try_submit([dc(7, 10)]) is None
    assert s.try_submit([dc(7, 20)]) == "tid 7 is already queued"
    assert s.try_submit([dc("7", 20)]) is None
    assert s.try_submit([pf(8, 20, 1), pf(8, 20, 1)]) == "tid 8 appears twice in the group"


def test_int_and_string_ids_are_different_and_come_back_as_given() -> None:
    s = make(2, 4)
    assert s.submit([dc(1, 10), dc("1", "10")])
    batch = s.get_work()
    assert [(t.tid, t.sid) for t in batch] == [(1, 10), ("1", "10")]


# --- decodes -----------------------------------------------------------------


def test_decodes_are_capped_per_batch_in_arrival_order() -> None:
    s = make(2, 4)
    for t in (dc(1, 10), dc(2, 20), dc(3, 30)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 2]
    assert ids(s.get_work()) == [3]
    assert not s.has_work()


def test_decodes_stay_fifo_across_drain_and_refill() -> None:
    s = make(2, 4)
    for t in (dc(1, 10), dc(2, 20), dc(3, 30)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 2]
    s.submit([dc(4, 40)])
    assert ids(s.get_work()) == [3, 4]


def test_full_decode_batch_still_leaves_room_for_a_full_chunk() -> None:
    s = make(3, 4)
    for t in (dc(1, 10), dc(2, 20), dc(3, 30), pf(50, 90, 4)):
        s.submit([t])
    batch = s.get_work()
    assert ids(batch) == [1, 2, 3, 50]
    assert sum(t.size for t in batch) == 7


def test_second_decode_of_a_session_waits_at_the_head_in_order() -> None:
    s = make(8, 4)
    for t in (dc(1, 10), dc(2, 10), dc(3, 10), dc(4, 20)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 4]
    assert ids(s.get_work()) == [2]
    assert ids(s.get_work()) == [3]


def test_prefill_never_shares_a_batch_with_its_sessions_decode() -> None:
    s = make(8, 4)
    for t in (dc(1, 10), pf(2, 10, 4), pf(3, 20, 4)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 3]
    assert ids(s.get_work()) == [2]


# --- prefill rotation ----------------------------------------------------------


def test_chunks_of_one_group_come_out_in_order() -> None:
    s = make(1, 2)
    s.submit([pf(1, 7, 2), pf(2, 7, 2)])
    assert ids(s.get_work()) == [1, 2]


def test_long_prompt_cannot_hog_the_batch() -> None:
    s = make(2, 4)
    s.submit([pf(1, 10, 4), pf(2, 10, 4), pf(3, 10, 4), pf(4, 10, 4)])
    s.submit([pf(5, 20, 4), pf(6, 20, 4)])
    assert ids(s.get_work()) == [1, 5]
    assert ids(s.get_work()) == [2, 6]
    assert ids(s.get_work()) == [3, 4]
    assert not s.has_work()


def test_lone_session_fills_the_batch_across_passes() -> None:
    s = make(1, 4)
    s.submit([pf(1, 10, 4), pf(2, 10, 4)])
    assert ids(s.get_work()) == [1, 2]


def test_batch_stops_when_the_next_chunk_does_not_fit() -> None:
    s = make(1, 4)
    for t in (pf(1, 10, 4), pf(2, 20, 4), pf(3, 30, 4)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 2]
    assert ids(s.get_work()) == [3]


def test_deferred_session_outranks_one_never_reached() -> None:
    s = make(1, 4)
    for t in (pf(1, 10, 4), pf(2, 20, 3), pf(3, 30, 4), pf(4, 40, 2), pf(5, 50, 4)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 2, 4]
    assert ids(s.get_work()) == [3, 5]


def test_deferred_sessions_keep_their_order() -> None:
    s = make(1, 4)
    for t in (pf(1, 10, 4), pf(2, 20, 4), pf(3, 30, 4), pf(4, 40, 3)):
        s.submit([t])
    assert ids(s.get_work()) == [1, 2]
    assert ids(s.get_work()) == [3, 4]


def test_rotation_is_fair_across_calls() -> None:
    s = make(1, 4)
    tid = 1
    for sid in (10, 20, 30):
        s.submit([pf(tid + c, sid, 4) for c in range(8)])
        tid += 8
    served: Counter[object] = Counter()
    for _ in range(9):
        served.update(t.sid for t in s.get_work())
    assert served == {10: 6, 20: 6, 30: 6}


def test_rotation_survives_an_empty_batch_and_new_sessions() -> None:
    s = make(1, 4)
    s.submit([pf(1, 10, 4)])
    assert ids(s.get_work()) == [1]
    assert s.get_work() == []
    s.submit([pf(2, 10, 4)])
    assert ids(s.get_work()) == [2]
    s.submit([pf(3, 10, 4)])
    s.submit([pf(4, 20, 4)])
    assert ids(s.get_work()) == [3, 4]


# --- cancel and clear ----------------------------------------------------------


def test_cancel_returns_queued_group_marked_cancelled() -> None:
    s = make(2, 4)
    s.submit([pf(1, 77, 4), pf(2, 77, 4)])
    dropped = s.cancel(77)
    assert ids(dropped) == [1, 2]
    assert all(t.cancelled for t in dropped)
    assert not s.has_work()


def test_cancel_drops_only_that_sessions_decodes() -> None:
    s = make(4, 4)
    for t in (dc(1, 10), dc(2, 20), dc(3, 10)):
        s.submit([t])
    assert set(ids(s.cancel(10))) == {1, 3}
    assert ids(s.get_work()) == [2]


def test_cancel_of_unknown_session_and_second_cancel_return_nothing() -> None:
    s = make(2, 4)
    assert s.cancel(404) == []
    s.submit([dc(1, 10)])
    assert ids(s.cancel(10)) == [1]
    assert s.cancel(10) == []


def test_dispatched_prefill_belongs_to_the_caller() -> None:
    s = make(1, 4)
    s.submit([pf(9, 77, 4)])
    assert ids(s.get_work()) == [9]
    assert s.cancel(77) == []


def test_cancel_after_dispatch_leaves_other_sessions_alone() -> None:
    s = make(1, 4)
    s.submit([dc(1, 10)])
    assert ids(s.get_work()) == [1]
    s.submit([dc(2, 20)])
    assert s.cancel(10) == []
    assert ids(s.get_work()) == [2]


def test_cancelled_decode_in_the_middle_is_skipped() -> None:
    s = make(1, 4)
    for t in (dc(1, 10), dc(2, 20), dc(3, 30)):
        s.submit([t])
    assert ids(s.cancel(20)) == [2]
    assert ids(s.get_work()) == [1]
    assert ids(s.get_work()) == [3]


def test_cancelled_prefill_leaves_the_rotation() -> None:
    s = make(1, 4)
    s.submit([pf(1, 10, 4), pf(2, 10, 4)])
    s.submit([pf(3, 20, 4)])
    assert ids(s.cancel(10)) == [1, 2]
    assert ids(s.get_work()) == [3]


def test_session_that_rejoins_gets_one_turn_per_pass() -> None:
    s = make(1, 4)
    s.submit([pf(1, 10, 4)])
    assert ids(s.cancel(10)) == [1]
    for t in (pf(2, 10, 4), pf(3, 10, 4), pf(4, 20, 4), pf(5, 20, 4)):
        s.submit([t])
    assert ids(s.get_work()) == [2, 4]


def test_clear_drops_everything_marked_cancelled() -> None:
    s = make(1, 4)
    s.submit([dc(1, 10)])
    s.submit([pf(2, 20, 4)])
    dropped = s.clear()
    assert set(ids(dropped)) == {1, 2}
    assert all(t.cancelled for t in dropped)
    assert not s.has_work()
    assert s.clear() == []


def test_clear_returns_only_queued_tasks_and_cancel_after_is_empty() -> None:
    s = make(2, 4)
    s.submit([dc(1, 10)])
    s.submit([dc(2, 20)])
    assert ids(s.get_work()) == [1, 2]
    s.submit([dc(3, 30)])
    s.submit([pf(4, 40, 4)])
    assert set(ids(s.clear())) == {3, 4}
    assert s.cancel(10) == []


def test_clear_returns_tasks_in_submission_order() -> None:
    s = make(4, 4)
    order = [pf("p", 5, 4), dc(9, 1), pf(3, 2, 4), dc("a", 7), dc(1, 3)]
    for t in order:
        s.submit([t])
    assert ids(s.clear()) == ["p", 9, 3, "a", 1]


# --- where schedcli differs from the reference ---------------------------------


def test_tid_reuse_after_cancel_is_tracked_by_identity() -> None:
    """The reference reports a stale cancelled entry and then dispatches the new task."""
    s = make(2, 4)
    s.submit([dc(7, 10)])
    first = s.cancel(10)
    assert ids(first) == [7]
    s.submit([dc(7, 10)])
    second = s.cancel(10)
    assert ids(second) == [7]
    assert second[0] is not first[0]
    assert s.get_work() == []
    assert not s.has_work()


def test_tid_reuse_with_decodes_of_other_sessions_queued_before_it() -> None:
    s = make(2, 4)
    s.submit([dc(1, 20)])
    s.submit([dc(7, 10)])
    s.cancel(10)
    again = Task(7, 10, "decode", 1)
    s.submit([again])
    assert s.cancel(10) == [again]
    assert ids(s.get_work()) == [1]
    assert s.get_work() == []


def test_resubmitting_a_cancelled_task_object_dispatches_it_once() -> None:
    s = make(2, 4)
    t = dc(7, 10)
    s.submit([t])
    s.cancel(10)
    assert s.submit([t])
    assert not t.cancelled
    assert s.get_work() == [t]
    assert s.get_work() == []


def test_a_batch_owes_a_session_at_most_one_output() -> None:
    """Two prompts of one session queued back to back go in separate batches."""
    s = make(1, 4)
    s.submit([pf(1, 10, 2), pf(2, 10, 2)])
    s.submit([pf(3, 10, 2)])
    assert ids(s.get_work()) == [1, 2]
    assert ids(s.get_work()) == [3]


def test_a_rotation_of_thousands_of_sessions_turns_as_the_reference_does() -> None:
    """Thousands of waiting prompts, a few served a step, some cancelled and some joining
    while the rotation turns: long enough for the rotation's spent slots to be dropped
    many times, and the order never differs from the reference's own bookkeeping (one
    prompt per session and unique tids, where the two fixes change nothing)."""
    # Three chunks fill a batch exactly, so a pass stops at the budget, not at the end.
    params = {"max_batch_tokens": 288, "max_decode_sequences": 1, "max_prefill_chunk_size": 96}
    fixed = build_policy("decode-first", params)
    reference = build_policy("decode-first", {**params, "compat": "reference"})
    tid = 0
    sessions = 0

    def join(count: int) -> None:
        nonlocal tid, sessions
        for _ in range(count):
            sessions += 1
            group = [pf(tid + 1, sessions, 96), pf(tid + 2, sessions, 96)]
            group[0].produce_output = False
            tid += 2
            for policy in (fixed, reference):
                assert policy.submit([t.copy() for t in group])

    join(1500)
    step = 0
    while fixed.has_work():
        step += 1
        if step % 7 == 0:
            join(5)
        if step % 11 == 0:
            victim = (step * 37) % sessions + 1
            assert ids(fixed.cancel(victim)) == ids(reference.cancel(victim))
        assert ids(fixed.get_work()) == ids(reference.get_work())
    assert not reference.has_work() and step > 900
