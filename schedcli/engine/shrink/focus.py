"""The queue at the failing step, and at steps before it: where shrinking starts.

One observed replay of the (cut) trace notes, for each of some steps, the tasks queued
when its get_work was called (each by its submit line and tid) and that get_work's line.
A *window* from step S is then a trace of its own: the submits of what was queued at S,
cut to those tasks, followed by every line from S's get_work to the failing one. It
replays the failing step without the history before S, except what that history left
queued; a policy whose choice depends on older history (counters, a rotation) needs a
window further back, so windows are tried nearest first, doubling.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ...model.errors import SchedcliError
from ...model.task import Id, id_key
from ..origins import Queues, Reached
from ..run import open_replay
from .candidates import Candidate, Lines, Ranges


@dataclass(frozen=True)
class Queue:
    """What get_work saw at one step: its own line, and each queued task's submit line,
    tid and sid, in submission order (file lines, the header counted)."""

    line: int
    tasks: tuple[tuple[int, Id, Id], ...]


def window_steps(failing: int) -> list[int]:
    """The steps windows start from, nearest the failing one first, then doubling back."""
    steps, back = [failing], 1
    while failing - back > 0:
        steps.append(failing - back)
        back *= 2
    return steps


def queues_at(
    path: str,
    policy: str | None,
    params: Mapping[str, object],
    steps: list[int],
    drain: bool,
) -> dict[int, Queue] | None:
    """The queue at each of ``steps`` of a task-level trace that the replay reaches (it
    stops after the last, or where the trace fails); None at the request level."""
    observer = Queues(set(steps))
    try:
        with open_replay(
            path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
        ) as opened:
            if not opened.queues(observer, drain):
                return None
    except (Reached, SchedcliError):
        pass
    return {
        step: Queue(line, tuple((at, t.tid, t.sid) for t, at, _ in tasks))
        for step, (line, tasks) in observer.seen.items()
    }


def window(lines: Lines, queue: Queue, end: int, keep_expects: bool) -> Candidate | None:
    """The window from ``queue``'s step to line ``end`` (a line of the copy, kept): the
    submits of what was queued, each group cut to its queued tasks, then every line from
    the step's get_work on, their expects dropped but ``end``'s (unless ``keep_expects``).
    None where that line is no get_work (a stepped trace has no windows)."""
    first = lines.index(queue.line)
    if first < 0:  # a step of the drain after the last event: no line of its own
        return None
    queued: dict[int, set[tuple[type, Id]]] = {}
    for line, tid, _ in queue.tasks:
        queued.setdefault(lines.index(line), set()).add(id_key(tid))
    tasks: dict[int, list[Any]] = {}
    for i, raw in Candidate(Ranges.of([*sorted(queued), first])).lines(lines):
        e = orjson.loads(raw)
        if i == first:
            if e.get("op") != "get_work" or first > end:
                return None
        elif isinstance(e.get("tasks"), list):
            kept = [t for t in e["tasks"] if id_key(t["tid"]) in queued[i]]
            if len(kept) < len(e["tasks"]):
                tasks[i] = kept
    stripped: Sequence[int] = ()
    if not keep_expects:
        expects = lines.expects
        stripped = expects[bisect.bisect_left(expects, first) : bisect.bisect_left(expects, end)]
    return Candidate(Ranges.of(sorted(queued)) + Ranges([(first, end + 1)]), stripped, tasks)
