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
import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Console

from ..engine.replay import ExpectMismatch, OutcomeMismatch
from ..engine.run import open_replay
from ..formats.interrupt import Stopped
from ..formats.output import atomic_output
from ..formats.source import display_name, numbered_lines, open_binary
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


@dataclass
class Shrunk:
    header: Event | None
    events: list[Event]
    before: int
    tests: int
    signature: tuple[Any, ...] = ()
    out_of_time: bool = False  # stopped at --max-time: the smallest found so far
    interrupted: Stopped | None = None  # stopped by a signal: the smallest found so far

    def lines(self) -> list[bytes]:
        head = [self.header] if self.header is not None else []
        return [orjson.dumps(e) for e in [*head, *self.events]]


def read_events(path: str) -> tuple[Event | None, list[Event]]:
    """The trace's header and events as JSON objects, after the trace reader (the one
    replay uses) found every line valid."""
    name = display_name(path)
    with open_trace(path, name=name) as reader:
        for _ in reader:
            pass
    header: Event | None = None
    events: list[Event] = []
    with open_binary(path, name) as stream:
        for _, raw, _ in numbered_lines(stream, name):
            if partial_marker(raw) is not None:
                continue  # candidates are whole traces of what was kept
            obj = orjson.loads(raw)
            if "schedcli" in obj and header is None and not events:
                header = obj
            else:
                events.append(obj)
    return header, events


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
        header: Event | None,
        test: Test,
        tmp: str,
        deadline: float | None,
        progress: Callable[[int, int], None],
    ) -> None:
        self.header = header
        self.test = test
        self.path = os.path.join(tmp, "candidate.jsonl")
        self.tests = 0
        self.deadline = deadline
        self.progress = progress
        self.signature: tuple[Any, ...] = ()
        self.best: list[Event] = []

    def run(self, events: Sequence[Event]) -> Failure | None:
        self.tests += 1
        lines = [orjson.dumps(e) for e in events]
        if self.header is not None:
            lines.insert(0, orjson.dumps(self.header))
        with open(self.path, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        return self.test(self.path)

    def fails(self, events: list[Event]) -> bool:
        """Whether ``events`` fail the same way; the smallest such is kept as ``best``."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime
        failure = self.run(events)
        same = failure is not None and failure.signature == self.signature
        if same and len(events) <= len(self.best):
            self.best = events
        self.progress(self.tests, len(self.best))
        return same

    def ddmin(self, items: list[Any], rebuild: Callable[[list[Any]], list[Event]]) -> list[Any]:
        """Remove chunks while what is left still fails; halve the chunks when none can go."""
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

    def reduce(self, events: list[Event], keep_expects: bool) -> list[Event]:
        """Unless ``keep_expects``, the checks of batches other than the failing one
        dropped (while the failure stays the same), then events, then tasks of groups."""
        if not keep_expects:
            checked = [i for i, e in enumerate(events) if _has_expect(e)]

            def keeping(kept_checks: list[int]) -> list[Event]:
                chosen = set(kept_checks)
                return [
                    e if i in chosen or not _has_expect(e) else _without_expect(e)
                    for i, e in enumerate(events)
                ]

            events = keeping(self.ddmin(checked, keeping))
        return self._drop_tasks(self._drop_events(events))

    def _drop_events(self, events: list[Event]) -> list[Event]:
        kept = self.ddmin(list(range(len(events))), lambda ix: [events[i] for i in ix])
        return [events[i] for i in kept]

    def _drop_tasks(self, events: list[Event]) -> list[Event]:
        for i, e in enumerate(events):
            tasks = e.get("tasks")
            if e.get("op") == "submit" and isinstance(tasks, list) and len(tasks) > 1:

                def with_tasks(chosen: list[Any], i: int = i, e: Event = e) -> list[Event]:
                    return [*events[:i], {**e, "tasks": chosen}, *events[i + 1 :]]

                events[i] = {**e, "tasks": self.ddmin(tasks, with_tasks)}
        return events


def _has_expect(e: Event) -> bool:
    return e.get("op") == "get_work" and "expect" in e


def _without_expect(e: Event) -> Event:
    return {k: v for k, v in e.items() if k != "expect"}


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
    a stop signal), it is the smallest found so far, and ``stopped`` says why."""
    header, events = read_events(path)
    before = len(events) + (header is not None)
    test = failure_test(until, policy, params)
    deadline = None if max_time is None else time.monotonic() + max_time
    with tempfile.TemporaryDirectory(prefix="schedcli-shrink-") as tmp:
        shrinker = _Shrinker(header, test, tmp, deadline, progress)
        failure = shrinker.run(events)
        if failure is None:
            raise InputError(
                display_name(path), None, f"does not fail --until {until}: nothing to shrink"
            )
        shrinker.signature = failure.signature
        shrinker.best = events
        if failure.line > 0:  # cut what follows the failing line (the header counts as a line)
            cut = events[: failure.line - (1 if header is not None else 0)]
            events = cut if shrinker.fails(cut) else events
        result = Shrunk(header, events, before, 0, failure.signature)
        try:
            shrinker.reduce(list(events), keep_expects)
        except _OutOfTime:
            result.out_of_time = True
        except Stopped as e:
            result.interrupted = e
        result.events, result.tests = shrinker.best, shrinker.tests
        if result.interrupted is None:
            shrinker.deadline = None
            if not shrinker.fails(result.events):
                raise InputError(
                    display_name(path),
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
    lines = shrunk.lines()
    with atomic_output(output) as out:
        out.write(b"".join(line + b"\n" for line in lines))
    took = time.monotonic() - start
    err.print(
        f"shrunk {display_name(path)} from {shrunk.before} lines to {len(lines)} "
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
