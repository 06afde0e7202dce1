"""Fitting simulate's step-time model to a clocked recording.

A step's time is the gap between a get_work and the next one; the model is
``a + b * batch_tokens + c * decodes`` (plus ``d * context_tokens`` when every dispatched
task recorded its position). Every fifth step is held out to measure the fit. Gaps the
model cannot explain (the runner idle, waiting for requests) are reported as outliers and
left out of the fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.errors import InputError
from .levels.facts import TimedStep
from .levels.table import level_of_file

HOLDOUT_EVERY = 5
# A step further than this many median absolute deviations above the first fit is idle.
OUTLIER_MADS = 8.0


Step = TimedStep  # a busy step: its tokens, decodes, context, and seconds

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
    """Each recording's steps with their durations, and how many batches were empty (each
    read by its level)."""
    steps: list[Step] = []
    idle = 0
    for path in paths:
        more, empty = level_of_file(path).timed_steps(path)
        steps += more
        idle += empty
    return steps, idle


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
