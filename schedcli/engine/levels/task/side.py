"""The task level's side of a debugging session (``travel/sides.py``): a replay fed one
input at a time, the queue it saw at the step a worker asks about and the policy's
reasons there."""

from __future__ import annotations

from typing import Any, Final

from ....formats.trace import Event
from ....model.scheduler import Scheduler
from ....model.steps import Emitted, Step
from ....model.task import Id, Task, same_id
from ...lockstep import few_collections
from ...travel.state import policy_state
from .. import Entry, Follow, Sink
from .base import TaskReplay
from .replay import Replayer

_NEVER: Final = 1 << 62


class _Queue:
    """The engine's observer: each queued task with its submit line and step, oldest
    first; at step ``want``, the queue as get_work saw it; from ``explain_at`` on, the
    policy explaining."""

    def __init__(self, policy: Scheduler) -> None:
        self.queued: dict[int, tuple[Task, int, int]] = {}  # by object id
        self.want = -1
        self.seen: list[tuple[Task, int, int]] = []
        self.engine: Replayer | None = None
        self.follow: Follow | None = None
        self.policy = policy
        self.explain_at = _NEVER

    def upcoming(self, step: int) -> None:
        """The engine's next get_work is numbered ``step`` (or more): reasons on, if
        wanted from there. Every get_work follows a call to this with its number: the
        batch before it (``step + 1``) or, past a gap in the numbers (a stepped trace
        moving on), the calls of the events of its step."""
        if step >= self.explain_at:
            self.policy.explaining = True
            self.explain_at = _NEVER

    def accepted(self, tasks: list[Task], step: int) -> None:
        assert self.engine is not None
        if step >= self.explain_at:
            self.upcoming(step)
        line = self.engine.current_line
        for t in tasks:
            self.queued[id(t)] = (t, line, step)
        if self.follow is not None:
            self.follow([(t.tid, t.sid) for t in tasks], line, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        if step == self.want:
            self.seen = list(self.queued.values())
        for t in batch:
            self.queued.pop(id(t), None)
        if step + 1 >= self.explain_at:
            self.upcoming(step + 1)

    def dropped(self, tasks: list[Task], step: int) -> None:
        for t in tasks:
            self.queued.pop(id(t), None)
        if step >= self.explain_at:
            self.upcoming(step)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        if step >= self.explain_at:
            self.upcoming(step)


class TaskSide:
    def __init__(self, opened: TaskReplay, index: int, sink: Sink, check: bool) -> None:
        self.opened = opened
        self.index, self.sink, self.check = index, sink, check
        self.name = opened.policy_name
        self.policy = opened.policy
        self.queue = _Queue(opened.policy)
        self.engine = opened.replayer(self._emit, observer=self.queue)
        self.queue.engine = self.engine
        self.expect: list[Id] | None = None  # the expect of the get_work being applied
        self.last_step = -1
        self.view: list[Entry] | None = None

    def want(self, step: int) -> None:
        self.queue.want = step

    def expect_batch(self) -> list[tuple[Id, int | None]] | None:
        """The expect being applied: its tids (a recorded batch names no sizes)."""
        return None if self.expect is None else [(tid, None) for tid in self.expect]

    def explain_from(self, step: int) -> None:
        """Reasons from the first step numbered ``step`` or more that this side runs,
        turned on before its get_work: keyed on the steps the replay runs, since the
        number before it (``step - 1``) may never run (a stepped trace skips the numbers
        of steps without work)."""
        self.queue.explain_at = step
        self.queue.upcoming(self.engine.upcoming_step)

    def feed(self, line: int, item: Any) -> None:
        if self.check and isinstance(item, Event) and item.op == "get_work":
            self.expect = item.expect
            try:
                self.engine.apply(item, line)
            finally:
                self.expect = None
        else:
            self.engine.apply(item, line)

    def feed_all(self) -> None:
        """``feed`` of every input, in the tight loop of a replay (the index's pace)."""
        opened = self.opened
        if self.check:
            for line, item in opened.inputs():
                self.feed(line, item)
            return
        apply = self.engine.apply
        with few_collections():
            for line, items in opened.reader.runs():
                for item in items:
                    apply(item, line)
                    line += 1

    def close(self) -> None:
        self.engine.close()

    def _emit(self, record: Emitted) -> None:
        if isinstance(record, Step):
            step = self.last_step = record.step
            if step == self.queue.want:
                self.view = self._view()
            self.sink.stepped(self.index, record)
            expect = self.expect
            if expect is not None:
                got = [e["tid"] for e in record.batch]
                if len(got) != len(expect) or not all(map(same_id, got, expect)):
                    self.sink.diverged(self.index, step, expect)
        elif "end" not in record:
            self.sink.event(self.index, record, self.engine.upcoming_step)
        else:
            self.sink.ended(self.index, record)

    def _view(self) -> list[Entry]:
        still = self.queue.queued  # after the batch left it
        why = {id(t): (code, detail) for t, code, detail in self.policy.left_behind() or ()}
        return [
            {
                "tid": t.tid,
                "sid": t.sid,
                "kind": t.kind.value,
                "size": t.size,
                "line": line,
                "since": since,
                "ran": id(t) not in still,
                "reason": why.get(id(t), (None, None))[0],
                "detail": why.get(id(t), (None, None))[1],
            }
            for t, line, since in self.queue.seen
        ]

    def oldest(self) -> int | None:
        for _, _, since in self.queue.queued.values():
            return since
        return None

    def reasons(self) -> list[tuple[Id, Id, str, str]]:
        return [(t.tid, t.sid, code, detail) for t, code, detail in self.policy.left_behind() or ()]

    def queued_now(self) -> list[tuple[Id, Id, int, int]]:
        return [(t.tid, t.sid, line, since) for t, line, since in self.queue.queued.values()]

    def state(self) -> list[tuple[str, str]]:
        return policy_state(self.policy)

    @property
    def follow(self) -> Follow | None:
        return self.queue.follow

    @follow.setter
    def follow(self, hook: Follow | None) -> None:
        self.queue.follow = hook
