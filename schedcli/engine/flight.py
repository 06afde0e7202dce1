"""The flight recorder's window: the last N calls, and what was queued before them."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator

from ..model.records import Record
from ..model.task import Id


class Window:
    """Keeps the last ``size`` recorded calls. Calls that fall out of the window update
    ``before``, the tasks queued when the oldest kept call was made, so a dump can start by
    submitting them (in their original order and groups) and then replay on its own."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.events: deque[tuple[Record, list[Record] | None, list[Id]]] = deque()
        # tid -> (group number, task record), in submission order (ids are ints and
        # strings only, so 1 and "1" are two keys).
        self.before: dict[Id, tuple[int, Record]] = {}
        self._groups = 0

    def add(self, event: Record, accepted: list[Record] | None, removed: list[Id]) -> None:
        """A call: the tasks it queued (a submit), or the tids it took out of the queue."""
        self.events.append((event, accepted, removed))
        if len(self.events) > self.size:
            _, old_accepted, old_removed = self.events.popleft()
            if old_accepted:
                group = self._groups
                self._groups += 1
                for record in old_accepted:
                    self.before[record["tid"]] = (group, record)
            for tid in old_removed:
                self.before.pop(tid, None)

    def replayable(self) -> Iterator[Record]:
        """The tasks queued before the window, then the window's calls, as trace events."""
        queued = list(self.before.values())
        for _, members in itertools.groupby(queued, key=lambda item: item[0]):
            yield {
                "op": "submit",
                "tasks": [record for _, record in members],
                "meta": {"queued_before_window": True},
            }
        for event, _, _ in self.events:
            yield event
