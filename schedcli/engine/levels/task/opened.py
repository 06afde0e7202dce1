"""A task-level trace opened for replay (``OpenTrace``): its reader, its policy, its engine
(its stepper ``replay.Replayer``), and what explain asks of its replay: a step's
view and a task's lives, from the engine's observer."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ....catalog.choice import RecordedPolicy
from ....catalog.registry import resolve_policy
from ....formats.step_lines import StepLines
from ....formats.trace import Event, Header, TraceReader, incomplete_trace
from ....model.errors import InputError, UnfitTask
from ....model.records import Left, discard
from ....model.scheduler import Scheduler
from ....model.task import Id, Task, id_key, same_id
from ...lockstep import twin
from ...origins import Origins, Queues, Reached
from ...replay import Emit, Observer
from .. import CheckEvent, Level, Side, Sink, choose_policy
from .replay import Replayer

if TYPE_CHECKING:
    from ...metrics import StepMetrics
    from ..facts import Life, StepView


@runtime_checkable
class NarrowInterface(Protocol):
    """A policy whose interface holds less than a trace may (a C++ scheduler's integer
    widths: ``runtimes.executorch.policy``): ``UnfitTask`` for what it could not be handed,
    in the words its replay refuses it with."""

    def check_task(self, task: Task) -> None: ...

    def check_sid(self, sid: Id) -> None: ...


def interface_check(
    header: Header | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
) -> CheckEvent | None:
    """For a task-level trace whose policy has a narrow interface, that policy built as
    replay builds it (a failed build, a factory that returns null: replay's UsageError or
    InputError) and a check of one event against it: each task of a submit, a cancel's
    sid, that the replay would refuse as unfit, an ``InputError`` at the event's line in
    the replay's words (``Replayer._crash``). None, and nothing built, for any other policy
    (``validate``: building vLLM's takes seconds, and the others hold any value a trace can).
    Call it once the policy was checked (``check_policy_for_trace``)."""
    recorded = RecordedPolicy.of(header)
    spec = policy or (recorded.policy if recorded is not None else None)
    if spec is None or not issubclass(resolve_policy(spec, "task"), NarrowInterface):
        return None
    built, label, _ = choose_policy(header, trace_name, policy, params, lambda _: None)
    assert isinstance(built, NarrowInterface)
    narrow = built

    def check(event: Event) -> list[InputError]:
        calls: list[Callable[[], None]] = []
        if event.op == "submit":
            calls = [functools.partial(narrow.check_task, task) for task in event.tasks or ()]
        elif event.op == "cancel" and event.sid is not None:
            calls = [functools.partial(narrow.check_sid, event.sid)]
        unfit = []
        for call in calls:
            try:
                call()
            except UnfitTask as e:
                unfit.append(InputError(trace_name, event.line, f"{e} (policy {label!r})"))
        return unfit

    return check


class OpenTrace:
    """A task-level trace ready to replay: its reader and its policy (``OpenReplay``)."""

    level: Level

    def __init__(
        self,
        reader: TraceReader,
        policy: Scheduler,
        policy_name: str,
        params: dict[str, object],
        name: str,
        allow_incomplete: bool,
        level: Level,
    ) -> None:
        self.reader = reader
        self.policy = policy
        self.policy_name = policy_name
        self.params = params
        self.name = name
        self.allow_incomplete = allow_incomplete
        self.level = level

    @property
    def token_budget(self) -> int | None:
        return self.policy.token_budget

    def explain(self) -> None:
        """Have the policy keep its reasons as it schedules (a difference shows them)."""
        self.policy.explaining = True

    def replayer(
        self,
        emit: Emit,
        *,
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        on_left: Callable[[int, Left], None] | None = None,
        dump: StepLines | None = None,
        measure_preemption: bool = False,  # a task-level policy never preempts
        on_accepted: Callable[[list[Task], int], None] | None = None,
    ) -> Replayer:
        if on_accepted is not None:
            observer = _Accepted(observer, on_accepted)
        return Replayer(
            self.policy,
            emit,
            policy_name=self.policy_name,
            trace_name=self.name,
            check=check,
            drain=drain,
            on_step=on_step,
            observer=observer,
            on_left=on_left,
            recorded_outcomes=self.recorded_outcomes,
            dump=dump,
            allow_incomplete=self.allow_incomplete,
            inputs=self.reader.runs,
            before_close=self.check_complete,
            start=self.reader.state,
        )

    @property
    def recorded_outcomes(self) -> bool:
        """A recorder's trace marks every rejected submit (docs/recording.md)."""
        header = self.reader.header
        meta = header.meta if header is not None else None
        return isinstance(meta, dict) and "recorded_by" in meta

    @property
    def full_params(self) -> dict[str, object]:
        """Every parameter of the policy, defaults included (what it was given, for a
        plugin that declares none)."""
        return self.policy.params() or dict(self.params)

    def step_metrics(self) -> StepMetrics:
        from ...metrics import StepMetrics  # a dataclass: not made at start-up for a replay

        return StepMetrics(self.policy.token_budget)

    def sibling(self, policy: str | None, params: Mapping[str, object]) -> OpenTrace:
        """The same trace under another configuration, for a replay beside this one."""
        built, label, used = choose_policy(self.reader.header, self.name, policy, params)
        assert isinstance(built, Scheduler)
        return OpenTrace(
            self.reader, built, label, used, self.name, self.allow_incomplete, self.level
        )

    def close(self) -> None:
        """A task-level policy holds nothing to release."""

    def check_complete(self) -> None:
        partial = self.reader.partial
        if partial is not None and not self.allow_incomplete:
            raise InputError(self.name, partial[0], incomplete_trace(partial[1]))

    def step_view(self, step: int) -> StepView:
        return task_step(self, step)

    def lives(self, *, tid: Id | None, sid: Id | None) -> list[Life]:
        if tid is not None:
            key = id_key(tid)
            return task_lives(self, lambda t: id_key(t.tid) == key)
        return task_lives(self, lambda t: same_id(t.sid, sid))

    def inputs(self) -> Iterator[tuple[int, Any]]:
        """Each line's event (or a run's group of tasks) with its line, in order."""
        for line, items in self.reader.runs():
            for item in items:
                yield line, item
                line += 1

    def twin(self, item: Any) -> Any:
        """Each policy its own tasks, as diff's lockstep gives them."""
        return twin(item)

    def side(self, index: int, sink: Sink, check: bool) -> Side:
        from .side import TaskSide

        return TaskSide(self, index, sink, check)

    def queues(self, observer: Queues, drain: bool) -> bool:
        """The replay, ``observer`` seeing the queue at its steps."""
        engine = self.replayer(discard, observer=observer, drain=drain)
        observer.engine = engine
        engine.replay()
        return True


def task_step(opened: OpenTrace, step: int) -> StepView:
    from ..facts import Queued, StepView

    opened.policy.explaining = True  # one step's reasons: asked for there, not every step
    origins = Origins(step)
    engine = origins.engine = opened.replayer(discard, observer=origins)
    try:
        engine.replay()
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


def task_lives(opened: OpenTrace, wanted: Callable[[Task], bool]) -> list[Life]:
    holder: list[Replayer] = []
    watcher = _Watcher(lambda: holder[0].current_line, wanted)
    engine = opened.replayer(discard, observer=watcher, on_left=watcher.left)
    holder.append(engine)
    engine.replay()
    return list(watcher.lives.values())


class _Watcher:
    """The replay's observer for lives: who was submitted where, what each step did to
    the tasks followed, and the reasons each was passed over at every step."""

    def __init__(self, engine_line: Any, wanted: Any) -> None:
        self.engine_line = engine_line
        self.wanted = wanted  # Task -> bool: the lives to follow
        self.lives: dict[int, Life] = {}  # by object id
        self.policy = ""

    def claimed(self, copy: Task, own: Task) -> None:
        """The policy handed back its own copy of ``copy``, a task restored from a state."""
        life = self.lives.pop(id(copy), None)
        if life is not None:
            self.lives[id(own)] = life

    def accepted(self, tasks: list[Task], step: int) -> None:
        from ..facts import Life

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
        from ..facts import Life

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


class _Accepted:
    """An observer that also tells ``on_accepted`` of each accepted group."""

    def __init__(
        self, inner: Observer | None, on_accepted: Callable[[list[Task], int], None]
    ) -> None:
        self.inner, self.on_accepted = inner, on_accepted

    def claimed(self, copy: Task, own: Task) -> None:
        claimed = getattr(self.inner, "claimed", None)
        if claimed is not None:
            claimed(copy, own)

    def accepted(self, tasks: list[Task], step: int) -> None:
        self.on_accepted(tasks, step)
        if self.inner is not None:
            self.inner.accepted(tasks, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        if self.inner is not None:
            self.inner.dispatched(batch, step)

    def dropped(self, tasks: list[Task], step: int) -> None:
        if self.inner is not None:
            self.inner.dropped(tasks, step)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        if self.inner is not None:
            self.inner.rejected(tasks, step, reason)
