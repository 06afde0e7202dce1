"""engine/shrink/focus.py: the queue at the failing step and before it, and the windows
shrinking starts from: a trace of what was queued at a step, then the lines to the failure."""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from schedcli.engine.run import open_replay
from schedcli.engine.shrink.candidates import Lines
from schedcli.engine.shrink.focus import Queue, queues_at, window, window_steps
from schedcli.model.steps import Step

TRACE = str(Path(__file__).resolve().parents[3] / "traces" / "rotation-fairness.jsonl")


@given(st.integers(0, 10_000))
def test_windows_start_at_the_failing_step_then_double_back(failing: int) -> None:
    steps = window_steps(failing)
    assert steps[0] == failing
    assert [failing - s for s in steps[1:]] == [2**k for k in range(len(steps) - 1)]
    assert all(s > 0 for s in steps[1:])  # step 0 is the whole trace: no window
    assert failing - 2 ** (len(steps) - 1) <= 0  # and none is left out


def test_the_queue_at_each_step_asked_with_submit_lines_and_ids() -> None:
    queues = queues_at(TRACE, None, {}, [1, 3, 99], drain=False)
    assert queues == {
        1: Queue(5, ((2, 2, 10), (2, 3, 10), (2, 4, 10), (3, 6, 20))),
        3: Queue(8, ((2, 4, 10), (6, 8, 30), (6, 9, 30))),
    }


def replayed(data: bytes) -> list[list[int]]:
    batches: list[list[int]] = []
    with open_replay("w.jsonl", data=data, note=lambda _: None) as opened:

        def emit(r: object) -> None:
            if isinstance(r, Step):
                batches.append([t["tid"] for t in r.batch])

        opened.replayer(emit, check=True).replay()
    return batches


def test_a_window_replays_the_failing_step_from_what_was_queued_before_it() -> None:
    lines = Lines(TRACE)
    try:
        queue = queues_at(TRACE, None, {}, [3], drain=False)[3]  # type: ignore[index]
        end = lines.index(9)  # step 4's get_work, expect [9]
        candidate = window(lines, queue, end, keep_expects=False)
        assert candidate is not None
        data = candidate.data(lines)
        events = [orjson.loads(x) for x in data.splitlines()[1:]]
        # The submits cut to the tasks still queued, then step 3's get_work on.
        assert [t["tid"] for t in events[0]["tasks"]] == [4]
        assert [t["tid"] for t in events[1]["tasks"]] == [8, 9]
        assert [e["op"] for e in events[2:]] == ["get_work", "get_work"]
        assert "expect" not in events[2] and events[3]["expect"] == [9]  # only the end's kept
        assert replayed(data) == [[4, 8], [9]]  # checked against the kept expect
        kept = window(lines, queue, end, keep_expects=True)
        assert kept is not None and orjson.loads(kept.data(lines).splitlines()[3])["expect"]
        assert window(lines, queue, lines.index(7), keep_expects=False) is None  # end before
    finally:
        lines.close()
