"""Delta debugging over a trace's events, keeping the smallest candidate that fails with
the original's signature."""

from __future__ import annotations

import bisect
import math
import os
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from ...formats.interrupt import Stopped
from ...model.errors import InputError
from .candidates import Candidate, Lines, Ranges
from .failures import Failure, Test, failure_test


class _OutOfTime(Exception):
    pass


class _Shrinker:
    """Tries candidates; keeps the smallest that fails with ``signature``."""

    def __init__(
        self,
        lines: Lines,
        test: Test,
        deadline: float | None,
        progress: Callable[[int, int], None],
    ) -> None:
        self.lines = lines
        self.test = test
        self.path = os.path.join(lines.folder, "candidate.jsonl")
        self.tests = 0
        self.deadline = deadline
        self.progress = progress
        self.signature: tuple[Any, ...] = ()
        self.best = Candidate(Ranges(()))

    def run(self, candidate: Candidate) -> Failure | None:
        self.tests += 1
        with open(self.path, "wb", buffering=1 << 20) as f:
            candidate.write(self.lines, f)
        return self.test(self.path)

    def fails(self, candidate: Candidate) -> bool:
        """Whether ``candidate`` fails the same way; the smallest such is kept as ``best``."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime
        failure = self.run(candidate)
        same = failure is not None and failure.signature == self.signature
        if same and len(candidate) <= len(self.best):
            self.best = candidate
        self.progress(self.tests, len(self.best))
        return same

    def ddmin(self, items: Any, rebuild: Callable[[Any], Candidate]) -> Any:
        """Remove chunks while what is left still fails; halve the chunks when none can go.
        ``items``: anything sliced and added like a list (a list, an array, ``Ranges``)."""
        n = 2
        while len(items) >= 2:
            size = math.ceil(len(items) / n)
            for start in range(0, len(items), size):
                rest = items[:start] + items[start + size :]
                if rest and self.fails(rebuild(rest)):
                    items = rest
                    n = max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(n * 2, len(items))
        return items

    def reduce(self, candidate: Candidate, keep_expects: bool) -> Candidate:
        """Unless ``keep_expects``, the checks of batches other than the failing one
        dropped (while the failure stays the same), then events, then tasks of groups."""
        if not keep_expects:
            stop = candidate.kept.spans[-1][1] if candidate.kept.spans else 0
            expects = self.lines.expects
            checked = expects[: bisect.bisect_left(expects, stop)]
            whole = candidate

            def keeping(kept_checks: Sequence[int]) -> Candidate:
                chosen = set(kept_checks)
                return replace(whole, stripped=array("q", (i for i in checked if i not in chosen)))

            candidate = keeping(self.ddmin(checked, keeping))
        with_expects = candidate
        kept = self.ddmin(candidate.kept, lambda ix: replace(with_expects, kept=ix))
        return self._drop_tasks(replace(candidate, kept=kept))

    def _drop_tasks(self, candidate: Candidate) -> Candidate:
        groups = [
            (i, e)
            for i, raw in candidate.lines(self.lines)
            if b'"tasks"' in raw
            for e in (candidate.event(raw, i),)
            if e.get("op") == "submit" and isinstance(e.get("tasks"), list) and len(e["tasks"]) > 1
        ]
        for i, e in groups:

            def with_tasks(chosen: list[Any], i: int = i, at: Candidate = candidate) -> Candidate:
                return replace(at, tasks={**at.tasks, i: chosen})

            candidate = with_tasks(self.ddmin(e["tasks"], with_tasks))
        return candidate


@dataclass
class Shrunk:
    """What shrinking found: ``best`` among ``lines`` (open until the caller closes them)."""

    lines: Lines
    best: Candidate
    before: int
    tests: int = 0
    signature: tuple[Any, ...] = ()
    out_of_time: bool = False  # stopped at --max-time: the smallest found so far
    interrupted: Stopped | None = None  # stopped by a signal: the smallest found so far

    @property
    def count(self) -> int:
        """Lines in the shrunk trace, the header counted."""
        return len(self.best) + (self.lines.header is not None)

    def write(self, out: IO[bytes]) -> None:
        self.best.write(self.lines, out, canonical=True)


def shrink(
    path: str,
    until: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    max_time: float | None = None,
    keep_expects: bool = False,
    progress: Callable[[int, int], None] = lambda tried, size: None,
    drain: bool = False,
    b_params: Mapping[str, object] | None = None,
) -> Shrunk:
    """The smallest trace found that fails like ``path``. Stopped early (``max_time``, or
    a stop signal), it is the smallest found so far, and ``stopped`` says why. The caller
    closes ``Shrunk.lines``."""
    lines = Lines(path)
    try:
        test = failure_test(until, policy, params, drain, b_params or {})
    except BaseException:
        lines.close()
        raise
    try:
        return _shrink(lines, until, test, max_time, keep_expects, progress)
    except BaseException:
        lines.close()
        raise


def _shrink(
    lines: Lines,
    until: str,
    test: Test,
    max_time: float | None,
    keep_expects: bool,
    progress: Callable[[int, int], None],
) -> Shrunk:
    deadline = None if max_time is None else time.monotonic() + max_time
    shrinker = _Shrinker(lines, test, deadline, progress)
    candidate = Candidate(Ranges([(0, lines.count)] if lines.count else []))
    failure = shrinker.run(candidate)
    if failure is None:
        raise InputError(lines.name, None, f"does not fail --until {until}: nothing to shrink")
    shrinker.signature = failure.signature
    shrinker.best = candidate
    if failure.line > 0:
        # What follows the failing line goes (the header counts as a line): the replay
        # stopped there, so the cut fails the same way without being tried.
        candidate = replace(
            candidate, kept=candidate.kept[: failure.line - (lines.header is not None)]
        )
        shrinker.best = candidate
    before = lines.count + (lines.header is not None)
    result = Shrunk(lines, candidate, before, 0, failure.signature)
    try:
        shrinker.reduce(candidate, keep_expects)
    except _OutOfTime:
        result.out_of_time = True
    except Stopped as e:
        result.interrupted = e
    result.best, result.tests = shrinker.best, shrinker.tests
    if result.interrupted is None:
        shrinker.deadline = None
        if not shrinker.fails(result.best):
            raise InputError(
                lines.name,
                None,
                f"the failure did not reproduce on the final check of the shrunk trace "
                f"(--until {until} is flaky: it fails only sometimes)",
            )
    return result
