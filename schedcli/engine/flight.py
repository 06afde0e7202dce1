"""The flight recorder's window: the last N calls, and what was queued before them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import orjson

from ..model.records import Record
from ..model.task import Id

Call = tuple[Record | bytes, list[Record] | None, list[Id]]


class Window:
    """Keeps the last ``size`` recorded calls. Calls that fall out of the window update
    ``before``, the tasks queued when the oldest kept call was made, so a dump can start by
    submitting them (in their original order and groups) and then replay on its own."""

    def __init__(self, size: int) -> None:
        self.size = size
        # The calls, as (event, the records of the tasks it queued, the tids it took out
        # of the queue), or for a submit kept as its line (add_line), (line, None, [its
        # tid]). It grows to ``size``, then the newest call replaces the oldest, at
        # ``_next``. A list, not a deque: compiled, its slots are read and written in
        # place, where a deque's methods are called by name.
        self._calls: list[Call] = []
        self._next = 0
        # tid -> (group number, task record or line), in submission order (ids are ints
        # and strings only, so 1 and "1" are two keys).
        self.before: dict[Id, tuple[int, Record | bytes]] = {}
        self._groups = 0

    def add_line(self, line: bytes, tid: Id) -> None:
        """An accepted submit of one common task, as the recorder writes it to a file
        (``{"op":"submit","tid":..,"sid":..,"kind":..,"size":..}``): the common call is
        kept as those bytes, and becomes records only in a dump."""
        self._keep((line, None, [tid]))

    def add(self, event: Record, accepted: list[Record] | None, removed: list[Id]) -> None:
        """A call: the tasks it queued (a submit), or the tids it took out of the queue."""
        self._keep((event, accepted, removed))

    @property
    def count(self) -> int:
        return len(self._calls)

    def _keep(self, call: Call) -> None:
        calls = self._calls
        if len(calls) < self.size:
            calls.append(call)
            return
        at = self._next
        oldest = calls[at]
        calls[at] = call
        self._next = at + 1 if at + 1 < self.size else 0
        self._dropped(oldest)

    def calls(self) -> list[Call]:
        """The kept calls, oldest first."""
        at = self._next
        return self._calls[at:] + self._calls[:at]

    def _dropped(self, oldest: Call) -> None:
        old, old_accepted, tids = oldest
        if type(old) is bytes:
            self.before[tids[0]] = (self._groups, old)
            self._groups += 1
            return
        if old_accepted:
            group = self._groups
            self._groups += 1
            for record in old_accepted:
                self.before[record["tid"]] = (group, record)
        for tid in tids:
            self.before.pop(tid, None)

    def replayable(self) -> Iterator[Record]:
        """The tasks queued before the window, then the window's calls, as trace events."""
        queued = list(self.before.values())
        for _, members in itertools.groupby(queued, key=lambda item: item[0]):
            yield {
                "op": "submit",
                "tasks": [_record(kept) for _, kept in members],
                "meta": {"queued_before_window": True},
            }
        for event, _, _ in self.calls():
            if isinstance(event, bytes):
                yield {"op": "submit", "tasks": [_record(event)]}
            else:
                yield event


def _record(kept: Record | bytes) -> Record:
    """A task's record; from a kept line, the record the recorder would have built (the
    same keys in the same order: the line's, without op, then produce_output)."""
    if not isinstance(kept, bytes):
        return kept
    record: Record = orjson.loads(kept)
    del record["op"]
    record["produce_output"] = True  # a kept line's task produces output
    return record
