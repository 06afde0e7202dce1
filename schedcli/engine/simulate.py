"""Playing the runner: a workload becomes scheduler traffic, simulated time and latencies.

Closed loop: a request's prompt is submitted (as chunks, one group) when it arrives;
dispatching its last chunk yields the first token; each further token is one decode,
submitted once the previous one was dispatched. Simulated time advances by a cost
model per batch and jumps over idle gaps to the next arrival.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..formats.workload import Request
from ..model.errors import InvariantError, UsageError
from ..model.scheduler import Scheduler
from ..model.task import DECODE, PREFILL, Id, Task
from .metrics import jain_index, percentile

Record = dict[str, Any]


@dataclass(frozen=True)
class CostModel:
    """step_seconds = a + b * batch_tokens + c * decodes_in_batch.

    The defaults are round figures for a 7-8B model on one current datacenter GPU:
    5 ms of fixed cost per step, 20 us per token in the batch, 100 us per decode
    (reading that sequence's KV cache).
    """

    a: float = 0.005
    b: float = 0.00002
    c: float = 0.0001

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            value = getattr(self, name)
            if not value >= 0 or value == float("inf"):
                raise UsageError(f"cost model {name} must be a finite number >= 0, not {value}")


class _Live:
    """A request in flight."""

    __slots__ = (
        "arrival",
        "arrival_step",
        "cancelled",
        "first_dispatch",
        "first_dispatch_step",
        "first_token",
        "first_token_step",
        "last_token",
        "last_token_step",
        "output",
        "produced",
        "prompt",
        "sid",
    )

    def __init__(self, req: Request, step: int) -> None:
        self.sid = req.sid
        self.arrival = req.arrival
        self.arrival_step = step
        self.prompt = req.prompt_tokens
        self.output = req.output_tokens
        self.produced = 0
        self.cancelled = False
        self.first_dispatch = -1.0
        self.first_dispatch_step = -1
        self.first_token = -1.0
        self.first_token_step = -1
        self.last_token = -1.0
        self.last_token_step = -1


@dataclass
class SimResult:
    """Per-request outcomes (kept as columns) and run totals."""

    policy: str
    params: dict[str, Any]
    cost: CostModel
    chunk_size: int
    requests: int = 0
    finished: int = 0
    cancelled: int = 0
    rejected: int = 0
    steps: int = 0
    batch_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    output_tokens: int = 0
    start: float = 0.0
    end: float = 0.0
    budget: int | None = None
    queue_delay: list[float] = field(default_factory=list)
    queue_delay_steps: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    ttft_steps: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    tpot_steps: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    e2e_steps: list[float] = field(default_factory=list)
    service_rate: list[float] = field(default_factory=list)
    good: int = 0
    slo_ttft: float | None = None
    slo_tpot: float | None = None

    def summary(self) -> dict[str, Any]:
        span = self.end - self.start
        out: dict[str, Any] = {
            "policy": self.policy,
            "params": self.params,
            "cost_model": asdict(self.cost),
            "chunk_size": self.chunk_size,
            "requests": self.requests,
            "finished": self.finished,
            "cancelled": self.cancelled,
            "rejected": self.rejected,
            "steps": self.steps,
            "simulated_seconds": span,
            "prefill_tokens": self.prefill_tokens,
            "decode_tokens": self.decode_tokens,
            "output_tokens": self.output_tokens,
            "throughput_output_tokens_per_s": self.output_tokens / span if span > 0 else None,
            "throughput_tokens_per_s": self.batch_tokens / span if span > 0 else None,
            "mean_token_utilisation": (
                self.batch_tokens / (self.steps * self.budget)
                if self.budget and self.steps
                else None
            ),
            "jain_fairness_service_rate": jain_index(self.service_rate),
        }
        for key in (
            "queue_delay",
            "queue_delay_steps",
            "ttft",
            "ttft_steps",
            "tpot",
            "tpot_steps",
            "e2e",
            "e2e_steps",
        ):
            values = sorted(getattr(self, key))
            out[key] = {
                "p50": percentile(values, 0.5),
                "p90": percentile(values, 0.9),
                "p99": percentile(values, 0.99),
                "mean": sum(values) / len(values) if values else None,
                "count": len(values),
            }
        if self.slo_ttft is not None or self.slo_tpot is not None:
            out["goodput"] = {
                "slo_ttft": self.slo_ttft,
                "slo_tpot": self.slo_tpot,
                "requests_meeting_slo": self.good,
                "fraction": self.good / self.requests if self.requests else None,
                "requests_per_s": self.good / span if span > 0 else None,
            }
        return out


STUCK_AFTER = 1000
DEFAULT_CHUNK_SIZE = 256


def chunk_size_for(policy: Scheduler) -> int:
    """How the runner chunks prompts for ``policy``: its own chunk limit, if it has one."""
    return int(policy.params().get("max_prefill_chunk_size", DEFAULT_CHUNK_SIZE))


def simulate(
    requests: Iterable[Request],
    policy: Scheduler,
    *,
    policy_name: str,
    params: dict[str, Any],
    chunk_size: int,
    cost: CostModel,
    emit: Callable[[Record], None] | None = None,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    on_batch: Callable[[int, float, float, list[Task], int], None] | None = None,
) -> SimResult:
    """Run the workload through ``policy``; ``emit`` receives the explicit-mode trace.

    ``on_batch(step, start, end, batch, queued)`` sees every dispatched batch in time.
    """
    if chunk_size < 1:
        raise UsageError("chunk size must be >= 1")
    result = SimResult(policy_name, params, cost, chunk_size, budget=policy.token_budget)
    result.slo_ttft, result.slo_tpot = slo_ttft, slo_tpot
    a, b, c = cost.a, cost.b, cost.c
    live: dict[Id, _Live] = {}
    deadlines: list[tuple[float, int, Id]] = []
    arrivals = iter(requests)
    pending = next(arrivals, None)
    if pending is not None:
        result.start = pending.arrival
    t = result.start
    step = 0
    next_tid = 0
    empty_run = 0
    queued = 0  # tasks accepted and not yet dispatched or cancelled
    submit = policy.try_submit
    get_work = policy.get_work

    def finish(req: _Live) -> None:
        result.e2e.append(req.last_token - req.arrival)
        result.e2e_steps.append(req.last_token_step - req.arrival_step)
        span = req.last_token - req.arrival
        result.service_rate.append(req.produced / span if span > 0 else float(req.produced))
        tpot = None
        if req.produced > 1:
            tpot = (req.last_token - req.first_token) / (req.produced - 1)
            result.tpot.append(tpot)
            result.tpot_steps.append(
                (req.last_token_step - req.first_token_step) / (req.produced - 1)
            )
        if req.produced == req.output:
            ttft = req.first_token - req.arrival
            if (slo_ttft is None or ttft <= slo_ttft) and (
                slo_tpot is None or tpot is None or tpot <= slo_tpot
            ):
                result.good += 1

    while True:
        while pending is not None and pending.arrival <= t:
            req = pending
            pending = next(arrivals, None)
            result.requests += 1
            tasks = []
            pos = 0
            prompt = req.prompt_tokens
            while pos < prompt:
                size = min(chunk_size, prompt - pos)
                tasks.append(
                    Task(
                        next_tid,
                        req.sid,
                        PREFILL,
                        size,
                        position=pos,
                        produce_output=pos + size == prompt,
                        priority=req.priority,
                    )
                )
                next_tid += 1
                pos += size
            reason = submit(tasks)
            if emit is not None:
                event: Record = {
                    "op": "submit",
                    "t": t,
                    "tasks": [
                        {
                            "tid": x.tid,
                            "sid": x.sid,
                            "kind": "prefill",
                            "size": x.size,
                            "position": x.position,
                            **({"priority": x.priority} if x.priority else {}),
                        }
                        for x in tasks
                    ],
                }
                if req.meta is not None:
                    event["meta"] = req.meta  # the workload's meta, carried through
                emit(event)
            if reason is not None:
                result.rejected += 1
                continue
            queued += len(tasks)
            live[req.sid] = _Live(req, step)
            if req.cancel_after is not None:
                heapq.heappush(deadlines, (req.arrival + req.cancel_after, req.line, req.sid))
        while deadlines and deadlines[0][0] <= t:
            _, _, sid = heapq.heappop(deadlines)
            victim = live.pop(sid, None)
            if victim is None:
                continue  # finished in time
            queued -= len(policy.cancel(sid))
            if emit is not None:
                emit({"op": "cancel", "t": t, "sid": sid})
            victim.cancelled = True
            result.cancelled += 1
        if not policy.has_work():
            if live:
                raise InvariantError(
                    f"policy {policy_name!r} reports no work while {len(live)} requests wait"
                )
            if pending is None:
                break
            t = pending.arrival
            continue
        batch = get_work()
        if emit is not None:
            emit({"op": "get_work", "step": step, "t": t, "expect": [x.tid for x in batch]})
        if not batch:
            empty_run += 1
            if empty_run >= STUCK_AFTER:
                raise InvariantError(
                    f"policy {policy_name!r}: {STUCK_AFTER} empty batches in a row while work "
                    "is queued: the simulation would never finish"
                )
            step += 1
            continue
        empty_run = 0
        tokens = 0
        decodes = 0
        for x in batch:
            tokens += x.size
            if x.kind is DECODE:
                decodes += 1
        end = t + a + b * tokens + c * decodes
        queued -= len(batch)
        if on_batch is not None:
            on_batch(step, t, end, batch, queued)
        result.batch_tokens += tokens
        result.decode_tokens += decodes
        result.prefill_tokens += tokens - decodes
        new_decodes: list[_Live] = []
        produced_now = 0
        for x in batch:
            req_live = live.get(x.sid)
            if req_live is None:
                raise InvariantError(
                    f"policy {policy_name!r} dispatched task {x.tid} of no live request"
                )
            if req_live.first_dispatch_step < 0:
                req_live.first_dispatch = t
                req_live.first_dispatch_step = step
                result.queue_delay.append(t - req_live.arrival)
                result.queue_delay_steps.append(step - req_live.arrival_step)
            if not x.produce_output:
                continue
            produced_now += 1
            req_live.produced += 1
            req_live.last_token = end
            req_live.last_token_step = step + 1
            if req_live.produced == 1:
                req_live.first_token = end
                req_live.first_token_step = step + 1
                result.ttft.append(end - req_live.arrival)
                result.ttft_steps.append(step + 1 - req_live.arrival_step)
            if req_live.produced >= req_live.output:
                del live[x.sid]
                result.finished += 1
                finish(req_live)
            else:
                new_decodes.append(req_live)
        result.output_tokens += produced_now
        t = end
        step += 1
        for req_live in new_decodes:
            decode_tid = next_tid
            next_tid += 1
            task = Task(decode_tid, req_live.sid, DECODE, 1, produce_output=True)
            reason = submit([task])
            queued += 1
            if emit is not None:
                emit(
                    {
                        "op": "submit",
                        "t": t,
                        "tid": decode_tid,
                        "sid": task.sid,
                        "kind": "decode",
                        "size": 1,
                    }
                )
            if reason is not None:
                raise InvariantError(
                    f"policy {policy_name!r} rejected decode {decode_tid}: {reason}"
                )
        if on_progress is not None and step % 4096 == 0:
            on_progress(result.requests, t)
    result.steps = step
    result.end = t
    return result
