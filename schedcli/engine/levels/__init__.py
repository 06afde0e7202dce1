"""A trace level: what replaying a trace of one level differs in, behind one interface.

A level (``task/``, ``request/``, each exporting ``LEVEL``) contributes only what differs:
how it opens its trace (its reader, its policy, its step engine: an ``OpenReplay``), how
``validate`` counts its events, its ``--check`` difference and how it is drawn, its
debugger side, its shrink signature and its step view. ``table.LEVELS`` registers them by
name; every other module asks the trace's level (``opened.level``, ``table.level_of``)
and never compares names. This module is the interface and the facts the levels share.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

from ...catalog.choice import RecordedPolicy, policy_for_trace
from ...catalog.registry import Level as LevelName
from ...formats.step_lines import StepLines
from ...formats.trace import Event, Header, TraceReader
from ...model.errors import InputError, StepMismatch
from ...model.records import Left, Record
from ...model.scheduler import Policy
from ...model.steps import Step
from ...model.task import Id, Task
from ..origins import Queues
from ..replay import Emit, Observer, Totals

if TYPE_CHECKING:
    from ...formats.requests import RequestTraceWriter
    from ...formats.workload import Request
    from ...formats.writer import TraceWriter
    from ..cost import CostModel
    from ..metrics import StepMetrics
    from ..requests.preemption import PreemptionTally
    from ..requests.simulate import OnPreempt, OnStep
    from ..results import SimResult
    from .facts import Difference, Failure, Life, StepView, TimedStep


def stderr_note(message: str) -> None:
    print(message, file=sys.stderr)


def choose_policy(
    header: Header | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None] = stderr_note,
    level: LevelName = "task",
) -> tuple[Policy, str, dict[str, object]]:
    """The policy to replay a trace of ``level`` with (``catalog.choice.policy_for_trace``
    decides), promised serial calls: only the replay's loop calls it."""
    recorded = RecordedPolicy.of(header)
    built, label, used = policy_for_trace(recorded, trace_name, policy, params, note, level)
    built.promise_serial_calls()
    return built, label, used


def trace_meta(policy: Policy, meta: Any) -> Any:
    """A simulated trace's meta: it says which outside runtime scheduled it
    (``Policy.made_by``: ``vllm``'s version)."""
    return {**meta, **type(policy).made_by()} if isinstance(meta, dict) else meta


NO_REQUEST_SNAPSHOTS: Final = (
    "request-level policies have no snapshots: a request-level trace cannot begin from a state"
)


# --- the facts a level hands back ----------------------------------------------------

CheckEvent = Callable[[Event], list[InputError]]  # one event against a narrow interface
Collect = Callable[[InputError], None]
Partial = tuple[int, dict[str, Any]] | None  # a partial marker's line and record


# --- the debugger's side -------------------------------------------------------------

Entry = dict[str, Any]  # one queued task (or held request) as the debugger shows it
Follow = Callable[[list[tuple[Id, Id]], int, int], None]  # (tid, sid)s, line, step


class Sink(Protocol):
    def stepped(self, side: int, step: Step) -> None: ...

    def event(self, side: int, record: Record, step: int) -> None: ...

    def diverged(self, side: int, step: int, expected: Any) -> None: ...

    def ended(self, side: int, record: Record) -> None: ...  # the side's end record


class Side(Protocol):
    name: str  # the policy's label
    expect: Any  # while an input with a recorded expect is fed: that expect
    last_step: int  # the last step it emitted; -1 before any
    view: list[Entry] | None  # the queue at ``want``, once emitted

    def want(self, step: int) -> None: ...  # keep the queue and reasons of ``step``

    def expect_batch(self) -> list[tuple[Id, int | None]] | None: ...  # ``expect``: who, size

    def explain_from(self, step: int) -> None: ...  # reasons at every step >= ``step``

    def feed(self, line: int, item: Any) -> None: ...

    def feed_all(self) -> None: ...  # every input of its trace, this side alone

    def close(self) -> None: ...

    def oldest(self) -> int | None: ...  # the step the oldest waiting task arrived at

    def reasons(self) -> list[tuple[Id, Id, str, str]]: ...  # (tid, sid, code, detail) now

    def queued_now(self) -> list[tuple[Id, Id, int, int]]: ...  # (tid, sid, line, since)

    def state(self) -> list[tuple[str, str]]: ...  # the policy's own structures, shown

    follow: Follow | None  # told of each accepted task (or arrival): who, line, step


# --- a replay's engine and its opened trace ------------------------------------------


class Driver(Protocol):
    """What commands ask of a replay engine at either level: the one driver
    (``engine/replay.py``'s ``ReplayDriver``) with its level's stepper (``task.replay.
    Replayer``, ``request.replay.RequestReplayer``)."""

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

    expect_call: str  # the recorded call an expect is on ("get_work"), for the app's words
    check_unit: str  # what the calls a check compares are counted as ("batches")

    def checked_text(self) -> str: ...  # "checked N of M <unit>", said by replay and check

    def left_behind(self) -> Left: ...  # the policy's reasons at its last batch

    def queued_count(self) -> int: ...  # waiting now (a report's queue depth)

    def level_summary(self) -> dict[str, Any]: ...  # what the level adds to metrics

    def replay(self) -> Totals: ...  # every input of the trace it is bound to, then close

    def lockstep(self, other: Self, after_each: Callable[[], None]) -> None:
        """Every input to this replay and to ``other`` (of a ``sibling``), step by step;
        ``after_each`` after each; then close both."""
        ...


class OpenReplay(Protocol):
    """A trace opened for one replay at its level (``task.opened.OpenTrace``,
    ``request.opened.OpenRequestTrace``): ``replayer`` builds its engine, bound to the
    trace's inputs (``Driver.replay`` runs it);
    what explain, the debugger and shrink ask of a level's replay, it answers."""

    level: Level
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
        on_accepted: Callable[[list[Task], int], None] | None = None,
    ) -> Driver:
        """``on_accepted``: told of what the policy accepted, with the step it is queued
        for: tasks, or a request as one task (its rid as tid and sid, its prompt's tokens
        as size, its priority)."""
        ...

    @property
    def full_params(self) -> dict[str, object]: ...

    def step_metrics(self) -> StepMetrics: ...

    def sibling(self, policy: str | None, params: Mapping[str, object]) -> OpenReplay: ...

    def check_complete(self) -> None: ...  # after the last event: refuse a partial trace

    def close(self) -> None: ...

    # What explain, the debugger and shrink ask of the level's replay.

    def step_view(self, step: int) -> StepView: ...  # bad input past the last step

    def lives(self, *, tid: Id | None, sid: Id | None) -> list[Life]: ...

    def inputs(self) -> Iterator[tuple[int, Any]]: ...  # each input with its line

    def twin(self, item: Any) -> Any: ...  # an input as a second policy is fed it

    def side(self, index: int, sink: Sink, check: bool) -> Side: ...

    def queues(self, observer: Queues, drain: bool) -> bool: ...  # False: not this level


class Level(Protocol):
    """What one trace level contributes (``table.LEVELS`` holds one per name)."""

    @property
    def name(self) -> str: ...  # as a trace's header says it

    @property
    def policy_level(self) -> LevelName: ...  # the catalog's seam its policies implement

    @property
    def preempts(self) -> bool: ...  # a step may preempt what runs (marked, tallied)

    @property
    def reasons_replayable(self) -> bool: ...  # a past step's reasons from a replay to it

    # The field of a step record's batch entry that names what it schedules, as two sides
    # of a comparison (the debugger's batch pane) match their entries.
    @property
    def batch_key(self) -> str: ...

    def open(
        self,
        reader: TraceReader,
        header: Header | None,
        name: str,
        policy: str | None,
        params: Mapping[str, object],
        note: Callable[[str], None],
        follow: bool,
        allow_incomplete: bool,
    ) -> AbstractContextManager[OpenReplay]: ...

    def read_all(self, reader: TraceReader) -> None: ...  # every line, each checked

    def events(
        self, reader: TraceReader, collect: Collect, unfit: CheckEvent | None
    ) -> tuple[int, Partial]: ...  # validate's count of valid events, and partial marker

    def interface_check(
        self,
        header: Header | None,
        trace_name: str,
        policy: str | None,
        params: Mapping[str, object],
    ) -> CheckEvent | None: ...  # validate: the policy's narrow interface, if any

    # validate: what replay refuses in the state line before it chooses a policy (its order)
    def state_check(self, reader: TraceReader) -> list[InputError]: ...

    def start_check(
        self,
        reader: TraceReader,
        policy: str | None,
        params: Mapping[str, object],
    ) -> list[InputError]: ...  # validate: the state the trace begins from, as replay takes it

    def no_life(self, path: str, tid: Id | None, sid: Id | None) -> InputError: ...

    def difference(self, error: StepMismatch) -> Difference: ...  # --check's, drawn

    def failure(self, error: StepMismatch) -> Failure | None: ...  # shrink's signature

    def timed_steps(self, path: str) -> tuple[list[TimedStep], int]: ...  # fit's, and idle

    # ``simulate``: a policy of this level (``table.level_of_policy``) run on a workload.

    def chunking(self, policy: Policy, chunk_size: int | None, spec: str) -> int | None:
        """The chunk size the runner splits prompts at for ``policy``."""
        ...

    def simulate(
        self,
        requests: Iterable[Request],
        policy: Policy,
        *,
        policy_name: str,
        params: dict[str, Any],
        cost: CostModel,
        chunk_size: int | None = None,
        trace: Any = None,
        slo_ttft: float | None = None,
        slo_tpot: float | None = None,
        on_progress: Callable[[int, float], None] | None = None,
        on_batch: OnStep | None = None,
        on_preempt: OnPreempt | None = None,
        close: bool = True,
        preemption: PreemptionTally | None = None,
        keep_values: bool = False,
    ) -> SimResult:
        """The workload through ``policy``; ``trace`` is the writer ``trace_writer`` made;
        ``close``: the policy released after."""
        ...

    def trace_writer(
        self, out: Any, policy: Policy, spec: str, params: dict[str, Any], meta: Any
    ) -> TraceWriter | RequestTraceWriter:
        """The writer of a simulated run's trace at this level, its header written."""
        ...
