"""A task-level recording's steps, timed (``fit``): a step's time is the gap from its
get_work to the next one."""

from __future__ import annotations

import math

from ....formats.trace import open_trace
from ....model.errors import InputError
from ....model.limits import MAX_SECONDS
from ....model.task import DECODE, Id, Task, id_key
from ..facts import TimedStep


def timed_steps(path: str) -> tuple[list[TimedStep], int]:
    """The recording's busy steps with their durations, and how many batches were empty."""
    steps: list[TimedStep] = []
    idle = 0
    queued: dict[tuple[type, Id], Task] = {}
    last: tuple[float, TimedStep] | None = None
    clocked = False
    with open_trace(path) as reader:
        for event in reader:
            if event.op == "submit" and event.tasks:
                if isinstance(event.meta, dict) and "rejected" in event.meta:
                    continue  # the recorder marks groups the scheduler refused
                for t in event.tasks:
                    queued[id_key(t.tid)] = t
                continue
            if event.op != "get_work":
                continue
            if event.t is None:
                raise InputError(
                    reader.name, event.line, "get_work has no time: record with clock=True"
                )
            clocked = True
            step = _step(event.expect or [], queued)
            if last is not None:
                prev_t, prev = last
                prev.seconds = _gap(prev_t, event.t, reader.name, event.line)
                if prev.tokens == 0:
                    idle += 1
                else:
                    steps.append(prev)
            last = (event.t, step)
    if not clocked:
        raise InputError(path, None, "no get_work with a time: nothing to fit")
    return steps, idle


def _gap(before: float, now: float, name: str, line: int) -> float:
    """Seconds between two get_work calls: finite, not negative, within MAX_SECONDS."""
    if not (math.isfinite(before) and math.isfinite(now)) or not 0 <= now <= MAX_SECONDS:
        raise InputError(name, line, f"t must be between 0 and {MAX_SECONDS:g} seconds, not {now}")
    if now < before:
        raise InputError(name, line, f"t goes back in time, from {before} to {now}")
    return now - before


def _step(expect: list[Id], queued: dict[tuple[type, Id], Task]) -> TimedStep:
    tokens = decodes = context = 0
    positioned = True
    for tid in expect:
        t = queued.pop(id_key(tid), None)
        if t is None:
            continue
        tokens += t.size
        if t.kind is DECODE:
            decodes += 1
        if t.position is None:
            positioned = False
        else:
            context += t.position + t.size
    return TimedStep(tokens, decodes, context if positioned else None, 0.0)
