"""engine/clock.py: a trace's step mode, decided by its first get_work or step, and the
numbering of its steps."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcli.engine.clock import EXPLICIT, PLAIN, STEPPED, StepClock
from schedcli.formats.trace import Event
from schedcli.model.errors import InputError


def submit(line: int, step: int | None = None) -> Event:
    return Event("submit", line, step)


def get_work(line: int) -> Event:
    return Event("get_work", line, None)


def test_a_trace_without_get_work_or_steps_is_plain_at_step_zero() -> None:
    clock = StepClock("t.jsonl")
    for line in range(2, 5):
        assert clock.advance(submit(line)) is None
    assert clock.mode is PLAIN and clock.final_step == 0


def test_an_empty_trace_ends_at_step_zero() -> None:
    assert StepClock("t.jsonl").final_step == 0


def test_get_work_events_are_numbered_from_zero_in_order() -> None:
    clock = StepClock("t.jsonl")
    assert [clock.get_work_step(get_work(line)) for line in (2, 4, 5)] == [0, 1, 2]
    assert clock.mode is EXPLICIT and clock.next_explicit == 3


def test_a_rising_step_moves_the_clock_on_and_an_equal_one_does_not() -> None:
    clock = StepClock("t.jsonl")
    assert clock.advance(submit(2, 3)) is None  # the first step seen: nothing before it
    assert clock.advance(submit(3, 3)) is None
    assert clock.advance(submit(4)) is None  # no step: the step of the one before
    assert clock.advance(submit(5, 7)) == (3, 7)
    assert clock.mode is STEPPED and clock.final_step == 7


def test_get_work_in_a_stepped_trace_is_bad_input_naming_both_lines() -> None:
    clock = StepClock("t.jsonl")
    clock.advance(submit(3, 0))
    with pytest.raises(InputError) as caught:
        clock.get_work_step(get_work(9))
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("t.jsonl:9: get_work in a stepped trace (line 3 gave")


def test_a_step_in_an_explicit_trace_is_bad_input_naming_both_lines() -> None:
    clock = StepClock("t.jsonl")
    clock.get_work_step(get_work(2))
    with pytest.raises(InputError) as caught:
        clock.advance(submit(6, 1))
    assert str(caught.value).startswith(
        "t.jsonl:6: submit with a step in an explicit trace (the get_work at line 2"
    )


def test_a_plain_start_may_turn_explicit_or_stepped_losing_nothing() -> None:
    explicit = StepClock("t.jsonl")
    explicit.advance(submit(2))
    assert explicit.get_work_step(get_work(3)) == 0 and explicit.mode is EXPLICIT
    stepped = StepClock("t.jsonl")
    stepped.advance(submit(2))
    assert stepped.advance(submit(3, 4)) == (0, 4) and stepped.mode is STEPPED


def test_check_applies_the_same_rules_as_a_replay() -> None:
    clock = StepClock("t.jsonl")
    clock.check(submit(2, 1))
    with pytest.raises(InputError, match="get_work in a stepped trace"):
        clock.check(get_work(3))


# A trace's events: a step (or none) each, lines in order.
steps = st.lists(st.none() | st.integers(0, 50), max_size=40)


@given(steps)
def test_stepped_numbering_is_monotone_and_ends_at_the_highest_step(
    given_steps: list[int | None],
) -> None:
    clock = StepClock("t.jsonl")
    moves = [m for line, s in enumerate(given_steps, 2) if (m := clock.advance(submit(line, s)))]
    for old, new in moves:
        assert old < new
    # Each move starts where the one before ended.
    assert all(a[1] == b[0] for a, b in itertools.pairwise(moves))
    seen = [s for s in given_steps if s is not None]
    assert clock.final_step == (max(seen) if seen else 0)
    assert clock.mode is (STEPPED if seen else PLAIN)
    # It moved through each new highest step after the first event's (0 if stepless).
    start = given_steps[0] if given_steps and given_steps[0] is not None else 0
    highs = [s for i, s in enumerate(seen) if s > max(seen[:i], default=start)]
    assert [new for _, new in moves] == [h for h in highs if h > start]


@given(st.integers(0, 60))
def test_explicit_numbering_counts_get_work_events(count: int) -> None:
    clock = StepClock("t.jsonl")
    numbers = [clock.get_work_step(get_work(line)) for line in range(2, 2 + count)]
    assert numbers == list(range(count))
