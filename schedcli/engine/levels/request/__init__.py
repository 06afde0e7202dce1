"""The request level: a trace of arrivals, aborts and steps, replayed through a
``RequestScheduler`` (vLLM's) by its stepper ``replay.RequestReplayer``
(``opened.OpenRequestTrace``). Its modules load when a request-level trace is opened."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

from ....catalog.registry import policy_reference
from ....formats.trace import Header, TraceReader
from ....model.errors import InputError, Option, StepMismatch, UsageError
from ....model.scheduler import Policy
from ....model.task import Id
from .. import (
    NO_REQUEST_SNAPSHOTS,
    CheckEvent,
    Collect,
    OpenReplay,
    Partial,
    choose_policy,
    trace_meta,
)

if TYPE_CHECKING:
    from ....formats.requests import RequestTraceWriter
    from ....formats.workload import Request
    from ....formats.writer import TraceWriter
    from ....model.requests import RequestScheduler
    from ...cost import CostModel
    from ...requests.preemption import PreemptionTally
    from ...requests.simulate import OnPreempt, OnStep
    from ...results import SimResult
    from ..facts import Difference, Failure, TimedStep
    from .replay import RequestExpectMismatch


class RequestLevel:
    name: Final = "request"
    policy_level: Final = "request"
    preempts = True  # a step may preempt what runs
    reasons_replayable = False  # kept as a difference is found, or not derived
    batch_key = "sid"  # an entry's tid is a slice (RID@POSITION); its sid, the request

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
        if follow:
            raise UsageError(
                f"{name}: ",
                Option("follow"),
                " reads task-level traces as they grow; a request-level trace is replayed "
                "once it is written (drop ",
                Option("follow"),
                ")",
            )
        from .opened import OpenRequestTrace

        if reader.state is not None:
            raise InputError(name, reader.state.line, NO_REQUEST_SNAPSHOTS)

        built, label, _ = choose_policy(header, name, policy, params, note, self.policy_level)
        try:
            policy_built = cast("RequestScheduler", built)
            yield OpenRequestTrace(reader, policy_built, label, name, allow_incomplete, self)
        finally:
            built.close()

    def read_all(self, reader: TraceReader) -> None:
        from ....formats.requests import RequestReader

        for _ in RequestReader(reader):
            pass

    def events(
        self, reader: TraceReader, collect: Collect, unfit: CheckEvent | None
    ) -> tuple[int, Partial]:
        """The valid events; and the partial marker."""
        from ....formats.requests import RequestReader

        events = RequestReader(reader, collect)
        return sum(1 for _ in events), events.partial

    def interface_check(
        self,
        header: Header | None,
        trace_name: str,
        policy: str | None,
        params: Mapping[str, object],
    ) -> CheckEvent | None:
        return None  # a request-level policy takes whatever a trace can say

    def state_check(self, reader: TraceReader) -> list[InputError]:
        """A state line at all: replay refuses it before it looks at the header's policy."""
        start = reader.state
        return [] if start is None else [InputError(reader.name, start.line, NO_REQUEST_SNAPSHOTS)]

    def start_check(
        self, reader: TraceReader, policy: str | None, params: Mapping[str, object]
    ) -> list[InputError]:
        return []  # state_check refused any state

    def no_life(self, path: str, tid: Id | None, sid: Id | None) -> InputError:
        return InputError(path, None, f"no arrive in this trace holds request {sid!r}")

    def difference(self, error: StepMismatch) -> Difference:
        from .check import difference

        return difference(cast("RequestExpectMismatch", error).mismatch)

    def failure(self, error: StepMismatch) -> Failure | None:
        from .check import failure

        return failure(cast("RequestExpectMismatch", error).mismatch)

    def timed_steps(self, path: str) -> tuple[list[TimedStep], int]:
        from .fit import timed_steps

        return timed_steps(path)

    def chunking(self, policy: Policy, chunk_size: int | None, spec: str) -> int | None:
        """None: a request-level policy chunks for itself (asking it to is a usage error)."""
        if chunk_size is not None:
            raise UsageError(
                Option("chunk_size"),
                f" is for task-level policies; {spec!r} chunks prompts "
                "itself (max_num_batched_tokens, long_prefill_token_threshold)",
            )
        return None

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
        """``engine/requests/simulate.py``'s ``simulate_requests``; the policy closed
        after, unless ``close`` is false."""
        from ...requests.simulate import simulate_requests

        try:
            return simulate_requests(
                requests,
                cast("RequestScheduler", policy),
                policy_name=policy_name,
                params=params,
                cost=cost,
                trace=trace,
                slo_ttft=slo_ttft,
                slo_tpot=slo_tpot,
                on_progress=on_progress,
                on_batch=on_batch,
                on_preempt=on_preempt,
                preemption=preemption,
                keep_values=keep_values,
            )
        finally:
            if close:
                policy.close()

    def trace_writer(
        self, out: Any, policy: Policy, spec: str, params: dict[str, Any], meta: Any
    ) -> TraceWriter | RequestTraceWriter:
        from ....formats.requests import RequestTraceWriter

        reference = policy_reference(type(policy))
        return RequestTraceWriter(out, reference, params, trace_meta(policy, meta))


LEVEL = RequestLevel()

__all__ = ["LEVEL", "RequestLevel"]
