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

import math
import mmap
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import orjson
from rich.console import Console

from ..engine.replay import ExpectMismatch, OutcomeMismatch
from ..engine.run import open_replay
from ..formats.interrupt import Stopped
from ..formats.output import atomic_output
from ..formats.source import display_name, open_binary
from ..formats.trace import open_trace, partial_marker
from ..model.errors import InputError, InvariantError, SchedcliError, UsageError
from ..model.task import id_key, ids_only_in
from .diff import Config, diff_trace
from .progress import ProgressBar

Event = dict[str, Any]


@dataclass(frozen=True)
class Failure:
    """How a candidate failed: the line to cut after (0: none) and what identifies it."""

    line: int
    signature: tuple[Any, ...]


Test = Callable[[str], Failure | None]


class Lines:
    """The trace's lines, by byte range in a private copy of it (mapped, not read in):
    a candidate names lines by index, so memory follows the number of lines (8 bytes
    each), not their bytes. Candidates are written beside the copy, in ``folder``."""

    def __init__(self, path: str) -> None:
        self.name = display_name(path)
        self._folder = tempfile.TemporaryDirectory(prefix="schedcli-shrink-")
        self.folder = self._folder.name
        copy = os.path.join(self.folder, "trace.jsonl")
        with open_binary(path, self.name) as stream, open(copy, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
        with open_trace(copy, name=self.name) as reader:  # every line valid, as replay reads
            for _ in reader:
                pass
        self.header: bytes | None = None
        self.starts = array("q")
        self.ends = array("q")
        self.expects = bytearray()  # 1 where the line is a get_work with an expect
        # 1 where a line follows the one before it in the file after exactly one newline,
        # so a run of such lines is one slice of the file.
        self.joined = bytearray()
        with open(copy, "rb") as f:
            self._index(f)
            size = f.tell()
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        # Slices of a memoryview are not copies: a run of a million lines costs nothing.
        self.view = memoryview(self.map if self.map is not None else b"")

    def _index(self, f: IO[bytes]) -> None:
        """Every line's place; partial markers left out (candidates are whole traces).
        A line's range ends at its newline, which a candidate writes as a plain ``\\n``."""
        starts, ends, expects, joined = self.starts, self.ends, self.expects, self.joined
        pos = 0
        follows = -1  # where a line that follows the last one kept after one "\n" starts
        for raw in f:
            content = raw.rstrip()
            if content.strip() and partial_marker(content) is None:
                if self.header is None and not starts and "schedcli" in orjson.loads(content):
                    self.header = content
                else:
                    starts.append(pos)
                    ends.append(pos + len(content))
                    expects.append(b'"expect"' in content and _has_expect(orjson.loads(content)))
                    joined.append(pos == follows)
                    follows = pos + len(raw) if len(raw) == len(content) + 1 else -1
            pos += len(raw)

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        """Line ``i`` without its newline."""
        return self.view[self.starts[i] : self.ends[i]].tobytes()

    def close(self) -> None:
        self.view.release()
        if self.map is not None:
            self.map.close()
        self._folder.cleanup()


@dataclass(frozen=True)
class Candidate:
    """Some of the trace's lines (indices, ascending), with the expects not chosen
    dropped and some groups' tasks cut; events are only ever dropped, never edited."""

    kept: Sequence[int]
    keep_expects: bytearray | None = None  # None: every expect as recorded
    tasks: Mapping[int, list[Any]] = field(default_factory=dict)  # a group's tasks kept

    def __len__(self) -> int:
        return len(self.kept)

    def _edited(self, lines: Lines, i: int) -> bool:
        keep = self.keep_expects
        return i in self.tasks or (keep is not None and lines.expects[i] == 1 and not keep[i])

    def event(self, lines: Lines, i: int) -> Event:
        e: Event = orjson.loads(lines.raw(i))
        keep = self.keep_expects
        if keep is not None and lines.expects[i] and not keep[i]:
            e = {k: v for k, v in e.items() if k != "expect"}
        if i in self.tasks:
            e = {**e, "tasks": self.tasks[i]}
        return e

    def write(self, lines: Lines, out: IO[bytes], *, canonical: bool = False) -> None:
        """The candidate as a trace: lines as they are in the file, a run of neighbours in
        one write (``canonical``: each re-encoded, as the shrunk trace is written)."""
        write, dumps = out.write, orjson.dumps
        if lines.header is not None:
            write((dumps(orjson.loads(lines.header)) if canonical else lines.header) + b"\n")
        if canonical:
            for i in self.kept:
                write(dumps(self.event(lines, i)) + b"\n")
            return
        view, starts, ends, joined = lines.view, lines.starts, lines.ends, lines.joined
        edits = bool(self.tasks) or self.keep_expects is not None
        run = prev = -2  # the current run of unedited neighbours: lines run..prev
        for i in self.kept:
            if edits and self._edited(lines, i):
                if run >= 0:
                    write(view[starts[run] : ends[prev]])
                    write(b"\n")
                    run = -2
                write(dumps(self.event(lines, i)) + b"\n")
            elif run >= 0 and i == prev + 1 and joined[i]:
                prev = i
            else:
                if run >= 0:
                    write(view[starts[run] : ends[prev]])
                    write(b"\n")
                run = prev = i
        if run >= 0:
            write(view[starts[run] : ends[prev]])
            write(b"\n")


def failure_test(until: str, policy: str | None, params: Mapping[str, object]) -> Test:
    """How a candidate fails: ``check``, ``contract``, ``diff:POLICY`` or ``cmd:SHELL``."""
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
_CONTRACT = re.compile(r"broke the Scheduler contract at step \d+ \(([^)]*)\): (.*)", re.S)


def _replay_fails(
    path: str, policy: str | None, params: Mapping[str, object], *, check: bool
) -> Failure | None:
    try:
        with open_replay(
            path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
        ) as opened:
            opened.run(opened.replayer(_discard, check=check))
    except ExpectMismatch as e:
        m = e.mismatch
        # Only a batch that could have been dispatched: each task it names was queued then.
        queued = {id_key(t) for t in m.queued} | {id_key(t.tid) for t in m.got}
        if not all(id_key(tid) in queued for tid in m.expected):
            return None
        missing, extra = ids_only_in(m.expected, [t.tid for t in m.got])
        if missing or extra:
            return Failure(m.line, ("check", _keys(missing), _keys(extra)))
        return Failure(m.line, ("order", tuple(id_key(x) for x in m.expected)))
    except OutcomeMismatch as e:
        return Failure(e.line, ("outcome", e.recorded, e.replayed))
    except InvariantError as e:
        if check:
            return None
        found = _CONTRACT.search(str(e))
        if found is None:
            return Failure(0, ("contract", str(e)))
        where, message = found.groups()
        line = int(where[5:]) if where.startswith("line ") and where[5:].isdigit() else 0
        return Failure(line, ("contract", _COUNT.sub("N", message)))
    except SchedcliError:
        return None
    return None


def _discard(record: Event) -> None:
    pass


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
        self.best = Candidate(array("q"))

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
        ``items``: a list or an array (line indices, 8 bytes each)."""
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
        lines = self.lines
        if not keep_expects:
            expects = lines.expects
            checked = array("q", (i for i in candidate.kept if expects[i]))
            whole = candidate

            def keeping(kept_checks: Sequence[int]) -> Candidate:
                chosen = bytearray(len(lines))
                for i in kept_checks:
                    chosen[i] = 1
                return replace(whole, keep_expects=chosen)

            candidate = keeping(self.ddmin(checked, keeping))
        with_expects = candidate
        kept = self.ddmin(candidate.kept, lambda ix: replace(with_expects, kept=ix))
        return self._drop_tasks(replace(candidate, kept=kept))

    def _drop_tasks(self, candidate: Candidate) -> Candidate:
        lines = self.lines
        for i in candidate.kept:
            if b'"tasks"' not in lines.raw(i):
                continue
            e = candidate.event(lines, i)
            tasks = e.get("tasks")
            if e.get("op") == "submit" and isinstance(tasks, list) and len(tasks) > 1:

                def with_tasks(
                    chosen: list[Any], i: int = i, base: Candidate = candidate
                ) -> Candidate:
                    return replace(base, tasks={**base.tasks, i: chosen})

                candidate = with_tasks(self.ddmin(tasks, with_tasks))
        return candidate


def _has_expect(e: Event) -> bool:
    return e.get("op") == "get_work" and "expect" in e


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
    test = failure_test(until, policy, params)
    lines = Lines(path)
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
    candidate = Candidate(array("q", range(len(lines))))
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
    result = Shrunk(lines, candidate, len(lines) + (lines.header is not None), 0, failure.signature)
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
