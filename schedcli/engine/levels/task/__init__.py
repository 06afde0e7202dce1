"""The task level: a trace of submits, cancels, clears and get_works, replayed through a
``Scheduler`` by its stepper ``replay.Replayer`` (``opened.OpenTrace``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

from ....catalog.registry import policy_reference
from ....formats.trace import Header, TraceReader
from ....formats.writer import TraceWriter
from ....model.errors import InputError, StepMismatch, UsageError
from ....model.scheduler import Policy, Scheduler
from ....model.task import Id
from ...clock import StepClock
from .. import (
    CheckEvent,
    Collect,
    OpenReplay,
    Partial,
    choose_policy,
    trace_meta,
)
from .opened import OpenTrace, interface_check

if TYPE_CHECKING:
    from ....formats.requests import RequestTraceWriter
    from ....formats.workload import Request
    from ...cost import CostModel
    from ...recorded import ExpectMismatch
    from ...requests.preemption import PreemptionTally
    from ...requests.simulate import OnPreempt, OnStep
    from ...results import SimResult
    from ..facts import Difference, Failure, TimedStep


class TaskLevel:
    name: Final = "task"
    policy_level: Final = "task"
    preempts = False  # a task-level policy never preempts
    reasons_replayable = True  # a built-in works its reasons out where asked
    batch_key = "tid"  # a batch entry is a task

    @contextmanager
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
    ) -> Iterator[OpenReplay]:
        built, label, used = choose_policy(header, name, policy, params, note)
        yield OpenTrace(reader, cast(Scheduler, built), label, used, name, allow_incomplete, self)

    def read_all(self, reader: TraceReader) -> None:
        for _ in reader.runs():
            pass

    def events(
        self, reader: TraceReader, collect: Collect, unfit: CheckEvent | None
    ) -> tuple[int, Partial]:
        """The valid events, their steps checked by replay's rules (``StepClock``) and
        their tasks by the policy's interface; and the partial marker."""
        clock = StepClock(reader.name)
        if reader.state is not None:
            clock.start(reader.state.step, reader.state.line)
        events = 0
        for event in reader:
            try:
                clock.check(event)
            except InputError as e:
                collect(e)
                continue
            problems = unfit(event) if unfit is not None else []
            for problem in problems:
                collect(problem)
            events += not problems
        return events, reader.partial

    def interface_check(
        self,
        header: Header | None,
        trace_name: str,
        policy: str | None,
        params: Mapping[str, object],
    ) -> CheckEvent | None:
        return interface_check(header, trace_name, policy, params)

    def state_check(self, reader: TraceReader) -> list[InputError]:
        return []  # a task-level state is checked by the policy it restores into

    def start_check(
        self, reader: TraceReader, policy: str | None, params: Mapping[str, object]
    ) -> list[InputError]:
        """The state the trace begins from restored as replay restores it (a freshly built
        policy): the same refusals, at the state's line."""
        start = reader.state
        if start is None:
            return []
        from .replay import restore_state

        try:
            built, _, _ = choose_policy(reader.header, reader.name, policy, params, _silent)
            restore_state(cast(Scheduler, built), start, reader.name)
        except InputError as e:
            return [e]
        except UsageError as e:
            return [InputError(reader.name, start.line, str(e))]
        return []

    def no_life(self, path: str, tid: Id | None, sid: Id | None) -> InputError:
        what = f"task {tid!r}" if tid is not None else f"session {sid!r}"
        return InputError(path, None, f"no submit in this trace holds {what}")

    def difference(self, error: StepMismatch) -> Difference:
        from .check import difference

        return difference(cast("ExpectMismatch", error).mismatch)

    def failure(self, error: StepMismatch) -> Failure | None:
        from .check import failure

        return failure(cast("ExpectMismatch", error).mismatch)

    def timed_steps(self, path: str) -> tuple[list[TimedStep], int]:
        from .fit import timed_steps

        return timed_steps(path)

    def chunking(self, policy: Policy, chunk_size: int | None, spec: str) -> int | None:
        """``chunk_size``, or the policy's own limit."""
        from ...simulate import chunk_size_for

        return chunk_size or chunk_size_for(cast(Scheduler, policy))

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
        """``engine/simulate.py``, prompts chunked at ``chunk_size`` or the policy's own
        limit (a task-level policy never preempts: ``on_preempt``, ``preemption`` unused)."""
        from ...simulate import chunk_size_for, simulate

        scheduler = cast(Scheduler, policy)
        return simulate(
            requests,
            scheduler,
            policy_name=policy_name,
            params=params,
            chunk_size=chunk_size or chunk_size_for(scheduler),
            cost=cost,
            trace=trace,
            slo_ttft=slo_ttft,
            slo_tpot=slo_tpot,
            on_progress=on_progress,
            on_batch=on_batch,
            keep_values=keep_values,
        )

    def trace_writer(
        self, out: Any, policy: Policy, spec: str, params: dict[str, Any], meta: Any
    ) -> TraceWriter | RequestTraceWriter:
        """The policy named so that a replay loads it (its registered name where it has
        one: a header may name an import string, but a replay refuses to import it)."""
        writer = TraceWriter(out)
        writer.header(policy_reference(type(policy)), params, trace_meta(policy, meta))
        return writer


def _silent(_: str) -> None:
    pass


LEVEL = TaskLevel()

__all__ = ["LEVEL", "OpenTrace", "TaskLevel"]
