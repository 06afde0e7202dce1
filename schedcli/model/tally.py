"""How many tasks of a collection each session has, paid for only when it is asked often."""

from __future__ import annotations

from collections.abc import Collection

from .task import Id, Task


class SessionTally:
    """Answers "how many of these tasks are the session's?" for a collection of tasks.

    The answer is a walk of the collection until the walks, together, have covered more
    tasks than were ever added; only then is a count per session kept, at two dict
    operations a task. A workload that rarely asks (a cancel now and then) never pays
    per task, and one that asks often pays O(1) a task plus at most one extra walk.
    The owner reports every task in (``add``) and out (``remove``) of the collection.
    """

    __slots__ = ("_added", "_walked", "counts")

    def __init__(self) -> None:
        self.counts: dict[Id, int] | None = None
        self._added = 0
        self._walked = 0

    def add(self, sid: Id) -> None:
        counts = self.counts
        if counts is None:
            self._added += 1
        else:
            counts[sid] = counts.get(sid, 0) + 1

    def remove(self, sid: Id) -> None:
        counts = self.counts
        if counts is not None:
            left = counts[sid] - 1
            if left:
                counts[sid] = left
            else:
                del counts[sid]

    def of(self, sid: Id, tasks: Collection[Task]) -> int:
        """The session's tasks among ``tasks``, the collection this tally follows."""
        counts = self.counts
        if counts is None:
            self._walked += len(tasks)
            if self._walked <= self._added:
                n = 0
                for t in tasks:
                    if t.sid == sid:
                        n += 1
                return n
            counts = self.counts = {}
            for t in tasks:
                counts[t.sid] = counts.get(t.sid, 0) + 1
        return counts.get(sid, 0)

    def clear(self) -> None:
        if self.counts is not None:
            self.counts.clear()
