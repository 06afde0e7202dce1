"""Two replays of one trace, line by line (``Replayer.lockstep``: how ``diff`` compares two
policies): each policy its own copy of a line; and a replay's collector setting."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from ..formats.trace import Event, Line


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


@contextmanager
def few_collections() -> Iterator[None]:
    """Collect the young generation every 100,000 allocations instead of every 700.

    A replay allocates millions of objects that die young and makes no cycles of its own;
    at the default threshold the collector's passes over them were a fifth of the run.
    """
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], 100_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
