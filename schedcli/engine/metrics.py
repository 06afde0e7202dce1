"""Step-based metrics of a replay: waits, service per session, fairness, utilisation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.task import Id, Task


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one gets everything."""
    xs = list(values)
    if not xs:
        return None
    total = sum(xs)
    squares = sum(x * x for x in xs)
    if squares == 0:
        return 1.0
    return total * total / (len(xs) * squares)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


@dataclass
class _Session:
    served_tokens: int = 0
    wait_sum: int = 0
    dispatched: int = 0
    pending: int = 0


class StepMetrics:
    """Collects per-task waits (in steps, submit to dispatch) and per-session service.

    Memory: one entry per queued task and one small record per session seen.
    """

    def __init__(self, budget: int | None = None, *, waits_known: bool = True) -> None:
        self.budget = budget
        # False when only dispatches are seen (a dump): waits cannot be known.
        self.waits_known = waits_known
        # tid -> the step a queued task was accepted before (a tid is unique among queued
        # tasks: the ledger sees to it before an observer hears of one).
        self._submitted: dict[Id, int] = {}
        # By sid: ids are ints and strings only, so 1 and "1" are two keys.
        self._sessions: dict[Id, _Session] = {}
        self.steps = 0
        self.last_step = -1
        self.tokens = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.peak_tokens = 0
        self.wait_sum = 0
        self.wait_max = 0
        self.longest_wait: tuple[Id, Id, int] | None = None  # (tid, sid, dispatch step)
        self.dispatched_count = 0
        self.dropped_count = 0

    def _session(self, sid: Id) -> _Session:
        s = self._sessions.get(sid)
        if s is None:
            s = self._sessions[sid] = _Session()
        return s

    def accepted(self, tasks: list[Task], step: int) -> None:
        for t in tasks:
            self._submitted[t.tid] = step
            self._session(t.sid).pending += 1

    def dispatched(self, batch: list[Task], step: int) -> None:
        self.steps += 1
        if batch:  # an empty batch drains nothing: a trace's later get_work calls do not count
            self.last_step = step
        tokens = 0
        for t in batch:
            submitted = self._submitted.pop(t.tid, step)
            wait = step - submitted
            self.wait_sum += wait
            if wait > self.wait_max or self.longest_wait is None:
                self.wait_max = wait
                self.longest_wait = (t.tid, t.sid, step)
            s = self._session(t.sid)
            s.pending = max(0, s.pending - 1)
            s.wait_sum += wait
            s.dispatched += 1
            s.served_tokens += t.size
            tokens += t.size
            if t.is_decode:
                self.decode_tokens += t.size
            else:
                self.prefill_tokens += t.size
        self.dispatched_count += len(batch)
        self.tokens += tokens
        self.peak_tokens = max(self.peak_tokens, tokens)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        pass  # counted by the replay's totals

    def dropped(self, tasks: list[Task], step: int) -> None:
        for t in tasks:
            self._submitted.pop(t.tid, None)
            self._session(t.sid).pending -= 1
        self.dropped_count += len(tasks)

    def worst_session(self) -> Id | None:
        """The served session with the longest mean wait (the first of equals)."""
        worst: tuple[float, Id] | None = None
        for sid, s in self._sessions.items():
            if s.dispatched and (worst is None or s.wait_sum / s.dispatched > worst[0]):
                worst = (s.wait_sum / s.dispatched, sid)
        return worst[1] if worst is not None else None

    def session_mean_waits(self) -> list[float]:
        """Each served session's mean wait in steps, in the order sessions appeared."""
        return [s.wait_sum / s.dispatched for s in self._sessions.values() if s.dispatched]

    def summary(self) -> dict[str, Any]:
        waits = self.session_mean_waits()
        known = self.waits_known and self.dispatched_count > 0
        # Service across the sessions that wanted it: served ones, and ones still
        # waiting at the end. A session cancelled before any service chose to leave.
        served = [
            float(s.served_tokens)
            for s in self._sessions.values()
            if s.served_tokens or s.pending > 0
        ]
        return {
            "steps": self.steps,
            # The step after the last batch that ran anything; None while work is left.
            "steps_to_drain": (
                None if any(x.pending > 0 for x in self._sessions.values()) else self.last_step + 1
            ),
            "dispatched": self.dispatched_count,
            "cancelled": self.dropped_count,
            "mean_tokens_per_batch": self.tokens / self.steps if self.steps else 0.0,
            "mean_utilisation": (
                self.tokens / (self.steps * self.budget) if self.budget and self.steps else None
            ),
            "mean_wait_steps": self.wait_sum / self.dispatched_count if known else None,
            "max_wait_steps": self.wait_max if known else None,
            "worst_session_mean_wait_steps": max(waits) if known and waits else None,
            "worst_session": self.worst_session() if known else None,
            "longest_wait": (
                {
                    "tid": lw[0],
                    "sid": lw[1],
                    "dispatched_at_step": lw[2],
                    "waited_steps": self.wait_max,
                }
                if known and (lw := self.longest_wait) is not None
                else None
            ),
            "jain_fairness": jain_index(served),
            "sessions": len(self._sessions),
        }
