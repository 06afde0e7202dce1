"""Chrome trace-event JSON of a schedule, for ui.perfetto.dev and chrome://tracing.

One track (thread) per session, with a slice per dispatched task at its step (replay:
one step is drawn as 1 ms) or at its simulated time (simulate); counter tracks for the
queued tasks and for batch tokens against the budget. Written as it happens, so memory
holds one entry per session seen, not the schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

import orjson

from ..model.records import TaskEntry
from ..model.steps import Emitted, Step
from ..model.task import Id, id_key, show_id

STEP_US = 1000.0  # a replayed step on the timeline
PID = 1


def _us(value: float) -> int:
    """Whole microseconds: exact sums, so touching slices never overlap by a rounding."""
    return round(value)


class PerfettoWriter:
    """Streams trace events into ``out`` (a JSON object with a ``traceEvents`` array)."""

    def __init__(self, out: IO[bytes], *, title: str, budget: int | None) -> None:
        self._out = out
        self._budget = budget
        self._tracks: dict[tuple[type, Id], int] = {}
        self._first = True
        # Reasons, when the replay gives them: per queued task, and the step's counts.
        self._passed_over: dict[tuple[type, Id], dict[str, int]] = {}
        self._waiting: dict[str, int] | None = None
        self._codes: dict[str, None] = {}  # reason codes seen, in order
        out.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        self._event(
            {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": title}}
        )
        self._event(
            {"name": "thread_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "scheduler"}}
        )

    def _event(self, event: dict[str, Any]) -> None:
        if not self._first:
            self._out.write(b",\n")
        self._first = False
        self._out.write(orjson.dumps(event))

    def _meta(self, name: str, track: int, args: dict[str, Any]) -> None:
        self._event({"name": name, "ph": "M", "pid": PID, "tid": track, "args": args})

    def _counter(self, name: str, ts: int, args: dict[str, int]) -> None:
        self._event({"name": name, "ph": "C", "ts": ts, "pid": PID, "tid": 0, "args": args})

    def _track(self, sid: Id) -> int:
        key = id_key(sid)
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = len(self._tracks) + 1
            self._meta("thread_name", track, {"name": f"session {show_id(sid)}"})
            self._meta("thread_sort_index", track, {"sort_index": track})
        return track

    def left(self, step: int, left: Sequence[tuple[Any, str, str]] | None) -> None:
        """Reasons of the batch about to be drawn: a waiting-by-reason counter now, and on
        each task's slice when it is finally dispatched, what it was passed over for."""
        # Every code seen so far is in each count, so a series falls to 0, not off the track.
        counts: dict[str, int] = dict.fromkeys(self._codes, 0)
        for t, code, _ in left or ():
            counts[code] = counts.get(code, 0) + 1
            mine = self._passed_over.setdefault(id_key(t.tid), {})
            mine[code] = mine.get(code, 0) + 1
        self._codes.update(dict.fromkeys(counts))
        self._waiting = counts or None

    def batch(
        self,
        step: int,
        start_us: float,
        duration_us: float,
        entries: Sequence[TaskEntry],
        tokens: int,
        queued: int,
    ) -> None:
        """One get_work: a slice per task, its session's tasks sharing the step side by side."""
        ts = _us(start_us)
        self._counter("queued tasks", ts, {"queued": queued})
        counter: dict[str, int] = {"tokens": tokens}
        if self._budget is not None:
            counter["budget"] = self._budget
        self._counter("batch tokens", ts, counter)
        if self._waiting is not None:
            self._counter("waiting by reason", ts, self._waiting)
            self._waiting = None
        by_session: dict[tuple[type, Id], list[TaskEntry]] = {}
        for e in entries:
            by_session.setdefault(id_key(e["sid"]), []).append(e)
        slices: list[dict[str, Any]] = []
        for (_, sid), mine in by_session.items():
            track = self._track(sid)
            share = duration_us / len(mine)
            for i, e in enumerate(mine):
                begin = _us(start_us + i * share)
                # Ends computed like starts, so rounding never makes neighbours overlap.
                finish = (
                    _us(start_us + duration_us)
                    if i == len(mine) - 1
                    else _us(start_us + (i + 1) * share)
                )
                slices.append(
                    {
                        "name": f"{e['kind']} {show_id(e['tid'])} ({e['size']})",
                        "cat": str(e["kind"]),
                        "ph": "X",
                        "ts": begin,
                        "dur": _us(finish - begin),
                        "pid": PID,
                        "tid": track,
                        "args": self._slice_args(e, step),
                    }
                )
        # File order is time order: a session's later slices come after others' first.
        slices.sort(key=lambda ev: ev["ts"])
        for ev in slices:
            self._event(ev)

    def _slice_args(self, e: TaskEntry, step: int) -> dict[str, Any]:
        args: dict[str, Any] = {"tid": e["tid"], "size": e["size"], "step": step}
        passed_over = self._passed_over.pop(id_key(e["tid"]), None)
        if passed_over:
            args["passed_over"] = passed_over
        return args

    def preempted(self, step: int, ts_us: float, sids: Sequence[Id]) -> None:
        """A request-level step's preemptions: a mark on each request's track."""
        for sid in sids:
            self._event(
                {
                    "name": "preempted",
                    "ph": "i",
                    "s": "t",
                    "ts": _us(ts_us),
                    "pid": PID,
                    "tid": self._track(sid),
                    "args": {"step": step},
                }
            )

    def record(self, record: Emitted) -> None:
        """A replay's record (steps become slices; others are not drawn)."""
        if isinstance(record, Step):
            step = record.step
            self.batch(step, step * STEP_US, STEP_US, record.batch, record.tokens, record.queued)
            if record.preempted:
                self.preempted(step, step * STEP_US, record.preempted)

    __call__ = record

    def close(self) -> None:
        self._out.write(b"\n]}\n")
