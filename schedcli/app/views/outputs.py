"""Where a replay's records go: every output (the table, the JSONL dump, a Perfetto
timeline, a golden comparison, a golden being written) is one ``Output``, built from the
options before the trace is opened, told what it needs when the engine opens it
(``opened``: the budget, the names), then fed ``record`` and ``left``, then ``close``d.

A new view for ``replay -f NAME``: a class here (or in a module of its own) implementing
``Output``, and one line in ``VIEWS`` (docs/architecture.md, "Where to add").
"""

from __future__ import annotations

import io
from collections.abc import Callable, Container
from contextlib import ExitStack
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any, ClassVar, NamedTuple

from ...engine.ledger import Totals
from ...formats.dump import RecordFilter, partial_record
from ...formats.perfetto import PerfettoWriter
from ...formats.writer import JsonlWriter
from ...model.errors import InvariantError
from ...model.records import Left, Record, discard
from ...model.steps import Emitted
from ...streams.interrupt import stop_reason
from ...streams.output import atomic_output
from ..console import data_console

if TYPE_CHECKING:
    from .render import TableRows


class Opened(NamedTuple):
    """What the engine knows once the trace is open, for the outputs that need it."""

    name: str
    policy_name: str
    budget: int | None
    steps: Callable[[], int] = lambda: 0  # steps replayed so far (for a partial record)


def ending(stopped: BaseException, steps: int) -> Record:
    """The partial record of a replay stopped by ``stopped``: marked as a contract break
    when it was one (a golden may pin that)."""
    return partial_record(stop_reason(stopped), steps, isinstance(stopped, InvariantError))


class Output:
    """One place records go. ``wants_reasons``: ``left`` is worth the policy's reasons."""

    wants_reasons: ClassVar[bool] = False

    def opened(self, trace: Opened) -> None:
        """The trace is open (before the first record)."""

    def record(self, record: Emitted) -> None:
        raise NotImplementedError

    def left(self, step: int, left: Left) -> None:
        """Why each queued task was left out of the batch of ``step`` (if wanted)."""

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        """After the last record (``totals``), or when the replay stopped early (``stopped``)."""


class DumpView(Output):
    """``-f jsonl``: the dump, one JSON object a line; a replay stopped early ends it with
    a ``partial`` record instead of ``end``."""

    def __init__(self, out: IO[bytes], stack: ExitStack, to_file: bool) -> None:
        self._write = JsonlWriter(out)
        self.record = self._write  # type: ignore[method-assign]  # the hot path: no wrapper
        from ...formats.step_lines import StepLines  # here: not a cost of every start-up

        # Step records written from the batch itself, when this is the only output.
        self.step_lines = StepLines(self._write)
        self._steps: Callable[[], int] = lambda: 0

    def opened(self, trace: Opened) -> None:
        self._steps = trace.steps

    def record(self, record: Emitted) -> None:
        self._write(record)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        if stopped is not None:
            self._write(ending(stopped, self._steps()))


class TableView(Output):
    """``-f table``: each step for people, with reasons, then a summary."""

    wants_reasons = True

    def __init__(self, out: IO[bytes], stack: ExitStack, to_file: bool) -> None:
        if to_file:
            text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
            stack.callback(text.detach)  # leaves `out` open for its own context
            self.console = data_console(text, width=120)
        else:
            self.console = data_console()
        self._view: TableRows | None = None
        self._trace: Opened | None = None

    def opened(self, trace: Opened) -> None:
        from .render import TableRows  # rich's tables: only for this view

        self._trace = trace
        self._view = TableRows(self.console, trace.budget)

    def record(self, record: Emitted) -> None:
        assert self._view is not None  # opened before the first record
        self._view(record)

    def left(self, step: int, left: Left) -> None:
        assert self._view is not None
        self._view.left(step, left)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        if totals is not None and self._trace is not None:
            from .render import summary_table

            name, label = self._trace.name, self._trace.policy_name
            self.console.print(f"\n[bold]{name}[/] under [bold]{label}[/]")
            self.console.print(summary_table(totals, "summary"))


VIEWS: dict[str, Callable[[IO[bytes], ExitStack, bool], Output]] = {
    "table": TableView,
    "jsonl": DumpView,
}
"""The views ``replay -f`` offers, by name: the one registry line a new view adds."""

# replay's -f: a name from the registry above.
OutputFormat = StrEnum("OutputFormat", [(name, name) for name in VIEWS])  # type: ignore[misc]


class Filtered(Output):
    """``--steps`` / ``--session``: only the records a user asked to see reach the view."""

    def __init__(
        self,
        view: Output,
        steps: Container[int] | None,
        session: Any,
        upcoming_step: Callable[[], int],
    ) -> None:
        self.view = view
        self.wants_reasons = view.wants_reasons  # type: ignore[misc]
        self._filter = RecordFilter(
            view.record, steps=steps, session=session, upcoming_step=upcoming_step
        )

    @property
    def passed(self) -> int:
        return self._filter.passed

    def opened(self, trace: Opened) -> None:
        self.view.opened(trace)

    def record(self, record: Emitted) -> None:
        self._filter(record)

    def left(self, step: int, left: Left) -> None:
        self.view.left(step, left)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        self.view.close(totals, stopped)


class Timeline(Output):
    """``--perfetto FILE``: a Chrome trace-event timeline, written whole or not at all."""

    wants_reasons = True

    def __init__(self, path: str, stack: ExitStack) -> None:
        self._out = stack.enter_context(atomic_output(path))
        self._writer: PerfettoWriter | None = None

    def opened(self, trace: Opened) -> None:
        title = f"schedcli replay {trace.name} ({trace.policy_name})"
        self._writer = PerfettoWriter(self._out, title=title, budget=trace.budget)

    def record(self, record: Emitted) -> None:
        assert self._writer is not None
        self._writer(record)

    def left(self, step: int, left: Left) -> None:
        assert self._writer is not None
        self._writer.left(step, left)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        if totals is not None and self._writer is not None:
            self._writer.close()


class Fanout:
    """Every output's ``record`` and ``left``, as the engine's two callbacks."""

    def __init__(self, outputs: list[Output]) -> None:
        self.outputs = outputs
        records = [o.record for o in outputs]
        self.emit: Callable[[Emitted], None] = records[0] if len(records) == 1 else self._all
        self._records = records
        listeners = [o.left for o in outputs if o.wants_reasons]
        self._listeners = listeners
        self.on_left: Callable[[int, Left], None] | None = self._left if listeners else None
        if not records:
            self.emit = discard  # the engine then builds no step records
        # A lone dump takes step records straight from the batch (no dict a task).
        only = outputs[0] if len(outputs) == 1 else None
        self.dump = only.step_lines if isinstance(only, DumpView) else None

    def _all(self, record: Emitted) -> None:
        for emit in self._records:
            emit(record)

    def _left(self, step: int, left: Left) -> None:
        for listener in self._listeners:
            listener(step, left)


__all__ = [
    "VIEWS",
    "DumpView",
    "Fanout",
    "Filtered",
    "Opened",
    "Output",
    "OutputFormat",
    "TableView",
    "Timeline",
]
