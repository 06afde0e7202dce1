"""engine/origins.py: where each queued task came from, up to one step (explain --step),
and the queue at several steps (where shrinking starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedcli.engine.origins import Origins, Queues, Reached
from schedcli.engine.run import open_replay
from schedcli.model.records import discard

TRACE = str(Path(__file__).resolve().parents[2] / "traces" / "rotation-fairness.jsonl")


def watch(observer: Origins, path: str = TRACE) -> None:
    with open_replay(path, note=lambda _: None) as opened:
        engine = observer.engine = opened.replayer(discard, observer=observer)  # type: ignore[assignment]
        engine.replay()


def test_the_step_asked_about_stops_the_replay_with_its_queue_and_batch() -> None:
    origins = Origins(2)
    with pytest.raises(Reached):
        watch(origins)
    assert origins.batch is not None and [t.tid for t in origins.batch] == [3, 7]
    assert origins.line == 7  # the get_work of step 2 (the header is line 1)
    # What get_work saw, in submission order: each task with its submit line and step.
    assert [(t.tid, line, step) for t, line, step in origins.queued.values()] == [
        (3, 2, 0), (4, 2, 0), (7, 6, 2), (8, 6, 2), (9, 6, 2)]  # fmt: skip
    assert (origins.steps, origins.last) == (3, 2)


def test_a_step_past_the_end_runs_the_whole_trace_and_counts_its_steps() -> None:
    origins = Origins(99)
    watch(origins)
    assert origins.batch is None and (origins.steps, origins.last) == (6, 5)
    assert origins.queued == {}  # every task dispatched


def test_queues_notes_the_queue_at_each_step_wanted_and_stops_after_the_last() -> None:
    queues = Queues({0, 3})
    with pytest.raises(Reached):
        watch(queues)
    assert sorted(queues.seen) == [0, 3]
    line, queued = queues.seen[0]
    assert line == 4 and [t.tid for t, _, _ in queued] == [1, 2, 3, 4, 5, 6]
    line, queued = queues.seen[3]
    assert line == 8 and [t.tid for t, _, _ in queued] == [4, 8, 9]
