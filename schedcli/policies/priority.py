"""priority: fcfs ordered by the task's priority first (lower runs first)."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ..model.task import Task
from .fcfs import FcfsScheduler


@mypyc_attr(allow_interpreted_subclasses=True)
class PriorityScheduler(FcfsScheduler):
    RULE = """Like fcfs, but the queue is ordered by (task priority, submission order): lower
    priority values run first, and equal priorities keep arrival order. A session's task
    never overtakes an earlier one of the same session (it inherits the earlier one's
    priority if that is later). Head-of-line blocking and the session rule are fcfs's.
    """

    name = "priority"

    def _key(self, task: Task) -> int:
        return task.priority

    def fingerprint(self) -> object | None:
        """fcfs's, its keys the priorities (declared here: a class's own, engine/stall.py)."""
        return self._state()
