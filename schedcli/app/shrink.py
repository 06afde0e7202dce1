"""``schedcli shrink``: a failing trace reduced to a small one that fails the same way.

Delta debugging (ddmin) over the trace's events, then over the tasks of each group. A
candidate counts only if it fails with the original's *signature*: the same tids missing
from and extra in the first mismatching batch (and every tid it expects was queued), the
same contract message, the same first divergence of two policies, or the same exit code
of a command. Events are only ever dropped, never edited: an ``expect`` stays as recorded,
so a cut cannot fail merely because it lost what its recording said. A failure that names
its line (a check or a contract break) first cuts everything after that line.
"""

from __future__ import annotations

import bisect
import math
import os
import re
import shlex
import subprocess
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from rich.console import Console

from ..engine.diff import Config, diff_trace
from ..engine.replay import ExpectMismatch, Mismatch, OutcomeMismatch
from ..engine.requests.replay import RequestExpectMismatch, RequestMismatch
from ..engine.run import open_replay
from ..formats.interrupt import Stopped
from ..formats.output import atomic_output
from ..formats.source import display_name
from ..model.errors import InputError, InvariantError, SchedcliError, UsageError
from ..model.records import discard
from ..model.task import id_key, ids_only_in
from .candidates import Candidate, Lines, Ranges
from .progress import ProgressBar

Event = dict[str, Any]


@dataclass(frozen=True)
class Failure:
    """How a candidate failed: the line to cut after (0: none) and what identifies it."""

    line: int
    signature: tuple[Any, ...]


Test = Callable[[str], Failure | None]


def failure_test(until: str, policy: str | None, params: Mapping[str, object]) -> Test:
    """How a candidate (a trace of either level) fails: ``check``, ``contract``,
    ``diff:POLICY`` or ``cmd:SHELL``."""
    if until == "check":
        return lambda path: _replay_fails(path, policy, params, check=True)
    if until == "contract":
        return lambda path: _replay_fails(path, policy, params, check=False)
    if until.startswith("diff:") and until[5:]:
        other = until[5:]
        return lambda path: _parts_ways(path, Config(policy, dict(params)), Config(other, {}))
    if until.startswith("cmd:") and until[4:].strip():
        command = until[4:]
        return lambda path: _command_fails(command, path)
    raise UsageError(f"--until {until!r}: one of check, contract, diff:POLICY, cmd:'SHELL COMMAND'")


def _parts_ways(path: str, a: Config, b: Config) -> Failure | None:
    try:
        result = diff_trace(path, a, b)
    except SchedcliError:
        return None
    first = result.first
    if first is None:
        return None if result.identical else Failure(0, ("diff", "events"))
    only_a, only_b = first.moved()
    return Failure(0, ("diff", _keys(only_a), _keys(only_b), first.fields is not None))


def _command_fails(command: str, path: str) -> Failure | None:
    run = subprocess.run(
        command.replace("{}", shlex.quote(path)),
        shell=True,
        env={**os.environ, "TRACE": path},
        capture_output=True,
        check=False,
    )
    return Failure(0, ("cmd", run.returncode)) if run.returncode != 0 else None


def _keys(ids: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(sorted((id_key(x) for x in ids), key=repr))


# A number in a contract message that is not an id: a count, which a smaller trace changes.
_COUNT = re.compile(r"(?<!task )(?<!tid )(?<!chunk )(?<!session )(?<!cancel\()\b\d+\b")
# The tasks a contract message lists as examples (the lost ones, say): a smaller trace
# loses others, the same way.
_TASKS = re.compile(r" \(tasks: [^)]*\)")
_CONTRACT = re.compile(r"broke the Scheduler contract at step \d+ \(([^)]*)\): (.*)", re.S)


def _replay_fails(
    path: str, policy: str | None, params: Mapping[str, object], *, check: bool
) -> Failure | None:
    try:
        with open_replay(
            path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
        ) as opened:
            opened.run(opened.replayer(discard, check=check))
    except ExpectMismatch as e:
        return _batch_differs(e.mismatch)
    except RequestExpectMismatch as e:
        return _step_differs(e.mismatch)
    except OutcomeMismatch as e:
        return Failure(e.line, ("outcome", e.recorded, e.replayed))
    except InvariantError as e:
        return None if check else _broke(str(e))
    except SchedcliError:
        return None
    return None


def _batch_differs(m: Mismatch) -> Failure | None:
    """A task-level batch that could have been dispatched (each task it names was queued
    then): the tids only in the recording, only in the replay, or their order."""
    queued = {id_key(t) for t in m.queued} | {id_key(t.tid) for t in m.got}
    if not all(id_key(tid) in queued for tid in m.expected):
        return None
    missing, extra = ids_only_in(m.expected, [t.tid for t in m.got])
    if missing or extra:
        return Failure(m.line, ("check", _keys(missing), _keys(extra)))
    return Failure(m.line, ("order", tuple(id_key(x) for x in m.expected)))


def _step_differs(m: RequestMismatch) -> Failure | None:
    """A request-level step: the requests it scheduled only in the recording, only in the
    replay, or with other token counts (a step that names a request not held then could
    not have been recorded: no failure)."""
    held = {id_key(r) for r in m.held}
    want = {id_key(r): n for r, n in m.expected.get("batch", ())}
    got = {id_key(r): n for r, n in m.got.get("batch", ())}
    if not all(k in held for k in want):
        return None
    missing = tuple(sorted((k for k in want if k not in got), key=repr))
    extra = tuple(sorted((k for k in got if k not in want), key=repr))
    other = tuple(sorted((k for k in want if k in got and want[k] != got[k]), key=repr))
    if missing or extra or other:
        return Failure(m.line, ("check", missing, extra, other))
    # The same slices, another field differing: a step's preemptions, or a split step's
    # update (which records what finished, and no batch).
    fields = sorted(k for k in {*m.expected, *m.got} if m.expected.get(k) != m.got.get(k))
    return Failure(m.line, ("steps", tuple(want), tuple(fields)))


def _broke(message: str) -> Failure:
    """A broken contract, its counts and example tasks dropped (a smaller trace changes
    them); at the task level, located at the line the message names."""
    found = _CONTRACT.search(message)
    if found is None:  # the request level's message names no line
        return Failure(0, ("contract", _COUNT.sub("N", message)))
    where, said = found.groups()
    line = int(where[5:]) if where.startswith("line ") and where[5:].isdigit() else 0
    return Failure(line, ("contract", _COUNT.sub("N", _TASKS.sub("", said))))


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
) -> Shrunk:
    """The smallest trace found that fails like ``path``. Stopped early (``max_time``, or
    a stop signal), it is the smallest found so far, and ``stopped`` says why. The caller
    closes ``Shrunk.lines``."""
    lines = Lines(path)
    try:
        test = failure_test(until, policy, params)
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


def shrink_to_file(
    path: str,
    until: str,
    policy: str | None,
    params: Mapping[str, object],
    output: str,
    max_time: float | None,
    keep_expects: bool,
    err: Console,
) -> None:
    """``schedcli shrink``: shrink, write the result atomically, say what was done. Stopped
    early, the smallest failing trace found so far is written, and a signal then ends the
    run with its exit code."""
    start = time.monotonic()
    detail = "{task.fields[tried]} tried, {task.fields[size]} events"
    bar = ProgressBar(err, "shrinking", None, detail)
    ticker = _Ticker(err, bar.shown)

    def progress(tried: int, size: int) -> None:
        bar.update(None, tried=tried, size=size)
        ticker.tick(tried, size)

    try:
        shrunk = shrink(
            path,
            until,
            policy,
            params,
            max_time=max_time,
            keep_expects=keep_expects,
            progress=progress,
        )
    finally:
        bar.stop()
    try:
        with atomic_output(output) as out:
            shrunk.write(out)
    finally:
        shrunk.lines.close()
    took = time.monotonic() - start
    err.print(
        f"shrunk {display_name(path)} from {shrunk.before} lines to {shrunk.count} "
        f"in {took:.1f} s ({shrunk.tests} replays)",
        highlight=False,
        soft_wrap=True,
    )
    if shrunk.out_of_time or shrunk.interrupted is not None:
        why = "--max-time ran out" if shrunk.out_of_time else "interrupted"
        err.print(
            f"note: {why}: this is the smallest failing trace found so far, not a minimal one",
            highlight=False,
        )
    if shrunk.interrupted is not None:
        raise shrunk.interrupted


class _Ticker:
    """Progress as a line every few seconds where no bar can be shown (a pipe, CI)."""

    def __init__(self, err: Console, bar_shown: bool, every: float = 5.0) -> None:
        self.err = err
        self.on = not bar_shown
        self.every = every
        self.next = time.monotonic()  # the first candidate is said at once

    def tick(self, tried: int, size: int) -> None:
        if self.on and time.monotonic() >= self.next:
            self.next = time.monotonic() + self.every
            self.err.print(f"shrinking: {tried} tried, {size} events", highlight=False)
