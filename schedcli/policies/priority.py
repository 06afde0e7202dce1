"""priority: fcfs ordered by the task's priority first (lower runs first)."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ..model.task import Id, Task, id_key, show_id
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

    STATE_FIELDS = ("queue",)

    def snapshot_queues(self) -> dict[str, object]:
        """``queue``: the queued tasks in the order a batch meets them, each by tid with the
        priority it is queued at (its own, or its session's earlier task's if that is
        later): the order is (that priority, submit order)."""
        return {"queue": [{"tid": t.tid, "priority": key} for key, t in self._queue.keyed()]}

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        from ..model.snapshot import Placed, a_dict, a_list, an_id, an_int, refuse

        placed = Placed(queued)
        submitted = {id(t): i for i, t in enumerate(queued)}
        last_of: dict[tuple[type, Id], int] = {}  # a session's latest task so far, in submit order
        entries: list[tuple[int, Task]] = []
        before: int | None = None
        for i, v in enumerate(a_list(fields["queue"], "queue")):
            where = f"queue[{i}]"
            entry = a_dict(v, where, ("tid", "priority"))
            t = placed.take(an_id(entry["tid"], f"{where}.tid"), f"{where}.tid")
            key = an_int(entry["priority"], f"{where}.priority")
            if key < t.priority:  # queued at its own or an earlier task's, never lower
                why = (
                    f"{key} is below task {show_id(t.tid)}'s own priority {t.priority}: a task "
                    "is queued at its own priority or its session's earlier task's"
                )
                raise refuse(f"{where}.priority", why)
            if before is not None and key < before:
                why = f"{key} after {before}: the queue is in priority order"
                raise refuse(f"{where}.priority", why)
            mine = id_key(t.sid)
            if last_of.get(mine, -1) > submitted[id(t)]:
                why = f"task {show_id(t.tid)} comes after a later task of session {show_id(t.sid)}"
                raise refuse(where, why + ": a session's tasks keep their submit order")
            last_of[mine] = submitted[id(t)]
            before = key
            entries.append((key, t))
        placed.done("queue", "not in the queue")
        for key, t in entries:
            self._queue.push(t, key)
