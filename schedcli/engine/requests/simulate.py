"""Playing the runner for a request-level policy: the same clock, cost model and metrics as
``simulate`` gives a task-level one (engine/simulate.py), so the two compare directly.

A request is added when it arrives; each step runs for ``a + b*tokens + c*decodes
(+ d*context)`` simulated seconds; a slice that reaches its request's last known token
yields a token at the step's end; a client whose patience ran out aborts.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ...formats.requests import RequestTraceWriter
from ...formats.workload import Request
from ...formats.writer import TraceWriter
from ...model.errors import InvariantError
from ...model.requests import Arrival, RequestScheduler, StepPlan
from ...model.scheduler import Scheduler
from ...model.task import DECODE, PREFILL, Id, Task
from ...policies.registry import policy_reference
from ..cost import CostModel
from ..replay import PolicyCrashed
from ..simulate import STUCK_AFTER, SimResult, _Live, chunk_size_for, simulate

OnStep = Callable[[int, float, float, list[Task], int], None]
OnPreempt = Callable[[int, float, list[Id]], None]  # step, start in microseconds, requests


class _RequestRunner:
    def __init__(
        self,
        policy: RequestScheduler,
        result: SimResult,
        name: str,
        trace: RequestTraceWriter | None,
        on_batch: OnStep | None,
    ) -> None:
        self.policy, self.result, self.name = policy, result, name
        self.trace, self.on_batch = trace, on_batch
        self.on_preempt: OnPreempt | None = None
        self.live: dict[Id, _Live] = {}
        self.deadlines: list[tuple[float, int, Id]] = []
        self.t = 0.0
        self.step = 0
        self.preemptions = 0

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except InvariantError:
            raise
        except Exception as e:
            raise PolicyCrashed(
                f"policy {self.name!r} raised in {what} at step {self.step} "
                f"(simulated time {self.t:.6f} s): {type(e).__name__}: {e}"
            ) from e

    def admit(self, req: Request) -> None:
        result = self.result
        result.requests += 1
        a = Arrival(req.sid, req.prompt_tokens, req.output_tokens, req.priority)
        reason = self.call("add", lambda: self.policy.add(a))
        if self.trace is not None:
            self.trace.arrive(a, t=self.t, meta=req.meta)
        if reason is not None:
            result.rejected += 1
            result.rejected_by_reason[reason] = result.rejected_by_reason.get(reason, 0) + 1
            return
        self.live[req.sid] = _Live(req, self.step)
        if req.cancel_after is not None:
            heapq.heappush(self.deadlines, (req.arrival + req.cancel_after, req.line, req.sid))

    def cancel_due(self) -> None:
        while self.deadlines and self.deadlines[0][0] <= self.t:
            _, _, rid = heapq.heappop(self.deadlines)
            victim = self.live.pop(rid, None)
            if victim is None:
                continue  # finished in time
            self.call("abort", partial(self.policy.abort, rid))
            if self.trace is not None:
                self.trace.abort(rid, t=self.t)
            victim.cancelled = True
            self.result.cancelled += 1

    def run_step(self, cost: CostModel) -> StepPlan:
        start = self.t
        plan: StepPlan = self.call("step", self.policy.step)
        if self.trace is not None:
            self.trace.step(plan, t=start)
        tokens = decodes = context = 0
        for s in plan.batch:
            tokens += s.tokens
            context += s.position + s.tokens
            if not s.prefill:
                decodes += 1
        end = start + cost.a + cost.b * tokens + cost.c * decodes + cost.d * context
        result = self.result
        if self.on_batch is not None and plan.batch:
            tasks = [
                Task(f"{s.rid}@{s.position}", s.rid, PREFILL if s.prefill else DECODE, s.tokens)
                for s in plan.batch
            ]
            self.on_batch(self.step, start, end, tasks, self.policy.counts()[1])
        result.batch_tokens += tokens
        result.decode_tokens += decodes
        result.prefill_tokens += tokens - decodes
        self.preemptions += len(plan.preempted)
        if self.on_preempt is not None and plan.preempted:
            self.on_preempt(self.step, start * 1e6, plan.preempted)
        self._produce(plan, start, end)
        self.t = end
        self.step += 1
        return plan

    def _produce(self, plan: StepPlan, start: float, end: float) -> None:
        result, step = self.result, self.step
        for s in plan.batch:
            req = self.live.get(s.rid)
            if req is None:
                raise InvariantError(
                    f"policy {self.name!r} scheduled request {s.rid!r}, which is not live"
                )
            if req.first_dispatch_step < 0:
                req.first_dispatch, req.first_dispatch_step = start, step
                result.queue_delay.append(start - req.arrival)
                result.queue_delay_steps.append(step - req.arrival_step)
            if not s.samples:
                continue
            result.output_tokens += 1
            req.produced += 1
            req.last_token, req.last_token_step = end, step + 1
            if req.produced == 1:
                req.first_token, req.first_token_step = end, step + 1
                result.ttft.append(end - req.arrival)
                result.ttft_steps.append(step + 1 - req.arrival_step)
        for rid in plan.finished:
            req = self.live.pop(rid, None)
            if req is None:
                raise InvariantError(f"policy {self.name!r} finished {rid!r}, which is not live")
            result.finished += 1
            result.finish(req)


def simulate_requests(
    requests: Iterable[Request],
    policy: RequestScheduler,
    *,
    policy_name: str,
    params: dict[str, Any],
    cost: CostModel,
    trace: RequestTraceWriter | None = None,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    on_batch: OnStep | None = None,
    on_preempt: OnPreempt | None = None,
) -> SimResult:
    """Run the workload through a request-level ``policy`` (see ``simulate``);
    ``on_preempt`` hears of each step's preemptions."""
    result = SimResult(policy_name, params, cost, 0, budget=policy.token_budget)
    result.slo_ttft, result.slo_tpot = slo_ttft, slo_tpot
    runner = _RequestRunner(policy, result, policy_name, trace, on_batch)
    runner.on_preempt = on_preempt
    arrivals = iter(requests)
    pending = next(arrivals, None)
    result.start = runner.t = pending.arrival if pending is not None else 0.0
    empty = 0
    while True:
        while pending is not None and pending.arrival <= runner.t:
            runner.admit(pending)
            pending = next(arrivals, None)
        runner.cancel_due()
        if not runner.call("has_work", policy.has_work):
            if runner.live:
                raise InvariantError(
                    f"policy {policy_name!r} reports no work while {len(runner.live)} requests wait"
                )
            if pending is None:
                break
            runner.t = pending.arrival
            continue
        plan = runner.run_step(cost)
        empty = 0 if plan.batch else empty + 1
        if empty >= STUCK_AFTER:
            raise InvariantError(
                f"policy {policy_name!r}: {STUCK_AFTER} empty steps in a row while requests "
                "wait: the simulation would never finish"
            )
        if on_progress is not None and runner.step % 4096 == 0:
            on_progress(result.requests, runner.t)
    result.steps = runner.step
    result.end = runner.t
    result.preemptions = runner.preemptions
    return result


def simulate_either(
    requests: Iterable[Request],
    policy: Scheduler | RequestScheduler,
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
) -> SimResult:
    """The workload through a policy of either level: ``simulate_requests`` for one that
    slices requests itself (closed after, unless ``close`` is false), else ``simulate``,
    chunking prompts at ``chunk_size`` or the policy's own limit. ``trace`` is the
    writer ``trace_writer`` made for it; ``on_preempt`` hears of a request-level
    policy's preemptions (a task-level one has none)."""
    if isinstance(policy, RequestScheduler):
        try:
            return simulate_requests(
                requests,
                policy,
                policy_name=policy_name,
                params=params,
                cost=cost,
                trace=trace,
                slo_ttft=slo_ttft,
                slo_tpot=slo_tpot,
                on_progress=on_progress,
                on_batch=on_batch,
                on_preempt=on_preempt,
            )
        finally:
            if close:
                policy.close()
    return simulate(
        requests,
        policy,
        policy_name=policy_name,
        params=params,
        chunk_size=chunk_size or chunk_size_for(policy),
        cost=cost,
        trace=trace,
        slo_ttft=slo_ttft,
        slo_tpot=slo_tpot,
        on_progress=on_progress,
        on_batch=on_batch,
    )


def trace_writer(
    out: Any, policy: Scheduler | RequestScheduler, spec: str, params: dict[str, Any], meta: Any
) -> TraceWriter | RequestTraceWriter:
    """The writer of a simulated run's trace at the policy's level, its header written:
    the policy named so that a replay loads it (a request-level one as given)."""
    if isinstance(policy, RequestScheduler):
        return RequestTraceWriter(out, spec, params, meta)
    writer = TraceWriter(out)
    writer.header(policy_reference(type(policy)), params, meta)
    return writer
