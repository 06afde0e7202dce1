"""What ``explain`` finds, at either level, from a trace opened for it: a step's view (its
batch, the queue it was taken from, why each was left) and lives (a task or a request from
its start to its end). One entry point each (``step_view``, ``lives``); what differs by
level is how a level's engine is watched.

The trace is replayed with the policy's reasons switched on (docs/policies.md lists each
policy's codes); replays are deterministic, so the reasons are the ones of any replay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..formats.requests.schema import Abort, Arrive
from ..model.errors import InputError, UsageError
from ..model.records import Left, Record, discard
from ..model.task import DECODE, PREFILL, Id, Task, id_key, same_id
from .origins import Origins, Reached
from .replay import Replayer
from .requests.replay import OpenRequestTrace, RequestReplayer
from .run import OpenReplay, OpenTrace, open_replay


@dataclass
class Queued:
    task: Task
    line: int  # the trace line that submitted it
    step: int  # the step it was submitted at


@dataclass
class StepView:
    step: int
    line: int | None  # the get_work event's line; None for an implicit step
    batch: list[Task]
    queue: list[Queued]  # as get_work saw it, in submission order
    left: Left
    policy: str

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "line": self.line,
            "policy": self.policy,
            "batch": [_entry(t) for t in self.batch],
            "left": None
            if self.left is None
            else [{**_entry(t), "reason": code, "detail": detail} for t, code, detail in self.left],
            "queue": [
                {**_entry(q.task), "line": q.line, "step": q.step, "age": self.step - q.step}
                for q in self.queue
            ],
        }


@dataclass
class Life:
    """One task from submit to dispatch, cancel, or the end of the trace."""

    task: Task
    line: int
    step: int
    passed_over: list[tuple[int, str, str]] = field(default_factory=list)
    outcome: str = "still queued"
    outcome_step: int | None = None
    reason: str | None = None  # why the policy refused it at submit (rejected)

    def to_json(self) -> dict[str, Any]:
        return {
            **_entry(self.task),
            "submitted": {"line": self.line, "step": self.step},
            "passed_over": [
                {"step": step, "reason": code, "detail": detail}
                for step, code, detail in self.passed_over
            ],
            "outcome": {"what": self.outcome, "step": self.outcome_step}
            if self.reason is None
            else {"what": "rejected", "step": self.outcome_step, "reason": self.reason},
        }


def _entry(t: Task) -> dict[str, Any]:
    return {"tid": t.tid, "sid": t.sid, "kind": t.kind.value, "size": t.size}


def explain_step(
    path: str, step: int, policy: str | None = None, params: Mapping[str, object] | None = None
) -> StepView:
    """``step`` of the trace (either level) replayed: its batch, queue and reasons."""
    with open_replay(
        path, policy=policy, params=params or {}, note=lambda _: None, allow_incomplete=True
    ) as opened:
        return step_view(opened, step)


def step_view(opened: OpenReplay, step: int) -> StepView:
    """The view of ``step``; bad input if the replay ends before it."""
    if isinstance(opened, OpenRequestTrace):
        return _request_step(opened, step)
    assert isinstance(opened, OpenTrace)
    return _task_step(opened, step)


def lives(opened: OpenReplay, *, tid: Id | None, sid: Id | None) -> list[Life]:
    """Every life of the task ``tid`` (a tid may be reused) or of the session ``sid`` (at
    the request level: of the request ``sid``, which has one)."""
    if isinstance(opened, OpenRequestTrace):
        if sid is None:
            raise UsageError("a request-level trace holds requests: explain --session RID")
        return _request_lives(opened, sid)
    assert isinstance(opened, OpenTrace)
    if tid is not None:
        key = id_key(tid)
        return _task_lives(opened, lambda t: id_key(t.tid) == key)
    return _task_lives(opened, lambda t: same_id(t.sid, sid))


# --- the task level: the engine's observer ------------------------------------------


def _task_step(opened: OpenTrace, step: int) -> StepView:
    opened.policy.explaining = True  # one step's reasons: asked for there, not every step
    origins = Origins(step)
    engine = origins.engine = opened.replayer(discard, observer=origins)
    try:
        opened.run(engine)
    except Reached:
        assert origins.batch is not None
        queue = [Queued(*q) for q in origins.queued.values()]
        left = opened.policy.left_behind()  # the policy still stands at the step
        line = origins.line or None
        return StepView(step, line, origins.batch, queue, left, opened.policy_name)
    steps, last = origins.steps, origins.last
    if not steps:
        said = "no steps"
    elif steps == last + 1:
        said = f"{steps} steps (0 to {last})"
    else:  # explicit get_work events that number their steps may skip some
        said = f"{steps} steps, numbered 0 to {last} with {last + 1 - steps} skipped"
    raise InputError(opened.name, None, f"there is no step {step}: the replay has {said}")


def _task_lives(opened: OpenTrace, wanted: Callable[[Task], bool]) -> list[Life]:
    holder: list[Replayer] = []
    watcher = _Watcher(lambda: holder[0].current_line, wanted)
    engine = opened.replayer(discard, observer=watcher, on_left=watcher.left)
    holder.append(engine)
    opened.run(engine)
    return list(watcher.lives.values())


class _Watcher:
    """The replay's observer for lives: who was submitted where, what each step did to
    the tasks followed, and the reasons each was passed over at every step."""

    def __init__(self, engine_line: Any, wanted: Any) -> None:
        self.engine_line = engine_line
        self.wanted = wanted  # Task -> bool: the lives to follow
        self.lives: dict[int, Life] = {}  # by object id
        self.policy = ""

    def accepted(self, tasks: list[Task], step: int) -> None:
        line = self.engine_line()
        for t in tasks:
            if self.wanted(t):
                self.lives[id(t)] = Life(t, line, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        for t in batch:
            life = self.lives.get(id(t))
            if life is not None:
                life.outcome, life.outcome_step = "dispatched", step

    def dropped(self, tasks: list[Task], step: int) -> None:
        for t in tasks:
            life = self.lives.get(id(t))
            if life is not None:
                life.outcome, life.outcome_step = "cancelled", step

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        line = self.engine_line()
        for t in tasks:
            if self.wanted(t):
                life = Life(t, line, step, outcome=f"rejected ({reason})", outcome_step=step)
                life.reason = reason
                self.lives[id(t)] = life

    def left(self, step: int, left: Left) -> None:
        for t, code, detail in left or ():
            life = self.lives.get(id(t))
            if life is not None:
                life.passed_over.append((step, code, detail))


# --- the request level: the engine's records and reasons ----------------------------


class _Reached(Exception):
    pass


class _Follow:
    """What the replay did, step by step, to the requests followed."""

    def __init__(self, step: int | None, rid: Id | None, policy: Any = None) -> None:
        self.step = step
        self.policy = policy
        self.draining = False  # in the drain after the last event: each step's held kept
        self.key = id_key(rid) if rid is not None else None
        # rid -> (line, step) of its accepted arrival; a rejected one is never recorded
        self.arrived: dict[tuple[type, Id], tuple[int, int]] = {}
        self.arriving: tuple[Arrive, int] | None = None  # the arrival being fed, its step
        self.record: Record | None = None
        self.left: Left = None
        self.held: list[Id] = []
        self.life: Life | None = None

    def accepted(self, event: Arrive, line: int, step: int) -> None:
        """An arrival the policy took (the engine's ``on_arrived``)."""
        key = id_key(event.rid)
        self.arrived[key] = (line, step)
        if key == self.key:
            task = Task(event.rid, event.rid, PREFILL, event.prompt_tokens or 0)
            self.life = Life(task, line, step)

    def rejected(self, record: Record) -> None:
        """The followed request's arrival refused: a life of its own, unless a request
        under its id is still held (that one keeps its arrival and its life)."""
        assert self.arriving is not None
        event, step = self.arriving
        if any(id_key(r) == self.key for r in self.policy.held()):
            return
        task = Task(event.rid, event.rid, PREFILL, event.prompt_tokens or 0)
        reason = record["reason"]
        life = Life(task, record["line"], step, outcome=f"rejected ({reason})", outcome_step=step)
        life.reason = reason
        self.life = life

    def emit(self, record: Record) -> None:
        if record.get("op") == "arrive":  # a rejected arrival: accepted ones have no record
            if id_key(record["rid"]) == self.key:
                self.rejected(record)
            return
        if "batch" in record:
            self.record = record
            if self.draining and record["step"] + 1 == self.step:
                self.held = self.policy.held()  # as the next step begins
            life = self.life
            if life is not None:
                mine = [e for e in record["batch"] if id_key(e["sid"]) == self.key]
                if mine:
                    life.outcome, life.outcome_step = (
                        f"ran {mine[0]['size']} tokens",
                        record["step"],
                    )
                if any(id_key(r) == self.key for r in record["finished"]):
                    life.outcome, life.outcome_step = "finished", record["step"]

    def on_left(self, step: int, left: Left) -> None:
        self.left = left
        if self.life is not None:
            for t, code, detail in left or ():
                if id_key(t.sid) == self.key:
                    self.life.passed_over.append((step, code, detail))
        if self.draining and step == self.step:
            raise _Reached


def _follow(opened: OpenRequestTrace, follow: _Follow) -> None:
    engine = RequestReplayer(
        opened.policy,
        follow.emit,
        policy_name=opened.policy_name,
        on_left=follow.on_left,
        on_arrived=follow.accepted,
    )
    try:
        for line, event in opened.events:
            engine.current_line = line
            if type(event) is Arrive:
                follow.arriving = (event, engine.totals.steps)
            elif type(event) is not Abort and engine.totals.steps == follow.step:
                follow.held = opened.policy.held()
                engine.feed(line, event)
                raise _Reached
            elif type(event) is Abort and follow.life and id_key(event.rid) == follow.key:
                follow.life.outcome = "aborted"
                follow.life.outcome_step = engine.totals.steps
            engine.feed(line, event)
    except _Reached:
        return
    if follow.step is not None and engine.step_events == 0:
        # Every step is in the drain after the last event: held as each begins.
        follow.held = opened.policy.held()
        follow.draining = True
        with contextlib.suppress(_Reached):
            engine.close()


def _request_step(opened: OpenRequestTrace, step: int) -> StepView:
    """The requests held when ``step`` began, what it ran of them, why it left the rest."""
    follow = _Follow(step, None, opened.policy)
    _follow(opened, follow)
    record = follow.record
    if record is None or record["step"] != step:
        raise InputError(
            opened.name, None, f"there is no step {step} among the trace's step events"
        )
    ran = {id_key(e["sid"]): e for e in record["batch"]}
    queue: list[Queued] = []
    batch: list[Task] = []
    by_rid: dict[tuple[type, Id], Task] = {}
    for rid in follow.held:
        entry = ran.get(id_key(rid))
        kind = DECODE if entry is not None and entry["kind"] == "decode" else PREFILL
        task = Task(rid, rid, kind, entry["size"] if entry is not None else 0)
        line, at = follow.arrived.get(id_key(rid), (0, 0))
        queue.append(Queued(task, line, at))
        by_rid[id_key(rid)] = task
        if entry is not None:
            batch.append(task)
    left = [
        (by_rid[id_key(t.sid)], code, detail)
        for t, code, detail in follow.left or ()
        if id_key(t.sid) in by_rid
    ]
    return StepView(step, None, batch, queue, left, opened.policy_name)


def _request_lives(opened: OpenRequestTrace, rid: Id) -> list[Life]:
    """A request from its arrival to its end: each step it was passed over, and why."""
    follow = _Follow(None, rid, opened.policy)
    _follow(opened, follow)
    return [follow.life] if follow.life is not None else []
