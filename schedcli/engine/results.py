"""What a simulation reports: a request in flight, and the run's totals and per-request
figures, each a Distribution (memory follows the requests in flight, not the requests run).
Either level's runner fills one (engine/simulate.py, engine/requests/simulate.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..formats.workload import Request
from .cost import CostModel
from .metrics import Distribution


class Live:
    """A request in flight (either level's runner keeps one per request)."""

    __slots__ = (
        "arrival",
        "arrival_step",
        "cancelled",
        "first_dispatch_step",
        "first_token",
        "first_token_step",
        "last_token",
        "last_token_step",
        "output",
        "priority",
        "produced",
        "prompt",
        "sid",
        "submitted",
        "window_left",
    )

    def __init__(self, req: Request, step: int) -> None:
        self.sid = req.sid
        self.priority = req.priority
        self.submitted = 0  # prompt tokens submitted so far
        self.window_left = 0  # chunks of the last submitted window not yet dispatched
        self.arrival = req.arrival
        self.arrival_step = step
        self.prompt = req.prompt_tokens
        self.output = req.output_tokens
        self.produced = 0
        self.cancelled = False
        self.first_dispatch_step = -1
        self.first_token = -1.0
        self.first_token_step = -1
        self.last_token = -1.0
        self.last_token_step = -1


# The per-request figures a simulation summarises, each a Distribution.
FIGURES = (
    "queue_delay",
    "queue_delay_steps",
    "ttft",
    "ttft_steps",
    "tpot",
    "tpot_steps",
    "e2e",
    "e2e_steps",
)


@dataclass
class SimResult:
    """Run totals and each per-request figure's distribution: memory follows the requests
    in flight, not the requests run (engine/metrics.py, Distribution); ``keep_values``
    keeps every value too (report draws them)."""

    policy: str
    params: dict[str, Any]
    cost: CostModel
    chunk_size: int
    requests: int = 0
    finished: int = 0
    cancelled: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    batch_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    output_tokens: int = 0
    start: float = 0.0
    end: float = 0.0
    budget: int | None = None
    queue_delay: Distribution = field(default_factory=Distribution)
    queue_delay_steps: Distribution = field(default_factory=Distribution)
    ttft: Distribution = field(default_factory=Distribution)
    ttft_steps: Distribution = field(default_factory=Distribution)
    tpot: Distribution = field(default_factory=Distribution)
    tpot_steps: Distribution = field(default_factory=Distribution)
    e2e: Distribution = field(default_factory=Distribution)
    e2e_steps: Distribution = field(default_factory=Distribution)
    # Jain's index of the service rates, summed as they come (in finishing order, as a
    # list of them would be summed).
    rates: int = 0
    rate_sum: float = 0.0
    rate_squares: float = 0.0
    good: int = 0
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    # Request-level policies: requests preempted (counted each time); the runner does
    # not chunk for them (chunk_size 0 is left out of the summary).
    preemptions: int | None = None

    def finish(self, req: Live) -> None:
        """A request produced its last token (or gave up): its latencies and SLO verdict."""
        self.e2e.add(req.last_token - req.arrival)
        self.e2e_steps.add(req.last_token_step - req.arrival_step)
        span = req.last_token - req.arrival
        rate = req.produced / span if span > 0 else float(req.produced)
        self.rates += 1
        self.rate_sum += rate
        self.rate_squares += rate * rate
        tpot = None
        if req.produced > 1:
            tpot = (req.last_token - req.first_token) / (req.produced - 1)
            self.tpot.add(tpot)
            self.tpot_steps.add((req.last_token_step - req.first_token_step) / (req.produced - 1))
        if req.produced == req.output:
            ttft = req.first_token - req.arrival
            slo_ttft, slo_tpot = self.slo_ttft, self.slo_tpot
            if (slo_ttft is None or ttft <= slo_ttft) and (
                slo_tpot is None or tpot is None or tpot <= slo_tpot
            ):
                self.good += 1

    def keep_values(self) -> None:
        """Keep every value of every figure (before the run): its summary is exact
        whatever the count, and ``figure(key).values`` lists them."""
        for key in FIGURES:
            self.figure(key).keep = True

    def figure(self, key: str) -> Distribution:
        d: Distribution = getattr(self, key)
        return d

    def jain_fairness(self) -> float | None:
        """Jain's index over the finished requests' service rates (metrics.jain_index)."""
        if not self.rates:
            return None
        if self.rate_squares == 0:
            return 1.0
        return self.rate_sum * self.rate_sum / (self.rates * self.rate_squares)

    def summary(self) -> dict[str, Any]:
        span = self.end - self.start
        out: dict[str, Any] = {
            "policy": self.policy,
            "params": self.params,
            "cost_model": self.cost.as_dict(),
        }
        if self.chunk_size:
            out["chunk_size"] = self.chunk_size
        out |= {
            "requests": self.requests,
            "finished": self.finished,
            "cancelled": self.cancelled,
            "rejected": self.rejected,
            "rejected_by_reason": self.rejected_by_reason,
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
            "jain_fairness_service_rate": self.jain_fairness(),
        }
        if self.preemptions is not None:
            out["preemptions"] = self.preemptions
        for key in FIGURES:
            out[key] = self.figure(key).summary()
        if self.slo_ttft is not None or self.slo_tpot is not None:
            out["goodput"] = {
                "slo_ttft": self.slo_ttft,
                "slo_tpot": self.slo_tpot,
                "requests_meeting_slo": self.good,
                "fraction": self.good / self.requests if self.requests else None,
                "requests_per_s": self.good / span if span > 0 else None,
            }
        return out


__all__ = ["FIGURES", "Live", "SimResult"]
