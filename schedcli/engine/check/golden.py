"""Comparing a replay's dump with a golden dump, aligned by step (not by line)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...formats.dump import read_dump
from ...model.records import Left, Record
from ...model.steps import Emitted
from ..diff import Aligner, DiffResult
from ..run import Driver


class GoldenComparison:
    """A sink for the replay's records that reads the golden alongside, step for step,
    through the same ``Aligner`` as ``diff`` of two dumps (so the two always agree).

    One extra step on either side shows as that one step, not as every later line. A
    golden that is not a complete dump (no end record, steps out of order) is bad input.
    """

    def __init__(
        self,
        golden: str,
        replay_label: str,
        engine: Callable[[], Driver] | None = None,
        allow_incomplete: bool = False,
    ) -> None:
        """``engine``: the replay being compared; its policy's reasons at the first
        differing step are kept as the step is compared (no second replay).
        ``allow_incomplete``: a golden cut short is compared as far as it goes."""
        self.golden = golden
        self.result = DiffResult((f"golden {golden}", replay_label), ({}, {}))
        self._aligner = Aligner(self.result)
        self.first_left: Left = None
        self.first_left_known = False
        self.first_line: int | None = None  # the trace line being replayed when it differed
        if engine is not None:
            self._aligner.on_first = lambda step: self._reasons_now(engine(), step)
        self._golden_sink = self._aligner.sink("a")
        self._replay_sink = self._aligner.sink("b")
        self._records: Iterator[Record] = read_dump(
            golden, allow_incomplete=allow_incomplete, golden=True
        )
        self.records = 0
        self.pins_a_break = False  # the golden ends with a contract break (seen so far)

    def _pull(self) -> bool:
        record = next(self._records, None)
        if record is None:
            return False
        if "partial" in record:
            self.pins_a_break = True
        self._golden_sink(record)
        return True

    def __call__(self, record: Emitted) -> None:
        self.records += 1
        self._replay_sink(record)
        self._pull()
        self._aligner.settle()

    def finish(self) -> None:
        while self._pull():
            pass
        self._aligner.settle(final=True)

    def _reasons_now(self, engine: Driver, step: int) -> None:
        self.first_line = engine.current_line or None
        if engine.last_batch_step == step:
            self.first_left = engine.left_behind()
            self.first_left_known = True

    def pins(self, ending: Record) -> bool:
        """The replay stopped with ``ending`` (a contract break's partial record): whether
        the golden pins exactly that, every step before it the same. (Where it pins
        another break, ``pins_a_break`` says so: a difference, not an error.)"""
        self(ending)
        self.finish()
        return self.same

    @property
    def same(self) -> bool:
        return self.result.identical

    def left_out(self, reasons_at: Callable[[int], Left]) -> LeftOut | None:
        """What the replay left out at the first differing step that the golden has there,
        and why (its reasons kept as the step was compared; else ``reasons_at(step)``,
        found past it); None where nothing was left out (no difference, or no batch)."""
        first = self.result.first
        if first is None:
            return None
        only_golden, _ = first.moved()
        if not only_golden or first.b is None:  # no batch there: nothing left out
            return None
        left = self.first_left if self.first_left_known else reasons_at(first.step)
        return LeftOut(only_golden, left)


@dataclass(frozen=True)
class LeftOut:
    """At a golden's first differing step: the tasks only the golden dispatched, and the
    replay's policy's reasons there (None: it gave none)."""

    tids: list[Any]
    left: Left
