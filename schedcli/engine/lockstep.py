"""Two replays of one trace, event by event: how ``diff`` compares two policies."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..formats.trace import Event
from .replay import Replayer, few_collections


def clone(event: Event) -> Event:
    """The same event with its own task objects, so two policies never share one."""
    if not event.tasks:
        return event
    tasks = [t.copy() for t in event.tasks]
    return Event(event.op, event.line, event.step, event.t, tasks=tasks, expect=event.expect)


def run_in_lockstep(
    events: Iterable[Event], a: Replayer, b: Replayer, after_each: Callable[[], None]
) -> None:
    """Feed every event to ``a`` and a copy of it to ``b``, then close both; ``after_each``
    runs after each event, while both sides' records are still fresh."""
    with few_collections():
        for event in events:
            twin = clone(event)
            a.feed(event)
            b.feed(twin)
            after_each()
    a.close()
    b.close()
