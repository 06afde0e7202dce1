"""Two replays of one trace, line by line: how ``diff`` compares two policies."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..formats.trace import Event, Line, Run
from .replay import Replayer, few_collections


def clone(event: Event) -> Event:
    """The same event with its own task objects, so two policies never share one."""
    if not event.tasks:
        return event
    tasks = [t.copy() for t in event.tasks]
    return Event(
        event.op, event.line, event.step, event.t, tasks=tasks, expect=event.expect, meta=event.meta
    )


def twin(item: Line) -> Line:
    """The same line with its own task objects (see ``clone``)."""
    if isinstance(item, list):
        return [t.copy() for t in item]
    return clone(item)


def run_in_lockstep(
    runs: Iterable[Run],
    a: Replayer,
    b: Replayer,
    after_each: Callable[[], None],
    before_close: Callable[[], None] | None = None,
) -> None:
    """Feed every line to ``a`` and a copy of it to ``b``, then (after ``before_close``,
    which may refuse) close both; ``after_each`` runs after each run of lines, so what both
    sides emitted is compared as it comes and held no longer than a read's worth of lines."""
    with few_collections():
        for line, items in runs:
            for item in items:
                copy = twin(item)
                a.apply(item, line)
                b.apply(copy, line)
                line += 1
            after_each()
    if before_close is not None:
        before_close()
    a.close()
    b.close()
