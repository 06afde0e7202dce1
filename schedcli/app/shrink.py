"""``schedcli shrink``: a failing trace reduced to a small one that fails the same way.

Delta debugging (ddmin) over the trace's events, then over the tasks of each group. The
trace stays valid on the way: a submit that goes takes its tids out of every ``expect``,
so a smaller trace never fails only because it lost what it recorded. A failure that
names its line (a check or a contract break) first cuts everything after that line.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..engine.replay import ExpectMismatch
from ..engine.run import open_replay
from ..formats.source import display_name, numbered_lines, open_binary
from ..model.errors import InputError, InvariantError, SchedcliError, UsageError
from ..model.task import id_key
from .diff import Config, diff_trace

Event = dict[str, Any]
# A failing trace's line (1-based, header included), 0 where the failure has no line, or
# None when the trace does not fail the way asked.
Verdict = int | None


@dataclass
class Shrunk:
    header: Event | None
    events: list[Event]
    before: int
    tests: int

    def lines(self) -> list[bytes]:
        head = [self.header] if self.header is not None else []
        return [orjson.dumps(e) for e in [*head, *self.events]]


def read_events(path: str) -> tuple[Event | None, list[Event]]:
    name = display_name(path)
    header: Event | None = None
    events: list[Event] = []
    with open_binary(path, name) as stream:
        for lineno, raw, _ in numbered_lines(stream, name):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise InputError(name, lineno, "not valid JSON (run schedcli validate)") from None
            if type(obj) is not dict:
                raise InputError(name, lineno, "each line must be a JSON object")
            if "schedcli" in obj and header is None and not events:
                header = obj
            else:
                events.append(obj)
    return header, events


def failure_test(
    until: str, policy: str | None, params: Mapping[str, object]
) -> Callable[[str], Verdict]:
    """How a candidate fails: ``check``, ``contract``, ``diff:POLICY`` or ``cmd:SHELL``."""
    if until == "check":
        return lambda path: _replay_fails(path, policy, params, check=True)
    if until == "contract":
        return lambda path: _replay_fails(path, policy, params, check=False)
    if until.startswith("diff:") and until[5:]:
        other = until[5:]

        def parts_ways(path: str) -> Verdict:
            try:
                result = diff_trace(path, Config(policy, dict(params)), Config(other, {}))
            except SchedcliError:
                return None
            return None if result.identical else 0

        return parts_ways
    if until.startswith("cmd:") and until[4:].strip():
        command = until[4:]

        def command_fails(path: str) -> Verdict:
            run = subprocess.run(
                command.replace("{}", shlex.quote(path)),
                shell=True,
                env={**os.environ, "TRACE": path},
                capture_output=True,
                check=False,
            )
            return 0 if run.returncode != 0 else None

        return command_fails
    raise UsageError(f"--until {until!r}: one of check, contract, diff:POLICY, cmd:'SHELL COMMAND'")


def _replay_fails(
    path: str, policy: str | None, params: Mapping[str, object], *, check: bool
) -> Verdict:
    try:
        with open_replay(path, policy=policy, params=params, note=lambda _: None) as opened:
            opened.run(opened.replayer(_discard, check=check))
    except ExpectMismatch as e:
        m = e.mismatch
        # The same failure only when the recorded batch could have been dispatched: each
        # task it names was queued then (else the smaller trace just lost what it recorded).
        queued = {id_key(t) for t in m.queued} | {id_key(t.tid) for t in m.got}
        return m.line if all(id_key(tid) in queued for tid in m.expected) else None
    except InvariantError as e:
        return None if check else _line_of(str(e))
    except SchedcliError:
        return None
    return None


def _line_of(message: str) -> int:
    marker = "(line "
    start = message.find(marker)
    if start < 0:
        return 0
    digits = message[start + len(marker) :].split(")", 1)[0]
    return int(digits) if digits.isdigit() else 0


def _discard(record: Event) -> None:
    pass


class _Shrinker:
    def __init__(self, header: Event | None, test: Callable[[str], Verdict], tmp: str) -> None:
        self.header = header
        self.test = test
        self.path = os.path.join(tmp, "candidate.jsonl")
        self.tests = 0

    def fails(self, events: Sequence[Event]) -> Verdict:
        self.tests += 1
        lines = [orjson.dumps(e) for e in _consistent(events)]
        if self.header is not None:
            lines.insert(0, orjson.dumps(self.header))
        with open(self.path, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        return self.test(self.path)

    def ddmin(self, items: list[Any], rebuild: Callable[[list[Any]], list[Event]]) -> list[Any]:
        """Remove chunks while what is left still fails; halve the chunks when none can go."""
        n = 2
        while len(items) >= 2:
            size = math.ceil(len(items) / n)
            for start in range(0, len(items), size):
                rest = items[:start] + items[start + size :]
                if rest and self.fails(rebuild(rest)) is not None:
                    items = rest
                    n = max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(n * 2, len(items))
        return items


def _consistent(events: Sequence[Event]) -> list[Event]:
    """``expect`` lists keep only tids some kept submit still queues."""
    tids = set()
    for e in events:
        if e.get("op") == "submit":
            for t in e.get("tasks") or [e]:
                if isinstance(t, dict) and "tid" in t:
                    tids.add(id_key(t["tid"]))
    out = []
    for e in events:
        expect = e.get("expect")
        if e.get("op") == "get_work" and isinstance(expect, list):
            e = {**e, "expect": [tid for tid in expect if id_key(tid) in tids]}
        out.append(e)
    return out


def shrink(path: str, until: str, policy: str | None, params: Mapping[str, object]) -> Shrunk:
    header, events = read_events(path)
    before = len(events) + (header is not None)
    test = failure_test(until, policy, params)
    with tempfile.TemporaryDirectory(prefix="schedcli-shrink-") as tmp:
        shrinker = _Shrinker(header, test, tmp)
        verdict = shrinker.fails(events)
        if verdict is None:
            raise InputError(
                display_name(path), None, f"does not fail --until {until}: nothing to shrink"
            )
        if verdict > 0:  # cut what follows the failing line (the header counts as a line)
            events = events[: verdict - (1 if header is not None else 0)]
        kept = shrinker.ddmin(list(range(len(events))), lambda ix: [events[i] for i in ix])
        events = [events[i] for i in kept]
        for i, e in enumerate(events):
            tasks = e.get("tasks")
            if e.get("op") == "submit" and isinstance(tasks, list) and len(tasks) > 1:

                def with_tasks(chosen: list[Any], i: int = i, e: Event = e) -> list[Event]:
                    return [*events[:i], {**e, "tasks": chosen}, *events[i + 1 :]]

                events[i] = {**e, "tasks": shrinker.ddmin(tasks, with_tasks)}
        assert shrinker.fails(events) is not None
        return Shrunk(header, _consistent(events), before, shrinker.tests)
