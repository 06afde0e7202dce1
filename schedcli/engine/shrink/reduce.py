"""The shrinking passes (windows, checks, sessions, steps, lines, groups) and the delta
debugging under them, keeping the smallest candidate that fails with the original's
signature."""

from __future__ import annotations

import bisect
import math
import os
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

import orjson

from ...model.errors import InputError, Option, UsageError
from ...model.task import id_key
from ...streams.interrupt import Stopped
from ..levels.task.states import Taken
from .bounded import Abandoned, Worker, can_bound
from .candidates import HELD, SMALL, Candidate, Lines, Ranges
from .failures import Failure, Test, failure_test, refusal
from .focus import Queue, queues_at, window, window_steps
from .stated import (
    State,
    encode,
    ids_named,
    reduce_state,
    states_at,
    window_from,
    with_state,
)
from .units import Keeping, Units, free, units_of

# The queue at some steps of a trace (``focus.queues_at``, its policy bound).
Observe = Callable[[str, list[int]], dict[int, Queue] | None]
# The state line before some steps' get_work (``stated.states_at``, its policy bound).
StatesAt = Callable[[str, list[int]], dict[int, Taken] | None]


# At most this many items, delta debugging tries each alone (``_Shrinker._singles``).
FEW = 32
# Lines, once sessions and steps are cut, are tried one at a time up to this many: few of
# those left can go, and they go one by one (a stateful policy's schedule shifts with each).
FEW_LINES = 512
# The trace's first replay (which finds the failure) and the final check of the shrunk
# trace may run this long past --max-time (a small trace's replay takes milliseconds):
# the whole run ends by then.
GRACE = 2.0


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
        observe: Observe | None = None,
        bounded: bool = False,
        states: StatesAt | None = None,
    ) -> None:
        self.lines = lines
        self.observe = observe
        self.states = states
        self.retired: list[Lines] = []  # copies left behind by a stated window (closed last)
        # The trace is no longer than the plain window at its failing step: no stated one.
        self.plain_enough = False
        self.queued_sessions: set[Any] | None = None  # at the failing step, once known
        self._found: tuple[tuple[Candidate, frozenset[Any]], Units] | None = None
        self.test = test
        self.path = os.path.join(lines.folder, "candidate.jsonl")
        self.tests = 0
        self.deadline = deadline  # no candidate is started after it
        # A replay still running at ``until`` is abandoned (``bounded``: each runs in a
        # worker process, which is killed; a policy's endless loop, Python or C++, cannot
        # hold the run past it). None: replayed here, unbounded.
        self.until = deadline
        self.worker = Worker(self._replay) if bounded and deadline is not None else None
        self.progress = progress
        self.signature: tuple[Any, ...] = ()
        self.best = Candidate(Ranges(()))

    def write(self, candidate: Candidate) -> None:
        with open(self.path, "wb", buffering=1 << 20) as f:
            candidate.write(self.lines, f)

    def run(self, candidate: Candidate) -> Failure | None:
        self.tests += 1
        answer: Failure | None = self._ask(("test", candidate))
        return answer

    def _ask(self, job: tuple[Any, ...]) -> Any:
        """``job``'s answer: replayed here, or in the worker until ``until``."""
        if self.worker is None or self.until is None:
            return self._replay(job)
        return self.worker.ask(job, self.until)

    def _replay(self, job: tuple[Any, ...]) -> Any:
        """A candidate's failure (``("test", candidate)``) or the queues a watched replay
        of it sees (``("observe", candidate, steps)``)."""
        kind, candidate, *rest = job
        if kind == "data":  # a trace held whole (a stated window, a state reduced)
            return self.test(self.path, candidate)
        if kind == "states":
            assert self.states is not None
            self.write(candidate)
            return self.states(self.path, *rest)
        if kind == "observe":
            assert self.observe is not None
            self.write(candidate)
            return self.observe(self.path, *rest)
        if len(candidate) <= SMALL and self.lines.bound(candidate.kept) <= HELD:
            return self.test(self.path, candidate.data(self.lines))
        self.write(candidate)
        return self.test(self.path, None)

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

    def data_fails(self, data: bytes) -> bool:
        """Whether the trace ``data`` fails the same way (``best`` is not changed: it is
        a trace of the copy's lines)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime
        self.tests += 1
        failure: Failure | None = self._ask(("data", data))
        self.progress(self.tests, len(self.best))
        return failure is not None and failure.signature == self.signature

    def ddmin(
        self,
        items: Any,
        rebuild: Callable[[Any], Any],
        few: int = 0,
        fails: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Remove chunks while what is left still fails; halve the chunks when none can go.
        ``items``: anything sliced and added like a list (a list, an array, ``Ranges``).
        At most ``few`` items (``FEW`` unless given) are tried one at a time instead: what
        is left of a trace by then is mostly needed, and chunks would fail in turn.
        ``fails``: the test of what ``rebuild`` makes (``self.fails``, of a candidate)."""
        test = fails or self.fails
        if len(items) <= (few or FEW):
            return self._singles(items, rebuild, test)
        n = 2
        while len(items) >= 2:
            size = math.ceil(len(items) / n)
            for start in range(0, len(items), size):
                rest = items[:start] + items[start + size :]
                if rest and test(rebuild(rest)):
                    items = rest
                    n = max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(n * 2, len(items))
        return items

    def _singles(
        self, items: Any, rebuild: Callable[[Any], Any], fails: Callable[[Any], bool]
    ) -> Any:
        """Each item dropped alone, first to last, while what is left fails; again until
        a round drops none (then no single item can go)."""
        dropped = True
        while dropped and len(items) >= 2:
            dropped, k = False, 0
            while k < len(items):
                rest = items[:k] + items[k + 1 :]
                if rest and fails(rebuild(rest)):
                    items, dropped = rest, True
                else:
                    k += 1
        return items

    def reduce(self, candidate: Candidate, failure: Failure, keep_expects: bool) -> None:
        """From the failing step back (``focus``), then by what the trace is made of:
        the checks of other batches, sessions, whole steps, get_works, clears; then lines,
        and the tasks of groups (lines once more if that let any go)."""
        self.queued_sessions = set(failure.present) or None
        # The window at the failing step, plain (its queue's submits: the most readable);
        # else, where the policy has snapshots, one that begins from its state there; else
        # plain windows further back.
        stated = None
        nearest = self.focus(candidate, failure, keep_expects, nearest=True)
        if nearest == candidate and not self.plain_enough:
            stated = self.from_state(candidate, failure, keep_expects)
            if stated is None:
                nearest = self.focus(candidate, failure, keep_expects)
            else:
                nearest, failure = stated
        candidate = nearest
        self._passes(candidate, failure, keep_expects)
        # A stated window: its state reduced, then its lines again, until neither changes
        # (the result is 1-minimal in both).
        while stated is not None:
            stated = self._reduce_state(failure)
            if stated is not None:
                whole = stated[0]
                self._passes(*stated, keep_expects)
                if self.best == whole:
                    break  # no line could go: the state, reduced with them, is as it was

    def _passes(self, candidate: Candidate, failure: Failure, keep_expects: bool) -> None:
        """Every pass after the windows, on ``candidate``."""
        if not keep_expects:
            candidate = self._strip_expects(candidate)
        # What the failing check expects is needed while it is the only check: with
        # another, a candidate could fail the same way there instead.
        needs = failure.needs if len(self._checks(candidate)) == 1 else frozenset()
        found = self._units_of(candidate, needs)
        candidate = self._units(candidate, free(found.sessions, found.pinned), self.queued_sessions)
        found = self._units_of(candidate, needs)
        candidate = self._units(candidate, free(found.windows, found.pinned))
        found = self._units_of(candidate, needs)
        candidate = self._units(candidate, {i: (i,) for i in found.steps})
        candidate = self._units(candidate, {i: (i,) for i in found.clears})
        candidate = self._lines(candidate, self._units_of(candidate, needs).pinned)
        fewer = self._drop_tasks(candidate)
        if fewer != candidate:
            self._lines(fewer, self._units_of(fewer, needs).pinned)

    def _units_of(self, candidate: Candidate, needs: frozenset[Any]) -> Units:
        """``units_of``, the candidate read again only if it changed since the last time
        (a pass that drops nothing leaves an equal one)."""
        if self._found is None or self._found[0] != (candidate, needs):
            self._found = ((candidate, needs), units_of(candidate, self.lines, needs))
        return self._found[1]

    def focus(
        self, candidate: Candidate, failure: Failure, keep_expects: bool, nearest: bool = False
    ) -> Candidate:
        """The smallest window before the failing step that fails the same way, trying
        the nearest first (``focus.py``; ``nearest``: the one at the failing step only);
        ``candidate`` if none does or none can be made. The observed replay counts as a
        test."""
        if failure.step < 0 or self.observe is None:
            return candidate
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime
        self.tests += 1
        steps = [failure.step] if nearest else window_steps(failure.step)
        seen: dict[int, Queue] | None = self._ask(("observe", candidate, steps))
        if seen is None:
            return candidate
        if failure.step in seen:
            self.queued_sessions = {id_key(sid) for _, _, sid in seen[failure.step].tasks}
        if failure.line > 0:
            end = self.lines.index(failure.line)
        elif failure.step in seen:
            end = self.lines.index(seen[failure.step].line)
        else:
            return candidate
        for step in steps:
            if step in seen:
                smaller = window(self.lines, seen[step], end, keep_expects)
                if smaller is None:
                    return candidate
                if len(smaller) >= len(candidate):
                    # The trace is no longer than its window: plain as it is.
                    self.plain_enough = nearest
                    return candidate
                if self.fails(smaller):
                    return smaller
        return candidate

    # --- windows that begin from the policy's state (stated.py) ---------------------------

    def from_state(
        self, candidate: Candidate, failure: Failure, keep_expects: bool
    ) -> tuple[Candidate, Failure] | None:
        """The nearest stated window before the failing step that fails the same way,
        adopted as the trace shrunk from here on (``_adopt``); None where the policy has
        no snapshots, the trace no get_work to cut at, or no such window fails so."""
        if failure.step < 0 or self.states is None:
            return None
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime
        self.tests += 1
        steps = window_steps(failure.step)
        taken: dict[int, Taken] | None = self._ask(("states", candidate, steps))
        if not taken:
            return None
        if failure.line > 0:
            end = self.lines.index(failure.line)
        elif failure.step in taken:
            end = self.lines.index(taken[failure.step].line)
        else:
            return None
        for step in steps:
            if step in taken:
                data = window_from(self.lines, taken[step], end, keep_expects)
                if data is not None and self.data_fails(data):
                    return self._adopt(data)
        return None

    def _adopt(self, data: bytes) -> tuple[Candidate, Failure]:
        """The trace ``data`` becomes the one shrunk from here (a copy of its own, and a
        worker that reads it), whole: the best so far."""
        path = os.path.join(self.lines.folder, "stated.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        lines = Lines(path)
        self.retired.append(self.lines)
        self.lines, self._found = lines, None
        self.path = os.path.join(lines.folder, "candidate.jsonl")
        if self.worker is not None:
            self.worker.close()
            self.worker = Worker(self._replay)
        whole = Candidate(Ranges([(0, lines.count)] if lines.count else []))
        self.best = whole
        failure = self.run(whole)
        assert failure is not None and failure.signature == self.signature  # as it just did
        return whole, failure

    def _reduce_state(self, failure: Failure) -> tuple[Candidate, Failure] | None:
        """The state line of the best trace reduced (``stated.reduce_state``) and adopted;
        None where it is gone or nothing of it could go."""
        best = self.best
        if not best.kept.spans or best.kept.spans[0][0] != 0:
            return None
        raw = next(best.lines(self.lines))[1]
        line: State = orjson.loads(raw)
        if line.get("op") != "state":
            return None
        rest = replace(best, kept=best.kept[1:])

        def fails(state_line: State) -> bool:
            return self.data_fails(with_state(self.lines, rest, encode(state_line)))

        def ddmin(items: Any, rebuild: Callable[[Any], Any], few: int) -> Any:
            return self.ddmin(items, rebuild, few, fails=fails)

        # While the failing check is the only one, the tasks it expects must be queued.
        needs = failure.needs if len(self._checks(best)) == 1 else frozenset()
        smaller = reduce_state(line, fails, ddmin, needs, ids_named(self.signature))
        if smaller == line:
            return None
        return self._adopt(with_state(self.lines, rest, encode(smaller)))

    def _checks(self, candidate: Candidate) -> list[int]:
        """The lines of ``candidate`` whose expect it keeps."""
        expects, gone = self.lines.expects, set(candidate.stripped)
        return [
            i
            for a, b in candidate.kept.spans
            for i in expects[bisect.bisect_left(expects, a) : bisect.bisect_left(expects, b)]
            if i not in gone
        ]

    def _strip_expects(self, candidate: Candidate) -> Candidate:
        """The checks of batches other than the failing one dropped, while the failure
        stays the same: all at once first."""
        checked = self._checks(candidate)
        whole, every = candidate, tuple(checked)

        def keeping(kept_checks: Sequence[int]) -> Candidate:
            chosen = set(kept_checks)
            dropped = sorted({*whole.stripped, *(i for i in every if i not in chosen)})
            return replace(whole, stripped=array("q", dropped))

        if len(checked) > 1 and self.fails(keeping(checked[-1:])):
            checked = checked[-1:]
        return keeping(self.ddmin(checked, keeping))

    def _units(
        self,
        candidate: Candidate,
        units: Mapping[Any, Sequence[int]],
        first: set[Any] | None = None,
        few: int = 0,
    ) -> Candidate:
        """Units of the candidate dropped while it fails the same way: those not in
        ``first`` all at once first, then by delta debugging."""
        if not units:
            return candidate
        keeping = Keeping(candidate, self.lines, units)
        keys = list(units)
        if first is not None:
            present = [k for k in keys if k in first]
            if len(present) < len(keys) and self.fails(keeping(present)):
                keys = present
        return keeping(self.ddmin(keys, keeping, few))

    def _lines(self, candidate: Candidate, pinned: set[int]) -> Candidate:
        """Lines dropped by delta debugging; the ``pinned`` ones (of a small candidate)
        are not tried."""
        if pinned and len(candidate) <= SMALL:
            lines = {i: (i,) for i in candidate.kept if i not in pinned}
            candidate = self._units(candidate, lines, few=FEW_LINES)
            lines = {i: (i,) for i in candidate.kept if i not in pinned}
            return self._units(candidate, lines)
        kept = self.ddmin(candidate.kept, lambda ix: replace(candidate, kept=ix), FEW_LINES)
        kept = self.ddmin(kept, lambda ix: replace(candidate, kept=ix))
        return replace(candidate, kept=kept)

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
    # A candidate's replay still running at --max-time, abandoned after so many seconds.
    abandoned: float | None = None
    # The final check abandoned at --max-time: ``best`` failed the same way when it was
    # tried, and was not replayed again.
    unchecked: bool = False
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
    closes ``Shrunk.lines``. ``max_time`` bounds the whole run, reading the trace included:
    a replay still running then is abandoned (``bounded.py``)."""
    began = time.monotonic()
    lines = Lines(path)
    try:
        test = failure_test(until, policy, params, drain, b_params or {})
    except BaseException:
        lines.close()
        raise
    try:
        observe: Observe | None = None
        if not until.startswith("cmd:"):

            def observe(path: str, steps: list[int]) -> dict[int, Queue] | None:
                return queues_at(path, policy, params, steps, drain)

        def states(path: str, steps: list[int]) -> dict[int, Taken] | None:
            return states_at(path, policy, params, steps)

        deadline = None if max_time is None else began + max_time
        try:
            return _shrink(lines, until, test, deadline, keep_expects, progress, observe, states)
        except _NoFailure:
            # Said as what it is when the trace itself is bad input (a candidate's bad input
            # only means it does not fail): a refused header policy is not "nothing to shrink".
            refused = None if until.startswith("cmd:") else refusal(path, policy, params, drain)
            if refused is not None:
                raise refused from None
            raise InputError(
                lines.name, None, ("does not fail ", Option("until", until), ": nothing to shrink")
            ) from None
    except BaseException:
        lines.close()
        raise


def _shrink(
    lines: Lines,
    until: str,
    test: Test,
    deadline: float | None,
    keep_expects: bool,
    progress: Callable[[int, int], None],
    observe: Observe | None,
    states: StatesAt | None = None,
) -> Shrunk:
    shrinker = _Shrinker(
        lines, test, deadline, progress, observe, bounded=can_bound(), states=states
    )
    ok = False
    try:
        result = _search(shrinker, lines, until, keep_expects)
        ok = True
        return result
    finally:
        if shrinker.worker is not None:
            shrinker.worker.close()
        # The copies a stated window left behind: the result's is the last (the caller
        # closes it); on an error the caller closes ``lines``, the first.
        for old in shrinker.retired if ok else shrinker.retired[1:]:
            old.close()
        if not ok and shrinker.lines is not lines:
            shrinker.lines.close()


class _NoFailure(Exception):
    """The trace itself does not fail as asked."""


def _search(shrinker: _Shrinker, lines: Lines, until: str, keep_expects: bool) -> Shrunk:
    """Under a deadline, the search's replays end by it; the first (which finds the
    failure) and the final check, which a result needs, by GRACE after it."""
    deadline = shrinker.deadline
    end = None if deadline is None else deadline + GRACE
    candidate = Candidate(Ranges([(0, lines.count)] if lines.count else []))
    shrinker.until = end
    try:
        failure = shrinker.run(candidate)
    except Abandoned as e:
        raise UsageError(
            Option("max_time"),
            f": the replay of {lines.name} itself was still running at the time "
            f"limit (abandoned after {e.seconds:.1f} s): no failure found to shrink",
        ) from None
    shrinker.until = deadline
    if failure is None:
        raise _NoFailure
    shrinker.signature = failure.signature
    shrinker.best = candidate
    if failure.line > 0:
        # What follows the failing line goes (the header counts as a line): the replay
        # stopped there, so the cut fails the same way without being tried.
        candidate = replace(candidate, kept=candidate.kept[: lines.index(failure.line) + 1])
        shrinker.best = candidate
    before = lines.count + (lines.header is not None)
    result = Shrunk(lines, candidate, before, 0, failure.signature)
    try:
        shrinker.reduce(candidate, failure, keep_expects)
    except _OutOfTime:
        result.out_of_time = True
    except Abandoned as e:
        result.out_of_time, result.abandoned = True, e.seconds
    except Stopped as e:
        result.interrupted = e
    result.lines, result.best, result.tests = shrinker.lines, shrinker.best, shrinker.tests
    if result.interrupted is None:
        shrinker.deadline, shrinker.until = None, end
        try:
            same = shrinker.fails(result.best)
        except Abandoned:
            result.unchecked, same = True, True
        if not same:
            raise InputError(
                lines.name,
                None,
                (
                    "the failure did not reproduce on the final check of the shrunk trace (",
                    Option("until", until),
                    " is flaky: it fails only sometimes)",
                ),
            )
    return result
