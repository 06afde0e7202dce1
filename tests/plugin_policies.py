"""Policies defined outside schedcli, loaded by import string or entry point in the tests."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Mapping

from schedcli import DecodeFirstScheduler, QueueScheduler, Scheduler, Task
from schedcli.model.errors import SnapshotUnsupported
from schedcli.model.scheduler import Param
from schedcli.model.task import Id, settle_outputs
from schedcli.policies.fair import FairScheduler


class OnePerBatch(Scheduler):
    """Implements the interface directly (no shared base): one task per batch, in order."""

    name = "one-per-batch"
    PARAMS = (Param("max_batch_tokens", int, 64, "largest task accepted", minimum=1),)

    def __init__(self, max_batch_tokens: int = 64) -> None:
        self.max_batch_tokens = max_batch_tokens
        self._lock = threading.Lock()
        self._queue: list[Task] = []

    @property
    def token_budget(self) -> int:
        return self.max_batch_tokens

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = list(tasks)
        with self._lock:
            tids = {t.tid for t in self._queue}
            seen: set[Id] = set()
            for t in group:
                if t.size <= 0 or (t.is_decode and t.size != 1) or t.size > self.max_batch_tokens:
                    return f"task {t.tid} has an unacceptable size {t.size}"
                if t.tid in tids or t.tid in seen:
                    return f"tid {t.tid} is taken"
                seen.add(t.tid)
            for t in group:
                if t.produce_output is None:
                    t.produce_output = True
                self._queue.append(t)
            return None

    def has_work(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def get_work(self) -> list[Task]:
        with self._lock:
            return [self._queue.pop(0)] if self._queue else []

    def cancel(self, sid: Id) -> list[Task]:
        with self._lock:
            dropped = [t for t in self._queue if t.sid == sid]
            self._queue = [t for t in self._queue if t.sid != sid]
            for t in dropped:
                t.cancelled = True
            return dropped

    def clear(self) -> list[Task]:
        with self._lock:
            dropped, self._queue = self._queue, []
            for t in dropped:
                t.cancelled = True
            return dropped


class NotAPolicy:
    """Has the right name and nothing else."""


class DoublesDispatch(OnePerBatch):
    """A broken policy: hands the same task out twice."""

    name = "doubles-dispatch"

    def get_work(self) -> list[Task]:
        with self._lock:
            return [self._queue[0]] if self._queue else []


class RaisesInGetWork(OnePerBatch):
    """A broken policy: raises when asked for work."""

    name = "raises"

    def get_work(self) -> list[Task]:
        raise RuntimeError("boom")


class LosesTasks(OnePerBatch):
    """A broken policy: accepts a task, then forgets it."""

    name = "loses-tasks"

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        reason = super().try_submit(tasks)
        with self._lock:
            if reason is None and len(self._queue) > 1:
                self._queue.pop()
        return reason


class FirstFree(OnePerBatch):
    """The C++ recorder test's policy (tests/cpp/recording_test.cpp), in Python: queue
    order; a batch takes, front to back, each task whose session is not yet in it, up to 8.
    Admission and cancel are OnePerBatch's (the C++ policy admits the same)."""

    name = "first-free"
    PARAMS = ()

    def __init__(self) -> None:
        super().__init__(max_batch_tokens=64)  # the largest task the C++ test submits

    @property
    def token_budget(self) -> None:  # type: ignore[override]
        return None  # up to 8 tasks a batch, whatever their tokens

    def get_work(self) -> list[Task]:
        with self._lock:
            batch: list[Task] = []
            sessions: set[Id] = set()
            rest: list[Task] = []
            for t in self._queue:
                if len(batch) < 8 and t.sid not in sessions:
                    sessions.add(t.sid)
                    batch.append(t)
                else:
                    rest.append(t)
            self._queue = rest
            return batch


class NewestFirst(OnePerBatch):
    """A broken policy: one task per batch, the newest first (a prompt's last chunk leaves
    before its first)."""

    name = "newest-first"

    def get_work(self) -> list[Task]:
        with self._lock:
            return [self._queue.pop()] if self._queue else []


class WholeQueue(OnePerBatch):
    """A broken policy when a session's outputs pile up: every queued task in one batch."""

    name = "whole-queue"

    def get_work(self) -> list[Task]:
        with self._lock:
            batch, self._queue = self._queue, []
            return batch


class Greedy(OnePerBatch):
    """A plugin whose name is registered nowhere (used by import string only)."""

    name = "greedy"


class Nameless(OnePerBatch):
    """A plugin without a name or declared parameters."""

    name = ""
    PARAMS = ()

    def __init__(self) -> None:
        super().__init__(max_batch_tokens=64)


class Forgets(QueueScheduler):
    """A broken policy: its queue drops the third task it admits, which QueueScheduler's
    record still holds, so has_work() says there is work that never comes."""

    name = "forgets"
    PARAMS = (Param("max_batch_tokens", int, 64, "tokens one batch may hold", minimum=1),)

    def __init__(self, max_batch_tokens: int = 64) -> None:
        super().__init__(max_batch_tokens=max_batch_tokens)
        self._queue: list[Task] = []
        self._admitted = 0

    def enqueue(self, task: Task) -> None:
        self._admitted += 1
        if self._admitted != 3:
            self._queue.append(task)

    def take_batch(self) -> list[Task]:
        batch, self._queue = self._queue, []
        return batch

    def remove_session(self, sid: Id) -> list[Task]:
        mine = [t for t in self._queue if t.sid == sid]
        self._queue = [t for t in self._queue if t.sid != sid]
        return mine

    def reset(self) -> None:
        self._queue.clear()


class WaitsForCompany(OnePerBatch):
    """Dispatches only while two tasks or more are queued (all of them, in order): one task
    alone waits for company, which only a submit brings. It says why a task waited."""

    name = "waits-for-company"

    def __init__(self, max_batch_tokens: int = 64) -> None:
        super().__init__(max_batch_tokens)
        self._why: list[tuple[Task, str, str]] | None = None
        self.explaining = False

    def get_work(self) -> list[Task]:
        with self._lock:
            if len(self._queue) < 2:
                if self.explaining:
                    self._why = [(t, "company", "waits for a second task") for t in self._queue]
                return []
            batch, self._queue = self._queue, []
            return batch

    def left_behind(self) -> list[tuple[Task, str, str]] | None:
        return self._why

    def fingerprint(self) -> object | None:
        """What it decides from: how many tasks are queued (the reasons decide nothing)."""
        return (self.max_batch_tokens, tuple(t.tid for t in self._queue))


class Toggles(OnePerBatch):
    """Never dispatches; flips a flag at every call: its state cycles, two steps long."""

    name = "toggles"

    def __init__(self, max_batch_tokens: int = 64) -> None:
        super().__init__(max_batch_tokens)
        self._flag = False

    def get_work(self) -> list[Task]:
        self._flag = not self._flag
        return []

    def fingerprint(self) -> object | None:
        return (tuple(t.tid for t in self._queue), self._flag)


class Counts(OnePerBatch):
    """Never dispatches; counts its calls: its state changes forever."""

    name = "counts"

    def __init__(self, max_batch_tokens: int = 64) -> None:
        super().__init__(max_batch_tokens)
        self._calls = 0

    def get_work(self) -> list[Task]:
        self._calls += 1
        return []

    def fingerprint(self) -> object | None:
        return (tuple(t.tid for t in self._queue), self._calls)


class OpaqueWaits(WaitsForCompany):
    """WaitsForCompany, saying its state cannot be compared."""

    name = "opaque-waits"

    def fingerprint(self) -> object | None:
        return None


class StaysHome(OnePerBatch):
    """A policy that says it cannot be copied by forking (its state, in real life, would
    be a connection): the debugger replays from the start for each answer."""

    name = "stays-home"
    forkable = False


class DoublesTheOdd(OnePerBatch):
    """A broken policy: hands a task of session "odd" out twice in one batch."""

    name = "doubles-the-odd"

    def get_work(self) -> list[Task]:
        with self._lock:
            for t in self._queue:
                if t.sid == "odd":
                    self._queue.remove(t)
                    return [t, t]
            return [self._queue.pop(0)] if self._queue else []


class RewordedDecodeFirst(DecodeFirstScheduler):
    """decode-first in other words: it refuses exactly the groups decode-first refuses,
    and says only "refused" (as a C++ scheduler, whose interface gives no reason)."""

    name = "reworded-decode-first"

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        return None if super().try_submit(tasks) is None else "refused"


class HangsWhenFew(OnePerBatch):
    """A broken policy: one task per batch, in order, but asked for work while fewer than
    ``few`` tasks are queued it never returns, and swallows whatever would interrupt it."""

    name = "hangs-when-few"
    PARAMS = (*OnePerBatch.PARAMS, Param("few", int, 8, "the queue it hangs below", minimum=0))

    def __init__(self, max_batch_tokens: int = 64, few: int = 8) -> None:
        super().__init__(max_batch_tokens)
        self.few = few

    def get_work(self) -> list[Task]:
        while len(self._queue) < self.few:
            with contextlib.suppress(BaseException):
                time.sleep(0.05)
        return super().get_work()


class EndsWhenFew(HangsWhenFew):
    """A broken policy: HangsWhenFew, but it ends the process where that one hangs."""

    name = "ends-when-few"

    def get_work(self) -> list[Task]:
        if len(self._queue) < self.few:
            os._exit(0)
        return super().get_work()


class BreakingTwin(Scheduler):
    """The Python twin of tests/cpp/schedulers/crashing_scheduler.h's ways of handing back
    what it should not (``how`` 5 and 15-23): the same batches, broken at the same call."""

    name = "breaking-twin"
    PARAMS = (
        Param("crash_at", int, 1, "the get_work call that breaks", minimum=1),
        Param("how", int, 5, "how it breaks", minimum=0),
    )

    def __init__(self, crash_at: int = 1, how: int = 5) -> None:
        self.crash_at, self.how = crash_at, how
        self.calls = 0
        self.queue: list[Task] = []
        self.last: Task | None = None

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = list(tasks)
        settle_outputs(group)
        self.queue += group
        return None

    def has_work(self) -> bool:
        return bool(self.queue)

    def get_work(self) -> list[Task]:
        self.calls += 1
        if self.calls == self.crash_at:
            if self.how == 15 and self.last is not None:
                return [self.last]
            if self.queue and self.how in (5, 16, *range(17, 24)):
                front = self.queue[0] if self.how == 5 else self.queue.pop(0)
                if self.how == 16:
                    return [front, front]
                # another object: what a C++ copy is to Python
                changed = Task(
                    999999 if self.how == 5 else front.tid,
                    front.sid,
                    front.kind,
                    front.size,
                    position=front.position,
                    produce_output=front.produce_output,
                    tokens=front.tokens,
                )
                return [changed]
        if not self.queue:
            return []
        self.last = self.queue.pop(0)
        return [self.last]

    def cancel(self, sid: Id) -> list[Task]:
        dropped = [t for t in self.queue if t.sid == sid]
        self.queue = [t for t in self.queue if t.sid != sid]
        for t in dropped:
            t.cancelled = True
        return dropped

    def clear(self) -> list[Task]:
        dropped, self.queue = self.queue, []
        for t in dropped:
            t.cancelled = True
        return dropped


class FairWithoutSnapshots(FairScheduler):
    """fair as a plugin that does not hand over its state (shrink windows it as before
    snapshots)."""

    name = "fair-without-snapshots"

    def snapshot(self) -> dict[str, object]:
        raise SnapshotUnsupported(self.name, "a plugin that keeps its state to itself")

    def restore(self, state: Mapping[str, object]) -> None:
        raise SnapshotUnsupported(self.name, "a plugin that keeps its state to itself")


class Snapshots(Forgets):
    """A plugin with snapshots: one queue in submit order, all of it each batch (it
    forgets no task; the broken variants below break its snapshot or restore)."""

    name = "snapshots"
    STATE_FIELDS: tuple[str, ...] = ("order",)

    def enqueue(self, task: Task) -> None:
        self._queue.append(task)

    def snapshot_queues(self) -> dict[str, object]:
        return {"order": [t.tid for t in self._queue]}

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        by_tid = {t.tid: t for t in queued}
        order = fields["order"]
        assert isinstance(order, list)
        self._queue = [by_tid[tid] for tid in order]  # a KeyError for a tid not queued


class SnapshotRaises(Snapshots):
    name = "snapshot-raises"

    def snapshot_queues(self) -> dict[str, object]:
        raise ValueError("no state today")


class SnapshotNotJson(Snapshots):
    name = "snapshot-not-json"

    def snapshot_queues(self) -> dict[str, object]:
        return {"order": [object()]}
