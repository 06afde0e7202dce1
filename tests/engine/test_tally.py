"""The per-session tally behind cancels: the same answer whether it walks or counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli import Task
from schedcli.model.tally import SessionTally


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "ask"]), st.integers(0, 3))))
def test_a_tally_answers_like_a_count_of_the_collection(ops: list[tuple[str, int]]) -> None:
    tally = SessionTally()
    tasks: list[Task] = []
    for op, sid in ops:
        if op == "add":
            tasks.append(Task(len(tasks), sid, "decode", 1))
            tally.add(sid)
        elif op == "remove":
            mine = [t for t in tasks if t.sid == sid]
            if mine:
                tasks.remove(mine[0])
                tally.remove(sid)
        else:
            assert tally.of(sid, tasks) == sum(t.sid == sid for t in tasks)


def test_a_tally_asked_often_still_answers_after_it_starts_counting() -> None:
    tally = SessionTally()
    tasks = [Task(i, i % 7, "decode", 1) for i in range(70)]
    for t in tasks:
        tally.add(t.sid)
    for _ in range(5):  # five walks of 70 outweigh 70 adds: it counts from here on
        assert tally.of(3, tasks) == 10
    tasks.append(Task(70, 3, "decode", 1))
    tally.add(3)
    assert tally.of(3, tasks) == 11
    assert tally.of(99, tasks) == 0
