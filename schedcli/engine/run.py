"""Replaying a trace file: choosing the policy, the step mode, and running the engine."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, cast, runtime_checkable

from ..catalog.choice import RecordedPolicy, policy_for_trace
from ..catalog.registry import Level, resolve_policy
from ..formats.kinds import LEVEL
from ..formats.step_lines import StepLines
from ..formats.trace import Event, Header, TraceReader, incomplete_trace, open_trace
from ..model.errors import InputError, UnfitTask, UsageError
from ..model.records import Left, discard
from ..model.scheduler import Policy, Scheduler
from ..model.task import Id, Task
from ..streams.source import DEFAULT_MAX_LINE_BYTES, display_name
from .replay import Emit, Observer, Replayer, Totals

if TYPE_CHECKING:
    from ..model.requests import RequestScheduler
    from .metrics import StepMetrics
    from .requests.replay import OpenRequestTrace


def _stderr_note(message: str) -> None:
    print(message, file=sys.stderr)


def choose_policy(
    header: Header | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None] = _stderr_note,
    level: Level = "task",
) -> tuple[Policy, str, dict[str, object]]:
    """The policy to replay a trace of ``level`` with (``catalog.choice.policy_for_trace``
    decides), promised serial calls: only the replay's loop calls it."""
    recorded = RecordedPolicy.of(header)
    built, label, used = policy_for_trace(recorded, trace_name, policy, params, note, level)
    built.promise_serial_calls()
    return built, label, used


@runtime_checkable
class NarrowInterface(Protocol):
    """A policy whose interface holds less than a trace may (a C++ scheduler's integer
    widths: ``runtimes.executorch.policy``): ``UnfitTask`` for what it could not be handed,
    in the words its replay refuses it with."""

    def check_task(self, task: Task) -> None: ...

    def check_sid(self, sid: Id) -> None: ...


CheckEvent = Callable[[Event], list[InputError]]


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


class Driver(Protocol):
    """What commands ask of a replay engine at either level (``replay.Replayer``,
    ``requests.replay.RequestReplayer``)."""

    totals: Totals
    checked: int  # recorded calls compared with their expect so far
    last_batch_step: int  # -1 once the policy has moved on from its last batch

    @property
    def upcoming_step(self) -> int: ...

    @property
    def current_line(self) -> int: ...

    @property
    def check_total(self) -> int: ...  # recorded calls --check could compare so far

    @property
    def nothing_checked(self) -> bool: ...

    def nothing_to_check(self) -> str: ...  # why --check had nothing, for its error

    def unchecked_text(self) -> str: ...  # --require-all's failure

    def checked_text(self) -> str: ...  # "checked N of M <unit>", said by replay and check

    def left_behind(self) -> Left: ...  # the policy's reasons at its last batch

    def queued_count(self) -> int: ...  # waiting now (a report's queue depth)

    def level_summary(self) -> dict[str, Any]: ...  # what the level adds to metrics


class OpenReplay(Protocol):
    """A trace opened for one replay, at either level (``OpenTrace``,
    ``requests.replay.OpenRequestTrace``): ``replayer`` builds its engine, ``run`` runs it."""

    level: str
    name: str
    policy_name: str
    params: dict[str, object]

    @property
    def reader(self) -> TraceReader: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def token_budget(self) -> int | None: ...

    def explain(self) -> None: ...

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
        measure_preemption: bool = False,
    ) -> Driver: ...

    def run(self, engine: Any) -> Totals: ...

    @property
    def full_params(self) -> dict[str, object]: ...

    def step_metrics(self) -> StepMetrics: ...

    def sibling(self, policy: str | None, params: Mapping[str, object]) -> OpenReplay: ...

    def lockstep(self, a: Any, b: Any, after_each: Callable[[], None]) -> None: ...

    def check_complete(self) -> None: ...  # after the last event: refuse a partial trace

    def close(self) -> None: ...


class OpenTrace:
    """A task-level trace ready to replay: its reader and its policy. (A request-level one
    is ``requests.replay.OpenRequestTrace``, with the same protocol: ``name``,
    ``policy_name``, ``params``, ``token_budget``, ``explain``, ``replayer``, ``run``.)"""

    level = "task"

    def __init__(
        self,
        reader: TraceReader,
        policy: Scheduler,
        policy_name: str,
        params: dict[str, object],
        name: str,
        allow_incomplete: bool = False,
    ) -> None:
        self.reader = reader
        self.policy = policy
        self.policy_name = policy_name
        self.params = params
        self.name = name
        self.allow_incomplete = allow_incomplete

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
    ) -> Replayer:
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
        )

    @property
    def recorded_outcomes(self) -> bool:
        """A recorder's trace marks every rejected submit (docs/recording.md)."""
        header = self.reader.header
        meta = header.meta if header is not None else None
        return isinstance(meta, dict) and "recorded_by" in meta

    def run(self, engine: Any) -> Totals:
        """Replay every event of the trace through ``engine``, then finish. A trace marked
        partial is refused after its last event (before the end record), unless
        ``allow_incomplete``."""
        assert isinstance(engine, Replayer)
        return engine.run(self.reader.runs(), self.check_complete)

    @property
    def full_params(self) -> dict[str, object]:
        """Every parameter of the policy, defaults included (what it was given, for a
        plugin that declares none)."""
        return self.policy.params() or dict(self.params)

    def step_metrics(self) -> StepMetrics:
        from .metrics import StepMetrics  # a dataclass: not made at start-up for a replay

        return StepMetrics(self.policy.token_budget)

    def sibling(self, policy: str | None, params: Mapping[str, object]) -> OpenTrace:
        """The same trace under another configuration, for a replay beside this one."""
        built, label, used = choose_policy(self.reader.header, self.name, policy, params)
        assert isinstance(built, Scheduler)
        return OpenTrace(self.reader, built, label, used, self.name, self.allow_incomplete)

    def lockstep(self, a: Any, b: Any, after_each: Callable[[], None]) -> None:
        """Every event to engine ``a`` and to engine ``b`` of a sibling, step by step."""
        from .lockstep import run_in_lockstep

        run_in_lockstep(self.reader.runs(), a, b, after_each, self.check_complete)

    def close(self) -> None:
        """A task-level policy holds nothing to release."""

    def check_complete(self) -> None:
        partial = self.reader.partial
        if partial is not None and not self.allow_incomplete:
            raise InputError(self.name, partial[0], incomplete_trace(partial[1]))


@contextmanager
def open_replay(
    path: str,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    note: Callable[[str], None] = _stderr_note,
    on_wait: Callable[[], None] | None = None,
    follow: bool = False,
    allow_incomplete: bool = False,
    data: bytes | None = None,
    stream: BinaryIO | None = None,
) -> Iterator[OpenReplay]:
    """The trace opened for one pass, its policy built, at the level its header says.
    ``on_wait`` runs before reading from a pipe (or a ``follow``ed file) would wait: flush
    outputs there. ``data``: the trace's bytes, held in memory, or ``stream``: the trace
    opened already (``path`` names it)."""
    name = display_name(path)
    with open_trace(
        path,
        name=name,
        max_line_bytes=max_line_bytes,
        on_wait=on_wait,
        follow=follow,
        data=data,
        stream=stream,
    ) as reader:
        header = reader.header
        if header is not None and header.level == LEVEL:
            yield from _request_level(
                reader, header, name, policy, params, note, follow, allow_incomplete
            )
            return
        built, label, used = choose_policy(header, name, policy, params or {}, note)
        assert isinstance(built, Scheduler)
        yield OpenTrace(reader, built, label, used, name, allow_incomplete)


def _request_level(
    reader: TraceReader,
    header: Header,
    name: str,
    policy: str | None,
    params: Mapping[str, object] | None,
    note: Callable[[str], None],
    follow: bool,
    allow_incomplete: bool,
) -> Iterator[OpenRequestTrace]:
    if follow:
        raise UsageError(
            f"{name}: --follow reads task-level traces as they grow; a request-level trace "
            "is replayed once it is written (drop --follow)"
        )
    from .requests.replay import OpenRequestTrace

    built, label, _ = choose_policy(header, name, policy, params or {}, note, "request")
    try:
        yield OpenRequestTrace(
            reader, cast("RequestScheduler", built), label, name, allow_incomplete
        )
    finally:
        built.close()


class Progress(Protocol):
    """A progress display that follows a replay (``app.views.progress.TraceProgress``)."""

    position: Callable[[], int] | None

    def on_step(self, step: int) -> None: ...


def replay_metrics(
    path: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    drain: bool = False,
    allow_incomplete: bool = False,
    progress: Progress | None = None,
    measure_preemption: bool = False,
    stream: BinaryIO | None = None,
) -> tuple[dict[str, Any], str]:
    """A trace replayed at its level and its steps measured (``stats``, a sweep's trace
    point); and a title: the trace and the policy it ran under. A request-level replay's
    metrics see dispatches only (a request's waits are not a task's), and with
    ``measure_preemption`` what preemption cost (``requests.preemption``; ``stats``).
    ``stream``: the trace opened already (``path`` names it)."""
    from .metrics import StepMetrics  # a dataclass: not made at start-up for every replay

    with open_replay(
        path, policy=policy, params=params, allow_incomplete=allow_incomplete, stream=stream
    ) as opened:
        metrics = StepMetrics(opened.token_budget, waits_known=opened.level == "task")
        on_step = None
        if progress is not None:
            progress.position = opened.reader.position
            on_step = progress.on_step
        engine = opened.replayer(
            discard,
            drain=drain,
            observer=metrics,
            on_step=on_step,
            measure_preemption=measure_preemption,
        )
        totals = opened.run(engine)
        summary = metrics.summary()
        summary["rejected"] = totals.rejected
        summary["queued"] = totals.queued
        summary.update(engine.level_summary())
        return summary, f"{opened.name} under {opened.policy_name}"
