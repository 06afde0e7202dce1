"""Comparing a replay's dump with a golden dump, aligned by step (not by line)."""

from __future__ import annotations

from collections.abc import Iterator

from ..formats.dump import Record, read_dump
from .diff import Aligner, DiffResult


class GoldenComparison:
    """A sink for the replay's records that reads the golden alongside, step for step,
    through the same ``Aligner`` as ``diff`` of two dumps (so the two always agree).

    One extra step on either side shows as that one step, not as every later line. A
    golden that is not a complete dump (no end record, steps out of order) is bad input.
    """

    def __init__(self, golden: str, replay_label: str) -> None:
        self.golden = golden
        self.result = DiffResult((f"golden {golden}", replay_label), ({}, {}))
        self._aligner = Aligner(self.result)
        self._golden_sink = self._aligner.sink("a")
        self._replay_sink = self._aligner.sink("b")
        self._records: Iterator[Record] = read_dump(golden)
        self.records = 0

    def _pull(self) -> bool:
        record = next(self._records, None)
        if record is None:
            return False
        self._golden_sink(record)
        return True

    def __call__(self, record: Record) -> None:
        self.records += 1
        self._replay_sink(record)
        self._pull()
        self._aligner.settle()

    def finish(self) -> None:
        while self._pull():
            pass
        self._aligner.settle(final=True)

    @property
    def same(self) -> bool:
        return self.result.identical
