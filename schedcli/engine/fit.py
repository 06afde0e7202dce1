"""Fitting simulate's step-time model to a clocked recording.

A step's time is the gap between a get_work and the next one; the model is
``a + b * batch_tokens + c * decodes`` (plus ``d * context_tokens`` when every dispatched
task recorded its position). Every fifth step is held out to measure the fit. Gaps the
model cannot explain (the runner idle, waiting for requests) are reported as outliers and
left out of the fit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..formats.kinds import is_request_trace
from ..formats.requests import RequestReader
from ..formats.requests.schema import Arrive, Schedule, Update
from ..formats.trace import open_trace
from ..model.errors import InputError
from ..model.limits import MAX_SECONDS
from ..model.task import DECODE, Id, Task, id_key

HOLDOUT_EVERY = 5
# A step further than this many median absolute deviations above the first fit is idle.
OUTLIER_MADS = 8.0


@dataclass
class Step:
    tokens: int
    decodes: int
    context: int | None  # None: a task without a position was in the batch
    seconds: float


# A fit explaining less of the held-out steps than this is poor: said loudly, and marked.
POOR_R2 = 0.5
POOR_MAPE = 0.5


@dataclass
class Fit:
    terms: list[str]
    coefficients: dict[str, float]
    steps: int
    fitted: int
    held_out: int
    idle: int
    outliers: int
    mape: float | None
    r2: float | None
    notes: list[str] = field(default_factory=list)

    def poor(self) -> list[str]:
        """Why the fit explains too little of the held-out steps to stand for them (R²
        under POOR_R2, MAPE over POOR_MAPE); empty when it is good enough or unmeasured."""
        why = []
        if self.r2 is not None and self.r2 < POOR_R2:
            why.append(f"R² {self.r2:.3f} < {POOR_R2}")
        if self.mape is not None and self.mape > POOR_MAPE:
            why.append(f"MAPE {self.mape * 100:.0f}% > {POOR_MAPE * 100:.0f}%")
        return why

    def cost_json(self) -> dict[str, Any]:
        """What ``simulate --cost`` reads: the coefficients, and how good they are."""
        return {
            **self.coefficients,
            "fit": {
                "terms": self.terms,
                "steps": self.steps,
                "fitted": self.fitted,
                "held_out": self.held_out,
                "idle_steps": self.idle,
                "outliers": self.outliers,
                "mape": self.mape,
                "r2": self.r2,
                "zero_terms": [t for t in self.terms if self.coefficients[t] == 0.0],
                "quality": "poor" if self.poor() else "ok",
                "poor": self.poor(),
                "notes": self.notes,
            },
        }


def read_steps(paths: Sequence[str]) -> tuple[list[Step], int]:
    """Each recording's steps with their durations, and how many batches were empty."""
    steps: list[Step] = []
    idle = 0
    for path in paths:
        if is_request_trace(path):
            more, empty = _request_steps(path)
            steps += more
            idle += empty
            continue
        queued: dict[tuple[type, Id], Task] = {}
        last: tuple[float, Step] | None = None
        clocked = False
        with open_trace(path) as reader:
            for event in reader:
                if event.op == "submit" and event.tasks:
                    if isinstance(event.meta, dict) and "rejected" in event.meta:
                        continue  # the recorder marks groups the scheduler refused
                    for t in event.tasks:
                        queued[id_key(t.tid)] = t
                    continue
                if event.op != "get_work":
                    continue
                if event.t is None:
                    raise InputError(
                        reader.name, event.line, "get_work has no time: record with clock=True"
                    )
                clocked = True
                step = _step(event.expect or [], queued)
                if last is not None:
                    prev_t, prev = last
                    prev.seconds = _gap(prev_t, event.t, reader.name, event.line)
                    if prev.tokens == 0:
                        idle += 1
                    else:
                        steps.append(prev)
                last = (event.t, step)
        if not clocked:
            raise InputError(path, None, "no get_work with a time: nothing to fit")
    return steps, idle


def _request_steps(path: str) -> tuple[list[Step], int]:
    """A request-level recording's steps, each timed by its ``wall`` (schedule to outputs;
    a split step's is on its update). Decodes and context come from each request's
    computed tokens, followed through the steps (context is left out where prefix caching
    may have skipped some)."""
    steps: list[Step] = []
    idle = 0
    timed = False
    planned: deque[Step] = deque()  # split steps awaiting their update
    state = _Requests()
    with open_trace(path) as reader:
        for _, event in RequestReader(reader):
            kind = type(event)
            if kind is Arrive:
                state.arrive(event)  # type: ignore[arg-type]
                continue
            expect: Any = getattr(event, "expect", None)
            if kind is Update:
                step = planned.popleft() if planned else None
                state.finish(expect.finished if expect is not None else ())
            elif expect is None:
                continue
            else:
                step = state.plan(expect, getattr(event, "sampled", None) is not None)
                if kind is Schedule:
                    planned.append(step)
                    continue
                state.finish(expect.finished)
            wall = getattr(event, "wall", None)
            if step is None or wall is None:
                continue
            timed = True
            if step.tokens == 0:
                idle += 1
            else:
                step.seconds = wall
                steps.append(step)
    if not timed:
        raise InputError(path, None, "no step with a wall time: nothing to fit")
    return steps, idle


class _Requests:
    """Each request's known and computed tokens, as a recording's steps move them."""

    def __init__(self) -> None:
        self.known: dict[tuple[type, Id], list[int]] = {}  # [known, computed, prompt]
        self.cached = False

    def arrive(self, event: Arrive) -> None:
        prompt = len(event.tokens) if event.tokens is not None else event.prompt_tokens or 0
        self.known[id_key(event.rid)] = [prompt, 0, prompt]

    def plan(self, expect: Any, cached: bool) -> Step:
        self.cached = self.cached or cached
        tokens = decodes = context = 0
        for s in expect.batch:
            tokens += s.tokens
            state = self.known.get(id_key(s.rid))
            if state is None:
                continue
            if s.tokens == 1 and state[1] == state[0] - 1 and state[0] > state[2]:
                decodes += 1
            state[1] += s.tokens
            context += state[1]
            if state[1] >= state[0]:
                state[0] += 1  # it samples a token
        for rid in expect.preempted:
            if id_key(rid) in self.known:
                self.known[id_key(rid)][1] = 0
        return Step(tokens, decodes, None if self.cached else context, 0.0)

    def finish(self, finished: Any) -> None:
        for rid in finished:
            self.known.pop(id_key(rid), None)


def _gap(before: float, now: float, name: str, line: int) -> float:
    """Seconds between two get_work calls: finite, not negative, within MAX_SECONDS."""
    if not (math.isfinite(before) and math.isfinite(now)) or not 0 <= now <= MAX_SECONDS:
        raise InputError(name, line, f"t must be between 0 and {MAX_SECONDS:g} seconds, not {now}")
    if now < before:
        raise InputError(name, line, f"t goes back in time, from {before} to {now}")
    return now - before


def _step(expect: list[Id], queued: dict[tuple[type, Id], Task]) -> Step:
    tokens = decodes = context = 0
    positioned = True
    for tid in expect:
        t = queued.pop(id_key(tid), None)
        if t is None:
            continue
        tokens += t.size
        if t.kind is DECODE:
            decodes += 1
        if t.position is None:
            positioned = False
        else:
            context += t.position + t.size
    return Step(tokens, decodes, context if positioned else None, 0.0)


def fit_steps(steps: Sequence[Step], idle: int = 0, name: str = "the recording") -> Fit:
    if len(steps) < 2 * HOLDOUT_EVERY:
        raise InputError(name, None, f"{len(steps)} busy steps: too few to fit")
    with_context = all(s.context is not None for s in steps)
    terms = ["a", "b", "c", "d"] if with_context else ["a", "b", "c"]
    rows = [_features(s, with_context) for s in steps]
    train = [i for i in range(len(steps)) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    test = [i for i in range(len(steps)) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    beta = _least_squares([rows[i] for i in train], [steps[i].seconds for i in train], name)
    residuals = [steps[i].seconds - _dot(beta, rows[i]) for i in train]
    spread = _median([abs(r - _median(residuals)) for r in residuals]) or 1e-12
    keep = [i for i, r in zip(train, residuals, strict=True) if r <= OUTLIER_MADS * spread]
    outliers = len(train) - len(keep)
    if len(keep) < len(terms):
        raise InputError(name, None, f"only {len(keep)} steps are not outliers: too few to fit")
    beta = _least_squares([rows[i] for i in keep], [steps[i].seconds for i in keep], name)
    explained = [i for i in test if steps[i].seconds - _dot(beta, rows[i]) <= OUTLIER_MADS * spread]
    outliers += len(test) - len(explained)
    mape, r2 = _quality(beta, [rows[i] for i in explained], [steps[i].seconds for i in explained])
    notes = [] if with_context else ["no context term: some task in a batch had no position"]
    notes += [
        f"{term} is 0: the best fit with every term >= 0 leaves it out (alone it would be "
        "negative, which no step time can be)"
        for term, value in zip(terms, beta, strict=True)
        if value == 0.0
    ]
    return Fit(
        terms,
        dict(zip(terms, beta, strict=True)),
        len(steps) + idle,
        len(keep),
        len(explained),
        idle,
        outliers,
        mape,
        r2,
        notes,
    )


def fit_recordings(paths: Iterable[str]) -> Fit:
    names = list(paths)
    steps, idle = read_steps(names)
    return fit_steps(steps, idle, ", ".join(names))


def _features(s: Step, with_context: bool) -> list[float]:
    row = [1.0, float(s.tokens), float(s.decodes)]
    if with_context:
        row.append(float(s.context or 0))
    return row


def _dot(beta: Sequence[float], row: Sequence[float]) -> float:
    return sum(b * x for b, x in zip(beta, row, strict=True))


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else 0.0


def _least_squares(rows: Sequence[Sequence[float]], y: Sequence[float], name: str) -> list[float]:
    """Non-negative least squares: the coefficients >= 0 that fit best.

    With at most four terms, exactly: the optimum is the ordinary least-squares solution on
    some subset of the terms (the others 0), so every subset is solved and the best of the
    non-negative solutions kept. Columns are scaled for conditioning.
    """
    k = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    xtx = [[0.0] * k for _ in range(k)]
    xty = [0.0] * k
    yy = 0.0
    for r, target in zip(rows, y, strict=True):
        z = [r[j] / scale[j] for j in range(k)]
        yy += target * target
        for i in range(k):
            xty[i] += z[i] * target
            for j in range(k):
                xtx[i][j] += z[i] * z[j]
    best: tuple[float, list[float]] | None = None
    for subset in _subsets(k):
        try:
            part = _solve([[xtx[i][j] for j in subset] for i in subset], [xty[i] for i in subset])
        except ZeroDivisionError:
            continue  # these terms cannot be told apart: another subset covers the fit
        if any(x < 0 for x in part):
            continue
        beta = [0.0] * k
        for i, x in zip(subset, part, strict=True):
            beta[i] = x
        # Residual sum of squares from the normal equations: y'y - 2 b'X'y + b'X'X b.
        rss = (
            yy
            - 2 * _dot(beta, xty)
            + sum(beta[i] * xtx[i][j] * beta[j] for i in range(k) for j in range(k))
        )
        if best is None or rss < best[0] - 1e-12 * max(yy, 1e-300):
            best = (rss, beta)
    if best is None or not all(math.isfinite(x) for x in best[1]):
        raise InputError(name, None, "the steps do not vary enough to tell the terms apart")
    return [best[1][j] / scale[j] for j in range(k)]


def _subsets(k: int) -> list[list[int]]:
    """Every non-empty subset of range(k), the larger first (ties go to more terms)."""
    subsets = [[j for j in range(k) if mask >> j & 1] for mask in range(1, 1 << k)]
    return sorted(subsets, key=lambda s: (-len(s), s))


def _solve(m: list[list[float]], v: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; ZeroDivisionError when singular."""
    k = len(v)
    a = [[*row, v[i]] for i, row in enumerate(m)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        if not abs(a[pivot][col]) >= 1e-12:
            raise ZeroDivisionError("singular")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, k):
            factor = a[r][col] / a[col][col]
            for c in range(col, k + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * k
    for r in range(k - 1, -1, -1):
        x[r] = (a[r][k] - sum(a[r][c] * x[c] for c in range(r + 1, k))) / a[r][r]
    return x


def _quality(
    beta: Sequence[float], rows: Sequence[Sequence[float]], y: Sequence[float]
) -> tuple[float | None, float | None]:
    """MAPE and R² of the model on held-out steps."""
    if not y:
        return None, None
    predicted = [_dot(beta, r) for r in rows]
    mape = sum(abs(p - t) / t for p, t in zip(predicted, y, strict=True) if t > 0) / len(y)
    mean = sum(y) / len(y)
    total = sum((t - mean) ** 2 for t in y)
    residual = sum((t - p) ** 2 for p, t in zip(predicted, y, strict=True))
    r2 = 1 - residual / total if total > 0 else None
    return mape, r2 if r2 is None or math.isfinite(r2) else None
