"""Two replays of one trace, line by line: how ``diff`` compares two policies."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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
    sides emitted is compared as it comes and held no longer than a read's worth of lines.

    Where a line (or the close) runs several steps, the two sides take them in turns, so
    each batch is compared while both policies still stand at its step."""
    with few_collections():
        for line, items in runs:
            for item in items:
                copy = twin(item)
                if a.moves_steps(item) or b.moves_steps(copy):
                    _in_turns(a.applying(item, line), b.applying(copy, line))
                else:
                    a.apply(item, line)
                    b.apply(copy, line)
                line += 1
            after_each()
    if before_close is not None:
        before_close()
    _in_turns(a.closing(), b.closing())
    a.finish()
    b.finish()


def _in_turns(steps_a: Iterator[int], steps_b: Iterator[int]) -> None:
    """One step of each in turn until both are done (one may have more steps than the
    other); a side's generator finishes its line's work after its last step."""
    done_a = done_b = False
    while not (done_a and done_b):
        if not done_a:
            done_a = next(steps_a, None) is None
        if not done_b:
            done_b = next(steps_b, None) is None
