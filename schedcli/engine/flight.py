"""The flight recorder's window: the last N calls, and what was queued before them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from ..model.records import Record
from ..model.task import Id

# A call: its event, the records of the tasks it queued, the tids it took out of the queue.
Call = tuple[Record, list[Record] | None, list[Id]]
# A submit kept as its line (add_line), and its task's tid.
Kept = tuple[bytes, Id]


class Window:
    """Keeps the last ``size`` recorded calls. Calls that fall out of the window update
    ``before``, the tasks queued when the oldest kept call was made, so a dump can start by
    submitting them (in their original order and groups) and then replay on its own."""

    def __init__(self, size: int) -> None:
        self.size = size
        # The calls. It grows to ``size``, then the newest call replaces the oldest, at
        # ``_next``. A list, not a deque: compiled, its slots are read and written in
        # place, where a deque's methods are called by name.
        self._calls: list[Call | Kept] = []
        self._next = 0
        # tid -> its line (a group of its own), or (group number, task record), in
        # submission order (ids are ints and strings only, so 1 and "1" are two keys).
        self.before: dict[Id, bytes | tuple[int, Record]] = {}
        self._groups = 0

    def add_line(self, line: bytes, tid: Id) -> None:
        """An accepted submit of one common task, as the recorder writes it to a file
        (``{"op":"submit","tid":..,"sid":..,"kind":..,"size":..}``): the common call is
        kept as those bytes, and becomes records only in a dump."""
        self._keep((line, tid))

    def add(self, event: Record, accepted: list[Record] | None, removed: list[Id]) -> None:
        """A call: the tasks it queued (a submit), or the tids it took out of the queue."""
        self._keep((event, accepted, removed))

    @property
    def count(self) -> int:
        return len(self._calls)

    def _keep(self, call: Call | Kept) -> None:
        calls = self._calls
        if len(calls) < self.size:
            calls.append(call)
            return
        at = self._next
        oldest = calls[at]
        calls[at] = call
        self._next = at + 1 if at + 1 < self.size else 0
        self._dropped(oldest)

    def calls(self) -> list[Call | Kept]:
        """The kept calls, oldest first."""
        at = self._next
        return self._calls[at:] + self._calls[:at]

    def _dropped(self, oldest: Call | Kept) -> None:
        if len(oldest) == 2:
            line, tid = oldest
            self.before[tid] = line
            return
        _, old_accepted, tids = oldest
        if old_accepted:
            group = self._groups
            self._groups += 1
            for record in old_accepted:
                self.before[record["tid"]] = (group, record)
        for tid in tids:
            self.before.pop(tid, None)

    def replayable(self) -> Iterator[Record]:
        """The tasks queued before the window, then the window's calls, as trace events."""
        for tasks in _queued_groups(self.before.values()):
            yield {"op": "submit", "tasks": tasks, "meta": {"queued_before_window": True}}
        for call in self.calls():
            if len(call) == 2:
                yield {"op": "submit", "tasks": [_record(call[0])]}
            else:
                yield call[0]


def _queued_groups(queued: Iterable[bytes | tuple[int, Record]]) -> Iterator[list[Record]]:
    """The tasks queued before the window, in their groups: a kept line is one of its own,
    records of one group number one group."""
    tasks: list[Record] = []
    group = -1
    for kept in queued:
        if isinstance(kept, bytes):
            if tasks:
                yield tasks
            tasks, group = [], -1
            yield [_record(kept)]
        elif kept[0] == group:
            tasks.append(kept[1])
        else:
            if tasks:
                yield tasks
            tasks, group = [kept[1]], kept[0]
    if tasks:
        yield tasks


def _record(kept: bytes) -> Record:
    """A kept line's task record, the record the recorder would have built (the same keys
    in the same order: the line's, without op, then produce_output)."""
    record: Record = orjson.loads(kept)
    del record["op"]
    record["produce_output"] = True  # a kept line's task produces output
    return record
