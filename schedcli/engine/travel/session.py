"""One debugging session's replay: the sides run over the trace once, each step handed to
the hooks aligned across sides with what it is compared with, and the marks a timeline
shows (divergences, rejections, cancels, clears, aborts, preemptions).

Under ``--golden`` and ``--against`` every record of the replay (batches, rejected submits,
cancels, clears, the end) goes through the engine's ``Aligner``, the comparison ``diff``
and ``replay --golden`` make, so the debugger's verdict is theirs for every kind of record;
each record that differs is marked at the first step after it (the last step if none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ...formats.dump import partial_record, read_dump
from ...model.errors import InvariantError, Option, Said
from ...model.records import Record
from ...model.steps import Step
from ...model.task import show_id
from ...streams.interrupt import stop_reason
from ..diff import Aligner, DiffResult, RecordDifference, same
from ..run import OpenReplay
from .sides import Side, inputs, side_for

_LATER: Final = 1 << 62  # a mark's step not known yet: the last step, once the run ends


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
    def side_step(self, side: int, step: int, record: Step) -> None: ...

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None: ...

    # A mark's text: its words, and the options it names (the app words them as flags).
    def mark(self, step: int, kind: str, *text: Said) -> None: ...

    def event(self, record: Record, step: int) -> None: ...  # side 0's other records


class Golden:
    """A golden dump read alongside the replay. Every record read is handed to ``feed``
    (the comparison), with the step its other records stand before; ``at`` gives the
    batch of one step."""

    def __init__(
        self, path: str, feed: Callable[[Record, int], None], allow_incomplete: bool
    ) -> None:
        self._records: Iterator[Record] = read_dump(
            path, allow_incomplete=allow_incomplete, golden=True
        )
        self._feed = feed
        self._next: Record | None = None
        self._ended = False
        self._upcoming = 0  # the step the golden's next batch follows from
        self.pins_a_break = False  # it ends with a partial record (as replay --golden says)

    def at(self, step: int) -> tuple[Record | None, list[int]]:
        """The golden's record of ``step`` (None if it has none), and the steps it has
        before it that the replay did not run."""
        skipped: list[int] = []
        while True:
            record = self._peek()
            if record is None or record["step"] > step:
                return None, skipped
            self._next = None
            if record["step"] == step:
                return record, skipped
            skipped.append(record["step"])

    def rest(self) -> int:
        """Every record left read (and fed); how many steps they hold."""
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
                break
            if "batch" in record:
                self._next = record
                self._upcoming = record["step"] + 1
            elif "partial" in record:
                self.pins_a_break = True
            self._feed(record, self._upcoming)
        return self._next


class _Result(DiffResult):
    """The engine's comparison result; each record counted as differing is also told
    (for its mark)."""

    def __init__(self, told: Callable[[RecordDifference], None]) -> None:
        super().__init__(("a", "b"), ({}, {}))
        self._told = told

    def record_differs(self, difference: RecordDifference) -> None:
        super().record_differs(difference)
        self._told(difference)


class Session:
    """The sides and their comparison, run once through the trace (``run``). Under
    ``--golden`` and ``--against`` the comparison is the engine's (``Aligner``, as
    ``replay --golden`` and ``diff``): batches by step, every other record by its line, the
    end records; under ``--check``, a step differs where its batch differs from the
    expect."""

    def __init__(
        self,
        opened: OpenReplay,
        compare: Compare,
        hooks: Hooks,
        allow_incomplete: bool = False,
    ) -> None:
        self.opened, self.compare, self.hooks = opened, compare, hooks
        self.sides: list[Side] = [side_for(opened, 0, self, compare.check)]
        if compare.against is not None:
            sibling = opened.sibling(compare.against, compare.against_params)
            self.sides.append(side_for(sibling, 1, self, False))
        self._pending: list[dict[int, Record]] = [{} for _ in self.sides]
        self._expects: dict[int, Any] = {}
        self.steps = 0  # steps aligned so far
        # One side, compared with nothing, at a level whose steps mark nothing.
        self._plain = compare.label is None and not opened.level.preempts
        self._ran = 0  # side 0's steps (its batch records)
        self._diverged = 0  # under --check: the steps that differ from their expect
        self._last_diverged: int | None = None
        self.first_divergence: int | None = None
        # The engine's comparison: side a is the golden (as replay --golden has it) or
        # side 0; b is the replay or side 1. ``_slot``: each side's letter, as an index.
        self.result: DiffResult | None = None
        self._aligner: Aligner | None = None
        self._sinks: list[Callable[[Record], None]] = []
        self._slot = [0, 1]
        self._names: tuple[tuple[Said, ...], tuple[Said, ...]] = ((), ())
        # Each slot's records still being compared: their line -> the step they precede.
        self._at: tuple[dict[int, int], dict[int, int]] = ({}, {})
        # Record marks whose step is not run yet.
        self._later: list[tuple[int, tuple[Said, ...]]] = []
        self.golden: Golden | None = None
        self._golden_sink: Callable[[Record], None] | None = None
        if compare.golden is not None or compare.against is not None:
            self.result = _Result(self._record_differs)
            self._aligner = Aligner(self.result)
            a, b = self._aligner.sink("a"), self._aligner.sink("b")
            if compare.golden is not None:
                self._golden_sink = a
                self.golden = Golden(compare.golden, self._golden_record, allow_incomplete)
                self._sinks, self._slot = [b], [1]
                self._names = (("the golden",), ("the replay",))
            else:
                self._sinks = [a, b]
                against = (f"{self.sides[1].name} (", Option("against"), ")")
                self._names = (("the replay",), against)

    def run(self) -> None:
        sides = self.sides
        try:
            if len(sides) == 1:
                sides[0].feed_all()
            else:
                opened = self.opened
                for line, item in inputs(opened):
                    sides[0].feed(line, item)
                    sides[1].feed(line, opened.twin(item))  # as diff's lockstep gives it
                    self._settle()
            self.opened.check_complete()
            for side in sides:
                side.close()
        except InvariantError as e:
            self._broke(e)
            raise
        self._flush()

    def compared(self) -> dict[str, Any] | None:
        """The comparison's outcome, once the run ended: whether anything differs (steps,
        other records), the first step marked, and whether the golden pins a break."""
        if self.compare.label is None:
            return None
        result = self.result
        return {
            "identical": self._diverged == 0 if result is None else result.identical,
            "steps": self._diverged if result is None else result.steps_differing,
            "records": 0 if result is None else result.events_differing,
            "first": self.first_divergence,
            "pins_a_break": self.golden is not None and self.golden.pins_a_break,
        }

    # --- the sides' sink -----------------------------------------------------------------

    def stepped(self, side: int, done: Step) -> None:
        step = done.step
        self.hooks.side_step(side, step, done)
        # Aligned, compared and shown as the dump has it (a golden's records are dicts; the
        # debugger's client is sent JSON).
        record = done.record()
        if self._plain:  # one side, compared with nothing: the index's common case
            self.steps = step + 1
            self.hooks.aligned(step, [record], None)
            return
        if side == 0:
            self._ran += 1
            expect = self.sides[0].expect_batch()
            if expect is not None:
                self._expects[step] = expect
            if done.preempted:
                shown = ", ".join(show_id(r) for r in done.preempted[:3])
                self.hooks.mark(step, "preempt", f"preempted {shown}")
        if self._sinks:
            self._sinks[side](record)
        if len(self.sides) == 1:
            self._aligned(step, [record])
            return
        self._pending[side][step] = record
        other = self._pending[1 - side]
        if step in other:
            records = [self._pending[0].pop(step), self._pending[1].pop(step)]
            self._aligned(step, list(records))

    def event(self, side: int, record: Record, step: int) -> None:
        if self._sinks:
            line = record.get("line")
            if type(line) is int:
                self._at[self._slot[side]][line] = step
            self._sinks[side](record)
            if len(self.sides) == 1:
                self._settle()
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

    def ended(self, side: int, record: Record) -> None:
        """A side's end record: compared with the other's at the end."""
        if self._sinks:
            self._sinks[side](record)

    def diverged(self, side: int, step: int, expected: Any) -> None:
        if step != self._last_diverged:
            self._diverged += 1
            self._last_diverged = step
        self._div(step, "differs from the trace's expect")

    # --- alignment -----------------------------------------------------------------------

    def _div(self, step: int, *text: Said) -> None:
        if self.first_divergence is None or step < self.first_divergence:
            self.first_divergence = step
        self.hooks.mark(step, "div", *text)

    def _aligned(self, step: int, records: list[Record | None]) -> None:
        self.steps = step + 1
        other: Any = None
        compare = self.compare
        mine = records[0]
        if compare.check:
            other = self._expects.pop(step, None)
        elif self.golden is not None:
            other, skipped = self.golden.at(step)
            self._settle()
            for s in skipped:
                self._div(step, f"the golden has a step {s}, which the replay does not")
            if other is None:
                self._div(step, f"the golden has no step {step}")
            elif mine is None or not same(mine, other):
                self._div(step, "differs from the golden")
        elif len(records) == 2:
            other = records[1]
            if mine is None or other is None or not same(mine, other):
                self._div(step, f"{self.sides[1].name} schedules differently")
        if self._later:
            self._marks_due(step)
        self.hooks.aligned(step, records, other)

    def _flush(self) -> None:
        """After every side closed: the steps one side ran and the other did not, and the
        records compared to the end."""
        if len(self.sides) == 2:
            a, b = self._pending
            for step in sorted(set(a) | set(b)):
                self._aligned(step, [a.pop(step, None), b.pop(step, None)])
        self._golden_rest()
        self._finish()

    def _golden_rest(self) -> None:
        if self.golden is not None:
            left = self.golden.rest()
            if left:
                self._div(max(self.steps - 1, 0), f"the golden has {left} more steps")

    def _broke(self, e: InvariantError) -> None:
        """The replay stopped on a broken contract: its partial record compared with the
        golden's end, as ``replay --golden`` compares it (a golden may pin the break)."""
        if self.golden is None:
            return
        self._sinks[0](partial_record(stop_reason(e), self._ran, True))
        self._golden_rest()
        self._finish()

    def _finish(self) -> None:
        if self._aligner is not None:
            self._aligner.settle(final=True)
        self._marks_due(_LATER, max(self.steps - 1, 0))

    # --- the records compared ------------------------------------------------------------

    def _golden_record(self, record: Record, upcoming: int) -> None:
        line = record.get("line")
        if type(line) is int and "batch" not in record:
            self._at[0][line] = upcoming
        assert self._golden_sink is not None
        self._golden_sink(record)

    def _settle(self) -> None:
        """The comparison taken as far as both sides go; the steps of records it is done
        with forgotten (each slot's records come in line order)."""
        aligner = self._aligner
        if aligner is None:
            return
        aligner.settle()
        for at, waiting in zip(self._at, (aligner.events_a, aligner.events_b), strict=True):
            head = waiting[0].get("line") if waiting else None
            while at:
                line = next(iter(at))
                if type(head) is int and line >= head:
                    break
                del at[line]

    def _record_differs(self, difference: RecordDifference) -> None:
        """A record that differs, marked at the step it precedes (side 0's, else the
        other side's); later, if that step has not run yet."""
        lines = difference.lines
        mine = self._slot[0]
        steps = [
            self._at[slot].get(line)
            for slot in (mine, 1 - mine)
            if (line := lines[slot]) is not None
        ]
        step = next((s for s in steps if s is not None), _LATER)
        text = record_said(difference, self._names)
        if step < self.steps:
            self._div(step, *text)
        else:
            self._later.append((step, text))

    def _marks_due(self, step: int, at: int | None = None) -> None:
        """The record marks whose step is ``step`` or before it, marked at ``at`` (the
        step now aligned, by default)."""
        due = [text for s, text in self._later if s <= step]
        if due:
            self._later = [(s, text) for s, text in self._later if s > step]
            for text in due:
                self._div(step if at is None else at, *text)


Name = tuple[Said, ...]  # a side, as a mark names it: words, and the option that gave it


def record_said(difference: RecordDifference, names: tuple[Name, Name]) -> tuple[Said, ...]:
    """A record that differs, as its mark says it: where, and what each side has (the
    parts of the text: words, and the options the sides' names hold)."""
    a, b = names
    if difference.kind == "end":
        fields = [f for f in difference.fields if f[0] != "end"]
        if not fields:  # one side has no end record
            _, x, y = difference.fields[0]
            return ("the end record differs: ", *_each(_short(x), a, _short(y), b))
        said = _joined([_each(f"{f} {_short(x)}", a, _short(y), b) for f, x, y in fields[:3]])
        more = f" (and {len(fields) - 3} more)" if len(fields) > 3 else ""
        return ("the end's counts differ: ", *said, more)
    la, lb = difference.lines
    where = "" if la is None and lb is None else f"line {la if la is not None else lb}: "
    kind = difference.kind
    if kind == "record" and any(f == "partial" for f, _, _ in difference.fields):
        kind = "the partial record (where the replay stopped)"
    if [f for f, _, _ in difference.fields] == ["record"]:  # on one side only
        _, x, y = difference.fields[0]
        record, has, lacks = (x, a, b) if isinstance(x, dict) else (y, b, a)
        if isinstance(record, dict) and record.get("accepted") is False:
            return (f"{where}{kind} rejected by ", *has, ", accepted by ", *lacks)
        return (f"{where}{kind} in ", *has, " only")
    fields = difference.fields[:3]
    said = _joined([_each(f"{f} {_short(x)}", a, _short(y), b) for f, x, y in fields])
    return (f"{where}{kind} differs: ", *said)


def _each(x: str, a: Name, y: str, b: Name) -> tuple[Said, ...]:
    """``X in A, Y in B``."""
    return (f"{x} in ", *a, f", {y} in ", *b)


def _joined(said: list[tuple[Said, ...]]) -> tuple[Said, ...]:
    """Each part's text, ``; `` between."""
    return tuple(p for i, parts in enumerate(said) for p in ((("; ",) if i else ()) + parts))


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = ["Compare", "Golden", "Hooks", "Session", "record_said"]
