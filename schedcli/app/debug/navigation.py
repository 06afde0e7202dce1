"""What the debugger's keys mean, apart from the screen: breakpoints parsed and checked,
divergences and marks found in the index, the command that reproduces a view. The app
(``screen.py``) only draws what this decides."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ...engine.findings import KINDS, Finding
from ...engine.travel import Travel
from ...model.errors import UsageError
from ...model.task import show_id
from ..usage import worded

# The conditions the index answers alone, and those a worker replays to check.
INDEXED = ("div", "preempt", "break", "under", "reject", "cancel")
REPLAYED = ("wait", "session", "reason")
# Answered from the findings, which the app finds beside the index (``Navigator.found``).
FOUND = ("finding",)

BREAKPOINT_SYNTAX = (
    "wait>K (a task waits more than K steps) · session=SID (dispatched) · reason=CODE · "
    "under=X% (a batch under X% of the budget while work waits) · preempt · break · div · "
    "reject · cancel · finding=KIND (a finding of KIND at the step: docs/findings.md)"
)


@dataclass(frozen=True)
class Breakpoint:
    kind: str
    value: Any = None

    @property
    def text(self) -> str:
        if self.kind == "wait":
            return f"wait>{self.value}"
        if self.kind == "under":
            return f"under={self.value:g}%"
        if self.kind in ("session", "reason", "finding"):
            return f"{self.kind}={self.value}"
        return self.kind

    def wire(self) -> dict[str, Any]:
        """As a worker's scan takes it."""
        if self.kind == "wait":
            return {"kind": "wait", "k": self.value}
        if self.kind == "session":
            return {"kind": "session", "sid": self.value}
        return {"kind": "reason", "code": self.value}


def parse_breakpoint(text: str) -> Breakpoint:
    """``wait>K``, ``session=SID``, ``reason=CODE``, ``under=X%``, ``finding=KIND`` or a
    mark's name."""
    text = text.strip()
    if text.startswith("wait>"):
        k = _int(text[5:], "wait>K")
        return Breakpoint("wait", k)
    name, eq, value = text.partition("=")
    if eq and name == "session":
        return Breakpoint("session", parse_id(value))
    if eq and name == "reason" and value:
        return Breakpoint("reason", value)
    if eq and name == "finding":
        if value not in KINDS:
            raise UsageError(
                f"finding=KIND: {value!r} is not a kind of finding; one of: {', '.join(KINDS)}"
            )
        return Breakpoint("finding", value)
    if eq and name == "under":
        pct = value.rstrip("%")
        try:
            x = float(pct)
        except ValueError:
            x = -1.0
        if not 0 < x <= 100:
            raise UsageError(f"under=X%: X is a percentage in (0, 100], not {value!r}")
        return Breakpoint("under", x)
    if not eq and text in ("div", "preempt", "break", "reject", "cancel"):
        return Breakpoint(text)
    raise UsageError(f"not a breakpoint: {text!r}; one of: {BREAKPOINT_SYNTAX}")


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what}: K is a whole number of steps, not {text!r}") from None
    if not 0 <= value <= 1 << 40:
        raise UsageError(f"{what}: K is between 0 and 2^40, not {value}")
    return value


def parse_id(text: str) -> int | str:
    """A tid or sid as typed: a number is an integer id, anything else a string id."""
    text = text.strip()
    if not text:
        raise UsageError("an id is a number or a string; got nothing")
    try:
        return int(text)
    except ValueError:
        return text.strip('"')


class Navigator:
    """Steps as the index knows them: the marks by kind, and searches over them and over
    replays (the client's workers)."""

    def __init__(self, travel: Travel) -> None:
        self.travel = travel
        # The replay's findings, once found beside the index (``found``): set then, with
        # why they are not known if they could not be found (the replay refused, say).
        self.findings: list[Finding] = []
        self.findings_unknown: str | None = None
        self.findings_known = threading.Event()

    def found(self, findings: list[Finding], unknown: str | None = None) -> None:
        self.findings, self.findings_unknown = findings, unknown
        self.findings_known.set()

    def findings_at(self, step: int) -> list[Finding]:
        return [f for f in self.findings if f.step == step]

    def _found_hit(
        self, bp: Breakpoint, step: int, forward: bool, stop: threading.Event | None
    ) -> tuple[int, str] | None:
        """The nearest step past ``step`` with a finding of ``bp``'s kind, once the
        findings are known (waited for, as a replayed search is)."""
        while not self.findings_known.wait(0.05):
            if stop is not None and stop.is_set():
                return None
        steps = sorted({f.step for f in self.findings if f.kind == bp.value})
        if forward:
            i = bisect_right(steps, step)
            at = steps[i] if i < len(steps) else None
        else:
            i = bisect_left(steps, step)
            at = steps[i - 1] if i > 0 else None
        if at is None:
            return None
        said = "; ".join(finding_said(f) for f in self.findings_at(at) if f.kind == bp.value)
        return at, f"{bp.text}: {said}"

    def mark_steps(self, kind: str) -> list[int]:
        return sorted({step for step, k, _ in self.travel.marks if k == kind})

    def marks_at(self, step: int) -> list[tuple[str, str]]:
        return [(k, worded(text)) for s, k, text in self.travel.marks if s == step]

    def divergence(self, step: int, direction: int) -> int | None:
        """The next (1) or previous (-1) divergence from ``step``, or the first (0)."""
        steps = self.mark_steps("div")
        if not steps:
            return None
        if direction == 0:
            return steps[0]
        if direction > 0:
            i = bisect_right(steps, step)
            return steps[i] if i < len(steps) else None
        i = bisect_left(steps, step)
        return steps[i - 1] if i > 0 else None

    def break_step(self) -> int | None:
        ending = (self.travel.indexed or {}).get("ending")
        return ending["step"] if ending and ending.get("broke") else None

    def _indexed_hit(self, bp: Breakpoint, step: int, forward: bool) -> int | None:
        """The nearest step past ``step`` (not itself) where ``bp`` holds, by the index."""
        if bp.kind == "break":
            at = self.break_step()
            if at is None:
                return None
            return at if (at > step if forward else at < step) else None
        if bp.kind == "under":
            return self._under(bp.value, step, forward)
        steps = self.mark_steps(bp.kind)
        if forward:
            i = bisect_right(steps, step)
            return steps[i] if i < len(steps) else None
        i = bisect_left(steps, step)
        return steps[i - 1] if i > 0 else None

    def _under(self, pct: float, step: int, forward: bool) -> int | None:
        t = self.travel
        budget = (t.hello or {}).get("budget")
        if not budget:
            return None
        limit = budget * pct / 100
        rows = range(t.row_of(step + 1), t.steps) if forward else range(t.row_of(step) - 1, -1, -1)
        for row in rows:
            if t.tokens[row] < limit and t.queued[row] > 0:
                return t.numbers[row]
        return None

    def hit(
        self,
        breakpoints: list[Breakpoint],
        step: int,
        forward: bool,
        stop: threading.Event | None = None,
    ) -> tuple[int, str] | None:
        """Continue (``forward``) or reverse-continue from ``step``: the nearest step where
        a breakpoint holds, with which one and why."""
        best: tuple[int, str] | None = None
        for bp in breakpoints:
            if bp.kind in INDEXED:
                at = self._indexed_hit(bp, step, forward)
                if at is not None and (best is None or (at < best[0]) == forward):
                    best = (at, bp.text)
            elif bp.kind in FOUND:
                hit = self._found_hit(bp, step, forward, stop)
                if hit is not None and (best is None or (hit[0] < best[0]) == forward):
                    best = hit
        replayed = [bp for bp in breakpoints if bp.kind in REPLAYED]
        if replayed:
            found = self._replayed_hit(replayed, step, forward, best[0] if best else None, stop)
            if found is not None and (best is None or (found[0] < best[0]) == forward):
                best = found
        return best

    def _replayed_hit(
        self,
        breakpoints: list[Breakpoint],
        step: int,
        forward: bool,
        limit: int | None,
        stop: threading.Event | None,
    ) -> tuple[int, str] | None:
        conds = [bp.wire() for bp in breakpoints]
        start = step + 1 if forward else step - 1
        if start < 0:
            return None
        found = self.travel.scan(conds, start, forward, stop, limit=limit)
        if found is None:
            return None
        which = next(bp for bp in breakpoints if bp.wire() == found["cond"])
        return found["step"], f"{which.text}: {found['why']}"

    def find(
        self, key: dict[str, Any], step: int, stop: threading.Event | None = None
    ) -> int | None:
        """The first step from ``step`` on where the task (or session) is queued or in
        the batch; then from the start, up to ``step``."""
        cond = [{"kind": "find", **key}]
        found = self.travel.scan(cond, step, True, stop)
        if found is None and step > 0:
            found = self.travel.scan(cond, 0, True, stop, limit=step)
        return None if found is None else int(found["step"])


def find_apart(
    trace: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    allow_incomplete: bool,
    stop: threading.Event,
) -> tuple[list[Finding], str | None]:
    """The replay's findings, found by ``schedcli findings`` in a process of its own (the
    policy runs apart from the screen, as the index's server runs it: a policy that ends
    its process ends only that one); or none and why they are not known. ``stop``: the
    process is killed once it is set."""
    words = [sys.executable, "-m", "schedcli", "findings", trace, "-f", "json"]
    if policy is not None:
        words += ["-p", policy]
    for k, v in params.items():
        words += ["-P", f"{k}={_param(v)}"]
    if allow_incomplete:
        words.append("--allow-incomplete")
    with subprocess.Popen(
        words, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        while True:
            try:
                out, err = process.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if stop.is_set():
                    process.kill()
                    process.communicate()
                    return [], "findings not known: stopped"
    if process.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"their replay ended with exit {process.returncode}"
        if process.returncode < 0:
            why = f"their replay was killed ({signal.Signals(-process.returncode).name})"
        return [], f"findings not known: {why.removeprefix('schedcli: ')}"
    found = []
    for line in out.splitlines():
        record = orjson.loads(line)
        kind, step = record.pop("kind"), record.pop("step")
        waiting, ran = tuple(record.pop("waiting")), tuple(record.pop("ran"))
        found.append(Finding(kind, step, waiting, ran, record))
    return found, None


def finding_said(f: Finding) -> str:
    """A finding in the status line's words: its kind, who waited, who ran."""
    parts = [f.kind]
    if f.waiting:
        parts.append("waiting " + ", ".join(show_id(i) for i in f.waiting))
    if f.ran:
        parts.append("ran " + ", ".join(show_id(i) for i in f.ran))
    return " ".join(parts)


def reproduce(trace: str, step: int, policy: str | None, params: Mapping[str, object]) -> str:
    """The command that shows this step outside the debugger: ``explain --step``."""
    words = ["schedcli", "explain", trace, "--step", str(step)]
    if policy is not None:
        words += ["-p", policy]
    for k, v in params.items():
        words += ["-P", f"{k}={_param(v)}"]
    return " ".join(shlex.quote(w) for w in words)


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = [
    "BREAKPOINT_SYNTAX",
    "Breakpoint",
    "Navigator",
    "find_apart",
    "finding_said",
    "parse_breakpoint",
    "parse_id",
    "reproduce",
]
