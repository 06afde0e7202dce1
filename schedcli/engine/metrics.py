"""Step-based metrics of a replay: waits, service per session, fairness, utilisation."""

from __future__ import annotations

import math
from array import array
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


# A distribution keeps its first EXACT_VALUES values as they are: up to there its figures
# are those of the sorted values. Past it, they go into buckets that split each power of
# two into 2**BUCKET_BITS equal parts, so memory is bounded by the range the values span,
# not by their count (docs/trace-format.md, "What simulate reports").
EXACT_VALUES = 1 << 16
BUCKET_BITS = 12
_SUB = 1 << BUCKET_BITS
_ODD = 1 << 20
_FOLD = 1024  # values summed exactly at a time (the mean's sum)
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


class _Octave:
    """The buckets of one power of two (of one sign): a count, the least and the greatest
    value of each."""

    __slots__ = ("count", "counts", "highs", "lows")

    def __init__(self) -> None:
        self.count = 0
        self.counts = array("q", bytes(8 * _SUB))
        self.lows = array("d", bytes(8 * _SUB))
        self.highs = array("d", bytes(8 * _SUB))


class Distribution:
    """One per-request figure (a latency) over a run: count, mean, p50/p90/p99.

    Exact while it holds ``exact_values`` values or fewer (``keep``: always; every value kept).
    Past that, memory is a few octaves of buckets whatever the count: the count and the mean
    stay exact (the mean is the correctly rounded sum over the count); a percentile is
    exact when the ranks it interpolates between are a bucket's least or greatest value or
    fall in a bucket of one distinct value, and otherwise an estimate within the bucket,
    less than 2**-BUCKET_BITS of the value away; ``approximate()`` names those figures.
    """

    def __init__(self, keep: bool = False, exact_values: int = EXACT_VALUES) -> None:
        self.keep = keep
        self.exact_values = exact_values
        self.values: array[float] = array("d")  # all of them while not bucketed
        self.count = 0
        self.bucketed = False
        self._pending: list[float] = []  # not yet in the exact sum
        self._terms: list[float] = []  # their exact sum is the sum of the values folded
        self._zeros = 0
        self._octaves: dict[int, _Octave] = {}
        self._approximate: list[str] = []

    def add(self, x: float) -> None:
        self.count += 1
        if not self.bucketed:
            self.values.append(x)
            if self.keep or len(self.values) <= self.exact_values:
                return
            self.bucketed = True
            for v in self.values:
                self._bucket(v)
            self.values = array("d")
            return
        self._bucket(x)

    def _bucket(self, x: float) -> None:
        pending = self._pending
        pending.append(x)
        if len(pending) >= _FOLD:
            self._fold()
        if x == 0.0:
            self._zeros += 1
            return
        # Octave keys in the order of their values: negatives, (zero), positives; an
        # infinity (or nan) has a bucket of its own at its end.
        if not math.isfinite(x):
            key = -_ODD if x < 0.0 else _ODD
            index = 0
        else:
            m, e = math.frexp(x)
            if m < 0.0:
                key = -(e + 4096)
                m = -m
            else:
                key = e + 4096
            index = int(m * (2 * _SUB)) - _SUB
        octave = self._octaves.get(key)
        if octave is None:
            octave = self._octaves[key] = _Octave()
        octave.count += 1
        n = octave.counts[index]
        if n == 0 or x < octave.lows[index]:
            octave.lows[index] = x
        if n == 0 or x > octave.highs[index]:
            octave.highs[index] = x
        octave.counts[index] = n + 1

    def _fold(self) -> None:
        """The pending values into the exact sum: terms whose exact sum is the exact sum of
        every value so far (fsum is correctly rounded, so each residue shrinks; it ends)."""
        values = self._pending + self._terms
        terms: list[float] = []
        try:
            while True:
                s = math.fsum(values + [-t for t in terms])
                if s == 0.0:
                    break
                if not math.isfinite(s):
                    terms = [s]
                    break
                terms.append(s)
        except (OverflowError, ValueError):  # infinities or an overflowing sum
            terms = [sum(values)]
        self._terms = terms
        self._pending = []

    def mean(self) -> float | None:
        if not self.count:
            return None
        if not self.bucketed:
            return sum(sorted(self.values)) / self.count
        self._fold()
        return math.fsum(self._terms) / self.count

    def summary(self) -> dict[str, Any]:
        """p50, p90, p99, mean and count; ``approximate`` (the percentiles that are
        estimates) and ``relative_error_below`` (their bound) when there are any."""
        out: dict[str, Any] = {}
        if not self.bucketed:
            values = sorted(self.values)
            for name, q in QUANTILES:
                out[name] = percentile(values, q)
            out["mean"] = sum(values) / len(values) if values else None
            out["count"] = len(values)
            return out
        approximate: list[str] = []
        for name, q in QUANTILES:
            # As percentile(): interpolated between the closest ranks.
            pos = (self.count - 1) * q
            lo = int(pos)
            hi = min(lo + 1, self.count - 1)
            low, low_exact = self._at(lo)
            high, high_exact = self._at(hi)
            out[name] = float(low + (high - low) * (pos - lo))
            if not (low_exact and high_exact):
                approximate.append(name)
        out["mean"] = self.mean()
        out["count"] = self.count
        if approximate:
            out["approximate"] = approximate
            out["relative_error_below"] = 2.0**-BUCKET_BITS
        return out

    def _at(self, rank: int) -> tuple[float, bool]:
        """The value of the given rank (0 the least), and whether it is exact."""
        seen = 0
        zeros_ahead = True
        for key in sorted(self._octaves):
            if key > 0 and zeros_ahead:  # the zeros lie between negatives and positives
                zeros_ahead = False
                if rank < seen + self._zeros:
                    return 0.0, True
                seen += self._zeros
            octave = self._octaves[key]
            if rank >= seen + octave.count:
                seen += octave.count
                continue
            indexes = range(_SUB - 1, -1, -1) if key < 0 else range(_SUB)
            for i in indexes:
                n = octave.counts[i]
                if rank >= seen + n:
                    seen += n
                    continue
                low, high = octave.lows[i], octave.highs[i]
                if low == high or rank == seen:
                    return low, True
                if rank == seen + n - 1:
                    return high, True
                return low + (high - low) * (rank - seen) / (n - 1), False
        return 0.0, True  # a zero, above every negative


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
