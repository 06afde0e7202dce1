"""The sides of a debugging session, at either level: the replay being debugged (side 0)
and, with ``--against``, the same trace under a second policy (side 1). A side is fed the
trace one input at a time and hands each record to the session; at the step a worker asks
about (``want``) it keeps the queue its policy saw and the policy's reasons there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from ...formats.requests.schema import Arrive, Schedule, Step
from ...formats.trace import Event
from ...model.records import Record
from ...model.requests import StepPlan
from ...model.scheduler import Scheduler
from ...model.task import Id, Task, id_key, same_id
from ..replay import Replayer, few_collections
from ..requests.replay import OpenRequestTrace, RequestReplayer
from ..run import OpenReplay, OpenTrace
from .state import policy_state, shown

Entry = dict[str, Any]  # one queued task (or held request) as the debugger shows it
Follow = Callable[[list[tuple[Id, Id]], int, int], None]  # (tid, sid)s, line, step


class Sink(Protocol):
    def stepped(self, side: int, record: Record) -> None: ...

    def event(self, side: int, record: Record, step: int) -> None: ...

    def diverged(self, side: int, step: int, expected: Any) -> None: ...

    def ended(self, side: int, record: Record) -> None: ...  # the side's end record


class Side(Protocol):
    name: str  # the policy's label
    expect: Any  # while an input with a recorded expect is fed: that expect
    last_step: int  # the last step it emitted; -1 before any
    view: list[Entry] | None  # the queue at ``want``, once emitted

    def want(self, step: int) -> None: ...  # keep the queue and reasons of ``step``

    def explain_from(self, step: int) -> None: ...  # reasons at every step >= ``step``

    def feed(self, line: int, item: Any) -> None: ...

    def feed_all(self, opened: OpenReplay) -> None: ...  # every input, this side alone

    def close(self) -> None: ...

    def oldest(self) -> int | None: ...  # the step the oldest waiting task arrived at

    def reasons(self) -> list[tuple[Id, Id, str, str]]: ...  # (tid, sid, code, detail) now

    def queued_now(self) -> list[tuple[Id, Id, int, int]]: ...  # (tid, sid, line, since)

    def state(self) -> list[tuple[str, str]]: ...  # the policy's own structures, shown

    follow: Follow | None  # told of each accepted task (or arrival): who, line, step


def inputs(opened: OpenReplay) -> Iterator[tuple[int, Any]]:
    """Each input of the trace with its line, in order, at either level."""
    if isinstance(opened, OpenRequestTrace):
        yield from opened.events
        return
    assert isinstance(opened, OpenTrace)
    for line, items in opened.reader.runs():
        for item in items:
            yield line, item
            line += 1


def side_for(opened: OpenReplay, index: int, sink: Sink, check: bool) -> Side:
    if isinstance(opened, OpenRequestTrace):
        return RequestSide(opened, index, sink, check)
    assert isinstance(opened, OpenTrace)
    return TaskSide(opened, index, sink, check)


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
    def __init__(self, opened: OpenTrace, index: int, sink: Sink, check: bool) -> None:
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

    def feed_all(self, opened: OpenReplay) -> None:
        """``feed`` of every input, in the tight loop of a replay (the index's pace)."""
        assert isinstance(opened, OpenTrace)
        if self.check:
            for line, item in inputs(opened):
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

    def _emit(self, record: Record) -> None:
        if "batch" in record:
            step = self.last_step = record["step"]
            if step == self.queue.want:
                self.view = self._view(record)
            self.sink.stepped(self.index, record)
            expect = self.expect
            if expect is not None:
                got = [e["tid"] for e in record["batch"]]
                if len(got) != len(expect) or not all(map(same_id, got, expect)):
                    self.sink.diverged(self.index, step, expect)
        elif "end" not in record:
            self.sink.event(self.index, record, self.engine.upcoming_step)
        else:
            self.sink.ended(self.index, record)

    def _view(self, record: Record) -> list[Entry]:
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


class _Lenient(RequestReplayer):
    """Under ``--check``, a step that differs from its expect is marked, not fatal; and at
    the step the side wants, the requests held are kept as the step begins (a step event's
    or a drain's alike)."""

    side: RequestSide

    def _step(
        self, stop: frozenset[Id], sampled: dict[Id, int] | None = None, split: bool = False
    ) -> StepPlan:
        side = self.side
        if self.totals.steps == side._want:
            held = self.policy.held()
            side.seen = [(r, *side.arrived.get(id_key(r), (0, 0))) for r in held]
        return super()._step(stop, sampled, split)

    def _compare(self, line: int, got: dict[str, Any], want: dict[str, Any]) -> None:
        before = self.checked
        try:
            super()._compare(line, got, want)
        except Exception:
            self.checked = before + 1
            self.side.sink.diverged(self.side.index, self.totals.steps - 1, want)


class RequestSide:
    def __init__(self, opened: OpenRequestTrace, index: int, sink: Sink, check: bool) -> None:
        self.index, self.sink = index, sink
        self.name = opened.policy_name
        self.policy = opened.policy
        engine = _Lenient(
            opened.policy,
            self._emit,
            policy_name=opened.policy_name,
            check=check,
            trace_name=opened.name,
            on_arrived=self._arrived,
        )
        engine.side = self
        self.engine = engine
        self.arrived: dict[tuple[type, Id], tuple[int, int]] = {}  # held: (line, step)
        self.unstarted: dict[tuple[type, Id], int] = {}  # never scheduled yet: arrival step
        self.expect: Any = None  # the expect of the step being fed
        self._want = -1
        self.seen: list[tuple[Id, int, int]] = []
        self.last_step = -1
        self.view: list[Entry] | None = None
        self.follow: Follow | None = None

    def want(self, step: int) -> None:
        self._want = step

    def explain_from(self, step: int) -> None:
        """A request-level policy gives its reasons after every step."""

    def feed(self, line: int, event: Any) -> None:
        kind = type(event)
        if kind is Step or kind is Schedule:
            self.expect = _expected(event)
        self.engine.current_line = line
        try:
            self.engine.feed(line, event)
        finally:
            self.expect = None

    def feed_all(self, opened: OpenReplay) -> None:
        for line, event in inputs(opened):
            self.feed(line, event)

    def _arrived(self, event: Arrive, line: int, step: int) -> None:
        """An arrival the policy accepted: a rejected one (an id still held among them)
        is never recorded, so the held request keeps its own line and step."""
        key = id_key(event.rid)
        self.arrived[key] = (line, step)
        self.unstarted[key] = step
        if self.follow is not None:
            self.follow([(event.rid, event.rid)], line, step)

    def close(self) -> None:
        self.engine.close()

    def _emit(self, record: Record) -> None:
        if "batch" in record:
            step = self.last_step = record["step"]
            if step == self._want:
                self.view = self._view(record)
            for e in record["batch"]:
                self.unstarted.pop(id_key(e["sid"]), None)
            self._forget(record.get("finished", ()))
            self.sink.stepped(self.index, record)
            return
        op = record.get("op")
        if op == "update":
            self._forget(record["finished"])
        elif op == "abort":  # a rejected arrival's record leaves what is held alone
            self.arrived.pop(id_key(record["rid"]), None)
            self.unstarted.pop(id_key(record["rid"]), None)
        if "end" not in record:
            self.sink.event(self.index, record, self.engine.totals.steps)
        else:
            self.sink.ended(self.index, record)

    def _forget(self, finished: Any) -> None:
        for rid in finished:
            self.arrived.pop(id_key(rid), None)
            self.unstarted.pop(id_key(rid), None)

    def _view(self, record: Record) -> list[Entry]:
        ran = {id_key(e["sid"]): e for e in record["batch"]}
        why = {id_key(rid): (code, detail) for rid, code, detail in self.policy.reasons()}
        entries = []
        for rid, line, since in self.seen:
            entry = ran.get(id_key(rid))
            code, detail = why.get(id_key(rid), (None, None))
            entries.append(
                {
                    "tid": rid,
                    "sid": rid,
                    "kind": entry["kind"] if entry else "waiting",
                    "size": entry["size"] if entry else 0,
                    "line": line,
                    "since": since,
                    "ran": entry is not None,
                    "reason": code,
                    "detail": detail,
                }
            )
        return entries

    def oldest(self) -> int | None:
        for since in self.unstarted.values():
            return since
        return None

    def reasons(self) -> list[tuple[Id, Id, str, str]]:
        return [(rid, rid, code, detail) for rid, code, detail in self.policy.reasons()]

    def queued_now(self) -> list[tuple[Id, Id, int, int]]:
        return [(key[1], key[1], line, since) for key, (line, since) in self.arrived.items()]

    def state(self) -> list[tuple[str, str]]:
        """Request states: how many run and wait, and every request held."""
        running, waiting = self.policy.counts()
        held = self.policy.held()
        return [("running", str(running)), ("waiting", str(waiting)), ("held", shown(held, 1))]


def _expected(event: Any) -> dict[str, Any] | None:
    """A step event's recorded plan, as ``--check`` compares it."""
    expect = event.expect
    if expect is None:
        return None
    want: dict[str, Any] = {
        "batch": [[s.rid, s.tokens] for s in expect.batch],
        "preempted": list(expect.preempted),
    }
    if type(event) is Step:
        want["finished"] = list(expect.finished)
    return want


__all__ = ["Entry", "RequestSide", "Side", "Sink", "TaskSide", "inputs", "side_for"]
