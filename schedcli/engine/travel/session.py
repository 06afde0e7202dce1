"""One debugging session's replay: the sides run over the trace once, each step handed to
the hooks aligned across sides with what it is compared with, and the marks a timeline
shows (divergences, rejections, cancels, clears, aborts, preemptions).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...formats.dump import read_dump
from ...model.records import Record
from ...model.task import show_id
from ..diff import same
from ..run import OpenReplay
from .sides import Side, inputs, side_for


@dataclass
class Compare:
    """What the replay is compared with: its own expects, a golden dump, or a second
    policy; at most one."""

    check: bool = False
    golden: str | None = None
    against: str | None = None
    against_params: Mapping[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str | None:
        if self.check:
            return "expect"
        if self.golden is not None:
            return "golden"
        return None if self.against is None else "against"


class Hooks(Protocol):
    def side_step(self, side: int, step: int, record: Record) -> None: ...

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None: ...

    def mark(self, step: int, kind: str, text: str) -> None: ...

    def event(self, record: Record, step: int) -> None: ...  # side 0's other records


class Golden:
    """A golden dump read alongside the replay, one step record at a time."""

    def __init__(self, path: str) -> None:
        self._records: Iterator[Record] = read_dump(path, allow_incomplete=True, golden=True)
        self._next: Record | None = None
        self._ended = False

    def at(self, step: int) -> Record | None:
        """The golden's record of ``step``, or None if it has none."""
        while True:
            record = self._peek()
            if record is None or record["step"] > step:
                return None
            self._next = None
            if record["step"] == step:
                return record

    def rest(self) -> int:
        count = 0
        while self._peek() is not None:
            self._next = None
            count += 1
        return count

    def _peek(self) -> Record | None:
        while self._next is None and not self._ended:
            record = next(self._records, None)
            if record is None:
                self._ended = True
            elif "batch" in record:
                self._next = record
        return self._next


class Session:
    """The sides and their comparison, run once through the trace (``run``). A step
    differs where its whole record does, as ``diff`` and ``replay --golden`` compare
    (``engine.diff.same``); under ``--check``, where its batch differs from the expect."""

    def __init__(self, opened: OpenReplay, compare: Compare, hooks: Hooks) -> None:
        self.opened, self.compare, self.hooks = opened, compare, hooks
        self.sides: list[Side] = [side_for(opened, 0, self, compare.check)]
        if compare.against is not None:
            sibling = opened.sibling(compare.against, compare.against_params)
            self.sides.append(side_for(sibling, 1, self, False))
        self.golden = Golden(compare.golden) if compare.golden is not None else None
        self._pending: list[dict[int, Record]] = [{} for _ in self.sides]
        self._expects: dict[int, Any] = {}
        self.steps = 0  # steps aligned so far
        self._plain = compare.label is None and opened.level == "task"

    def run(self) -> None:
        sides = self.sides
        if len(sides) == 1:
            sides[0].feed_all(self.opened)
        else:
            for line, item in inputs(self.opened):
                for side in sides:
                    side.feed(line, item)
        self.opened.check_complete()
        for side in sides:
            side.close()
        self._flush()

    # --- the sides' sink -----------------------------------------------------------------

    def stepped(self, side: int, record: Record) -> None:
        step = record["step"]
        self.hooks.side_step(side, step, record)
        if self._plain:  # one side, compared with nothing: the index's common case
            self.steps = step + 1
            self.hooks.aligned(step, [record], None)
            return
        if side == 0:
            expect = self.sides[0].expect
            if expect is not None:
                self._expects[step] = expect
            if record.get("preempted"):
                shown = ", ".join(show_id(r) for r in record["preempted"][:3])
                self.hooks.mark(step, "preempt", f"preempted {shown}")
        if len(self.sides) == 1:
            self._aligned(step, [record])
            return
        self._pending[side][step] = record
        other = self._pending[1 - side]
        if step in other:
            records = [self._pending[0].pop(step), self._pending[1].pop(step)]
            self._aligned(step, list(records))

    def event(self, side: int, record: Record, step: int) -> None:
        if side != 0:
            return
        self.hooks.event(record, step)
        op = record.get("op")
        if record.get("accepted") is False:
            self.hooks.mark(step, "reject", f"line {record['line']}: {record['reason']}")
        elif op in ("cancel", "clear"):
            what = f"session {show_id(record['sid'])}" if op == "cancel" else "all"
            dropped = len(record["dropped"])
            self.hooks.mark(step, op, f"line {record['line']}: {op} {what} ({dropped} dropped)")
        elif op == "abort":
            self.hooks.mark(
                step, "cancel", f"line {record['line']}: abort {show_id(record['rid'])}"
            )

    def diverged(self, side: int, step: int, expected: Any) -> None:
        self.hooks.mark(step, "div", "differs from the trace's expect")

    # --- alignment -----------------------------------------------------------------------

    def _aligned(self, step: int, records: list[Record | None]) -> None:
        self.steps = step + 1
        other: Any = None
        compare = self.compare
        mine = records[0]
        if compare.check:
            other = self._expects.pop(step, None)
        elif self.golden is not None:
            other = self.golden.at(step)
            if other is None or mine is None or not same(mine, other):
                self.hooks.mark(step, "div", "differs from the golden")
        elif len(records) == 2:
            other = records[1]
            if mine is None or other is None or not same(mine, other):
                self.hooks.mark(step, "div", f"{self.sides[1].name} schedules differently")
        self.hooks.aligned(step, records, other)

    def _flush(self) -> None:
        """After every side closed: the steps one side ran and the other did not."""
        if len(self.sides) == 2:
            a, b = self._pending
            for step in sorted(set(a) | set(b)):
                self._aligned(step, [a.pop(step, None), b.pop(step, None)])
        if self.golden is not None:
            left = self.golden.rest()
            if left:
                self.hooks.mark(max(self.steps - 1, 0), "div", f"the golden has {left} more steps")


__all__ = ["Compare", "Golden", "Hooks", "Session"]
