"""Comparing a replay's dump with a golden dump, aligned by step (not by line)."""

from __future__ import annotations

from collections.abc import Iterator

from ..formats.dump import Record, read_dump
from .diff import DiffResult, _Aligner


class GoldenComparison:
    """A sink for the replay's records that reads the golden alongside, step for step.

    One extra step on either side shows as that one step, not as every later line.
    """

    def __init__(self, golden: str, replay_label: str) -> None:
        self.golden = golden
        self.result = DiffResult((f"golden {golden}", replay_label), ({}, {}))
        self._aligner = _Aligner(self.result)
        self._golden_sink = self._aligner.sink("a")
        self._replay_sink = self._aligner.sink("b")
        self._records: Iterator[Record] = read_dump(golden)
        self.golden_end: Record | None = None
        self.replay_end: Record | None = None
        self.records = 0

    def _pull(self) -> bool:
        record = next(self._records, None)
        if record is None:
            return False
        if "end" in record:
            self.golden_end = record
        else:
            self._golden_sink(record)
        return True

    def __call__(self, record: Record) -> None:
        self.records += 1
        if "end" in record:
            self.replay_end = record
        else:
            self._replay_sink(record)
        self._pull()
        self._aligner.settle()

    def finish(self) -> None:
        while self._pull():
            pass
        self._aligner.settle(final=True)
        if self.golden_end != self.replay_end:
            self.result.events_differing += 1

    @property
    def same(self) -> bool:
        return self.result.identical and self.golden_end == self.replay_end
