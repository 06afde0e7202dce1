"""Playing the runner for a request-level policy: the same clock, cost model and metrics as
``simulate`` gives a task-level one (engine/simulate.py), so the two compare directly.

A request is added when it arrives; each step runs for ``a + b*tokens + c*decodes
(+ d*context)`` simulated seconds; a slice that reaches its request's last known token
yields a token at the step's end; a client whose patience ran out aborts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ...formats.requests import RequestTraceWriter
from ...formats.workload import Request
from ...model.errors import InvariantError
from ...model.requests import Arrival, RequestScheduler, StepPlan
from ...model.task import DECODE, PREFILL, Id, Task
from ..cost import CostModel
from ..results import Live, SimResult
from ..simulate import Runner, run
from ..stall import stuck_text
from .preemption import PreemptionTally

OnStep = Callable[[int, float, float, list[Task], int], None]
OnPreempt = Callable[[int, float, list[Id]], None]  # step, start in microseconds, requests


class RequestRunner(Runner):
    """The runner of a request-level policy: requests added whole, each step planned by
    the policy; the runner produces the tokens its slices sample."""

    def __init__(
        self,
        policy: RequestScheduler,
        result: SimResult,
        name: str,
        trace: RequestTraceWriter | None,
        on_batch: OnStep | None,
    ) -> None:
        super().__init__(name, result)
        self.policy, self.trace, self.on_batch = policy, trace, on_batch
        self.on_preempt: OnPreempt | None = None
        self.preemption: PreemptionTally | None = None  # what preemption costs, if asked
        self.preemptions = 0

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except InvariantError:
            raise
        except Exception as e:
            raise self.crashed(what, e) from e

    def offer(self, req: Request, live: Live) -> str | None:
        a = Arrival(req.sid, req.prompt_tokens, req.output_tokens, req.priority)
        reason: str | None = self.call("add", lambda: self.policy.add(a))
        if self.trace is not None:
            self.trace.arrive(a, t=self.t, meta=req.meta)
        return reason

    def drop(self, sid: Id) -> None:
        self.call("abort", partial(self.policy.abort, sid))
        if self.preemption is not None:
            self.preemption.ended([sid])
        if self.trace is not None:
            self.trace.abort(sid, t=self.t)

    def has_work(self) -> bool:
        return bool(self.call("has_work", self.policy.has_work))

    def done(self) -> None:
        self.result.preemptions = self.preemptions

    forget_on_work = False  # a step that ran tokens may be undone by a preemption

    def watched(self) -> object:
        return self.policy

    def stuck(self) -> str:
        return stuck_text(self.policy.held(), self.policy.reasons(), "request")

    def idle_until(self, when: float, cost: CostModel, stalled: bool) -> bool:
        """Each empty step takes ``a`` seconds, as any step: a stalled policy's steps until
        ``when`` are written without asking it (it would answer each alike)."""
        if cost.a <= 0:
            return False
        nothing = StepPlan([])
        while stalled and self.t < when:
            start = self.t
            if self.trace is not None:
                self.trace.step(nothing, t=start)
            self.t = start + cost.a + cost.b * 0 + cost.c * 0 + cost.d * 0
            self.step += 1
        return True

    def run_step(self, cost: CostModel) -> bool:
        start = self.t
        plan: StepPlan = self.call("step", self.policy.step)
        if self.trace is not None:
            self.trace.step(plan, t=start)
        if self.preemption is not None:
            self.preemption.planned(self.step, plan)
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
        self.preempted_last = bool(plan.preempted)
        if self.on_preempt is not None and plan.preempted:
            self.on_preempt(self.step, start * 1e6, plan.preempted)
        self._produce(plan, start, end)
        self.t = end
        self.step += 1
        return bool(plan.batch)

    def _produce(self, plan: StepPlan, start: float, end: float) -> None:
        result, step = self.result, self.step
        for s in plan.batch:
            req = self.live.get(s.rid)
            if req is None:
                raise InvariantError(
                    f"policy {self.policy_name!r} scheduled request {s.rid!r}, which is not live"
                )
            if req.first_dispatch_step < 0:
                req.first_dispatch_step = step
                result.queue_delay.add(start - req.arrival)
                result.queue_delay_steps.add(step - req.arrival_step)
            if not s.samples:
                continue
            result.output_tokens += 1
            req.produced += 1
            req.last_token, req.last_token_step = end, step + 1
            if req.produced == 1:
                req.first_token, req.first_token_step = end, step + 1
                result.ttft.add(end - req.arrival)
                result.ttft_steps.add(step + 1 - req.arrival_step)
        for rid in plan.finished:
            req = self.live.pop(rid, None)
            if req is None:
                raise InvariantError(
                    f"policy {self.policy_name!r} finished {rid!r}, which is not live"
                )
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
    preemption: PreemptionTally | None = None,
    keep_values: bool = False,
) -> SimResult:
    """Run the workload through a request-level ``policy`` (see ``simulate``);
    ``on_preempt`` hears of each step's preemptions, ``preemption`` is fed each step's
    plan and each request's end (what preemption costs)."""
    result = SimResult(policy_name, params, cost, 0, budget=policy.token_budget)
    result.slo_ttft, result.slo_tpot = slo_ttft, slo_tpot
    if keep_values:
        result.keep_values()
    runner = RequestRunner(policy, result, policy_name, trace, on_batch)
    runner.on_preempt = on_preempt
    runner.preemption = preemption
    return run(requests, runner, cost, on_progress)
