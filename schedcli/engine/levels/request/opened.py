"""A request-level trace opened for replay (``OpenRequestTrace``): its reader, its policy,
its engine (its stepper ``replay.RequestReplayer``), and what explain asks of
its replay: a step's view and a request's life, from the engine's records and reasons."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ....catalog.choice import RecordedPolicy, policy_for_trace
from ....formats.requests import RequestReader
from ....formats.requests.schema import Abort, Arrive
from ....formats.trace import TraceReader, incomplete_trace
from ....model.errors import InputError, Option, UsageError
from ....model.records import Left, Record
from ....model.requests import RequestScheduler
from ....model.steps import Emitted, Step
from ....model.task import DECODE, PREFILL, Id, Task, id_key
from ...origins import Queues
from ...replay import Observer
from .. import Level, Side, Sink, stderr_note
from .replay import RequestReplayer

if TYPE_CHECKING:
    from ...metrics import StepMetrics
    from ..facts import Life, StepView


class OpenRequestTrace:
    """A request-level trace ready to replay: its reader, its policy built (``OpenReplay``)."""

    level: Level

    def __init__(
        self,
        reader: TraceReader,
        policy: RequestScheduler,
        policy_name: str,
        name: str,
        allow_incomplete: bool,
        level: Level,
    ) -> None:
        self.reader, self.policy, self.policy_name = reader, policy, policy_name
        self.name, self.allow_incomplete, self.level = name, allow_incomplete, level
        self.params: dict[str, object] = policy.params()
        self.events = RequestReader(reader)

    @property
    def token_budget(self) -> int | None:
        return self.policy.token_budget

    def explain(self) -> None:
        """A request-level policy gives its reasons at every step: nothing to turn on."""

    def replayer(
        self,
        emit: Callable[[Emitted], None],
        *,
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        on_left: Callable[[int, Left], None] | None = None,
        dump: Any = None,
        measure_preemption: bool = False,
        on_accepted: Callable[[list[Task], int], None] | None = None,
    ) -> RequestReplayer:
        """``dump`` (the task level's fast path for batch lines) is not taken: every
        record goes to ``emit``, the dump's writer among them. ``measure_preemption``:
        ``level_summary`` gives what preemption cost."""
        return RequestReplayer(
            self.policy,
            emit,
            policy_name=self.policy_name,
            check=check,
            drain=drain,
            on_left=on_left,
            trace_name=self.name,
            on_step=on_step,
            observer=observer,
            measure_preemption=measure_preemption,
            on_arrived=None if on_accepted is None else _told(on_accepted),
            inputs=lambda: self.events,
            before_close=self.check_complete,
        )

    @property
    def full_params(self) -> dict[str, object]:
        return self.params

    def step_metrics(self) -> StepMetrics:
        """Dispatches only: a request's waits are not a task's."""
        from ...metrics import StepMetrics

        return StepMetrics(self.policy.token_budget, waits_known=False)

    def sibling(self, policy: str | None, params: Mapping[str, object]) -> OpenRequestTrace:
        recorded = RecordedPolicy.of(self.reader.header)
        built, label, _ = policy_for_trace(
            recorded, self.name, policy, params, stderr_note, "request"
        )
        assert isinstance(built, RequestScheduler)
        built.promise_serial_calls()
        return OpenRequestTrace(
            self.reader, built, label, self.name, self.allow_incomplete, self.level
        )

    def close(self) -> None:
        self.policy.close()

    def check_complete(self) -> None:
        refuse_partial(self.events, self.allow_incomplete)

    def step_view(self, step: int) -> StepView:
        return request_step(self, step)

    def lives(self, *, tid: Id | None, sid: Id | None) -> list[Life]:
        if sid is None:
            raise UsageError(
                "a request-level trace holds requests: explain ", Option("session", "RID")
            )
        return request_lives(self, sid)

    def inputs(self) -> Iterator[tuple[int, Any]]:
        """Each event with its line, in order."""
        yield from self.events

    def twin(self, item: Any) -> Any:
        """An event is read by each policy as it is (its requests are its own)."""
        return item

    def side(self, index: int, sink: Sink, check: bool) -> Side:
        from .side import RequestSide

        return RequestSide(self, index, sink, check)

    def queues(self, observer: Queues, drain: bool) -> bool:
        """Shrink's windows are the task level's (a request-level trace has none)."""
        return False


def _told(on_accepted: Callable[[list[Task], int], None]) -> Callable[[Arrive, int, int], None]:
    """An accepted arrival as one task: its rid as tid and sid, its prompt as size."""

    def arrived(event: Arrive, line: int, step: int) -> None:
        prompt = len(event.tokens) if event.tokens is not None else event.prompt_tokens or 0
        task = Task(event.rid, event.rid, PREFILL, prompt, priority=event.priority)
        on_accepted([task], step)

    return arrived


def refuse_partial(events: Any, allow_incomplete: bool) -> None:
    """After the last event: a trace its writer marked partial is bad input, unless
    ``allow_incomplete`` (as for task-level traces)."""
    partial = events.partial
    if partial is not None and not allow_incomplete:
        raise InputError(events.name, partial[0], incomplete_trace(partial[1]))


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
        self.record: Step | None = None
        self.left: Left = None
        self.held: list[Id] = []
        self.life: Life | None = None

    def accepted(self, event: Arrive, line: int, step: int) -> None:
        """An arrival the policy took (the engine's ``on_arrived``)."""
        from ..facts import Life

        key = id_key(event.rid)
        self.arrived[key] = (line, step)
        if key == self.key:
            task = Task(event.rid, event.rid, PREFILL, event.prompt_tokens or 0)
            self.life = Life(task, line, step)

    def rejected(self, record: Record) -> None:
        """The followed request's arrival refused: a life of its own, unless a request
        under its id is still held (that one keeps its arrival and its life)."""
        from ..facts import Life

        assert self.arriving is not None
        event, step = self.arriving
        if any(id_key(r) == self.key for r in self.policy.held()):
            return
        task = Task(event.rid, event.rid, PREFILL, event.prompt_tokens or 0)
        reason = record["reason"]
        life = Life(task, record["line"], step, outcome=f"rejected ({reason})", outcome_step=step)
        life.reason = reason
        self.life = life

    def emit(self, record: Emitted) -> None:
        if not isinstance(record, Step):
            # A rejected arrival (accepted ones have no record).
            if record.get("op") == "arrive" and id_key(record["rid"]) == self.key:
                self.rejected(record)
            return
        self.record = record
        if self.draining and record.step + 1 == self.step:
            self.held = self.policy.held()  # as the next step begins
        life = self.life
        if life is not None:
            mine = [e for e in record.batch if id_key(e["sid"]) == self.key]
            if mine:
                life.outcome, life.outcome_step = f"ran {mine[0]['size']} tokens", record.step
            if any(id_key(r) == self.key for r in record.finished or ()):
                life.outcome, life.outcome_step = "finished", record.step

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


def request_step(opened: OpenRequestTrace, step: int) -> StepView:
    """The requests held when ``step`` began, what it ran of them, why it left the rest."""
    from ..facts import Queued, StepView

    follow = _Follow(step, None, opened.policy)
    _follow(opened, follow)
    record = follow.record
    if record is None or record.step != step:
        raise InputError(
            opened.name, None, f"there is no step {step} among the trace's step events"
        )
    ran = {id_key(e["sid"]): e for e in record.batch}
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


def request_lives(opened: OpenRequestTrace, rid: Id) -> list[Life]:
    """A request from its arrival to its end: each step it was passed over, and why."""
    follow = _Follow(None, rid, opened.policy)
    _follow(opened, follow)
    return [follow.life] if follow.life is not None else []
