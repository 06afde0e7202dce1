"""Writing trace v1: a header, then one event a line, whole lines only.

The one place traces are written (simulate, the recorder, tests), so every trace
schedcli writes is one every schedcli command reads back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any, Final

import orjson

from ..model.records import TaskEntry
from ..model.steps import Emitted, Step
from ..model.task import Id, Task
from ..streams.interrupt import guard, raise_held, whole_write

FORMAT_VERSION = 1
_NEWLINE: Final = orjson.OPT_APPEND_NEWLINE


def task_record(t: Task, *, outputs: bool = False) -> dict[str, Any]:
    """A task's fields as the trace spells them; ``outputs`` adds ``produce_output``."""
    record: dict[str, Any] = {"tid": t.tid, "sid": t.sid, "kind": t.kind.value, "size": t.size}
    if t.prepared is not None:
        record["prepared"] = prepared_record(t.prepared)
    if t.position is not None:
        record["position"] = t.position
    if outputs and t.produce_output is not None:
        record["produce_output"] = t.produce_output
    if t.priority:
        record["priority"] = t.priority
    if t.meta is not None:
        record["meta"] = t.meta
    return record


def prepared_record(prepared: tuple[int, int]) -> dict[str, int]:
    """A task's ``prepared`` (backing size, offset) as traces and dumps spell it."""
    return {"size": prepared[0], "offset": prepared[1]}


def task_entry(t: Task) -> TaskEntry:
    """A task as a step record lists it (``prepared`` and ``meta`` only when it has them):
    the one place its shape is spelt, for the engine's records, a simulation's timeline and
    ``StepLines``."""
    if t.prepared is not None:
        entry: TaskEntry = {"tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size}
        entry["prepared"] = prepared_record(t.prepared)
        if t.meta is not None:
            entry["meta"] = t.meta
        return entry
    if t.meta is None:
        return {"tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size}
    return {"tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size, "meta": t.meta}


class JsonlWriter:
    """One JSON object a line, whole lines only: a stop signal waits for the line being
    written, so a stream cut short still ends at a record boundary."""

    def __init__(self, out: IO[bytes] | LineBuffer) -> None:
        self._write = out.write
        self.out = out
        # Held here, not looked up as module globals on every line (the hot path).
        self._dumps = orjson.dumps
        self._guard = guard
        # A LineBuffer is called natively, not through its bound method (compiled, about
        # four times cheaper a line).
        self._buffer: LineBuffer | None = out if isinstance(out, LineBuffer) else None

    def __call__(self, record: Emitted) -> None:
        self.write(record)

    def write(self, record: Emitted) -> None:
        """The same as calling the writer; compiled callers reach it without the generic
        call path. A replay's step is written as its dump record (``Step.record``)."""
        if isinstance(record, Step):
            record = record.record()
        self.write_line(self._dumps(record, None, _NEWLINE))

    def write_line(self, data: bytes) -> None:
        """One line already serialized, ending in a newline."""
        buffer = self._buffer
        if buffer is not None:  # a LineBuffer hands on whole lines under the guard itself
            buffer.write(data)
            return
        signals = self._guard
        signals.writing = True
        try:
            self._write(data)
        finally:
            signals.writing = False
        if signals.held is not None:
            raise_held()


class LineBuffer:
    """Whole lines gathered in memory and handed on in writes of about ``size`` bytes: one
    call per many lines, where a buffered file takes a lock on every write. Only whole
    lines are handed on, so ``out`` always ends on a line boundary. ``flush`` hands on
    what is gathered, then flushes ``out``; the owner flushes before closing ``out``."""

    def __init__(self, out: IO[bytes], size: int = 1 << 16) -> None:
        self.out = out
        self._size = size
        self._gathered = bytearray()

    def write(self, data: bytes) -> int:
        gathered = self._gathered
        gathered += data
        if len(gathered) >= self._size:
            self._hand_on()
        return len(data)

    def _hand_on(self) -> None:
        """What is gathered, to ``out``: a stop signal waits for it (whole lines only)."""
        with whole_write():
            self.out.write(self._gathered)
            self._gathered.clear()

    def flush(self) -> None:
        if self._gathered:
            self._hand_on()
        self.out.flush()


class TraceWriter:
    """Events as trace lines on ``out``."""

    def __init__(self, out: IO[bytes] | LineBuffer) -> None:
        self.out = out
        # An event already in the trace's shape (the recorder's hot path: one call).
        self.event = self._line = JsonlWriter(out)

    def header(
        self, policy: str | None = None, params: dict[str, Any] | None = None, meta: Any = None
    ) -> None:
        record: dict[str, Any] = {"schedcli": FORMAT_VERSION}
        if policy is not None:
            record["policy"] = policy
        if params is not None:
            record["params"] = params
        if meta is not None:
            record["meta"] = meta
        self._line(record)

    def submit(
        self,
        tasks: Sequence[Task],
        *,
        t: float | None = None,
        inline: bool = True,
        outputs: bool = False,
        meta: Any = None,
    ) -> None:
        """A group; a group of one is written inline unless ``inline`` is False."""
        record: dict[str, Any] = {"op": "submit"}
        if t is not None:
            record["t"] = t
        if inline and len(tasks) == 1 and tasks[0].meta is None:
            record.update(task_record(tasks[0], outputs=outputs))
        else:
            record["tasks"] = [task_record(x, outputs=outputs) for x in tasks]
        if meta is not None:
            record["meta"] = meta
        self._line(record)

    def cancel(self, sid: Id, *, t: float | None = None) -> None:
        self._line({"op": "cancel", **({"t": t} if t is not None else {}), "sid": sid})

    def get_work(
        self, expect: Sequence[Id] | None = None, *, step: int | None = None, t: float | None = None
    ) -> None:
        record: dict[str, Any] = {"op": "get_work"}
        if step is not None:
            record["step"] = step
        if t is not None:
            record["t"] = t
        if expect is not None:
            record["expect"] = list(expect)
        self._line(record)

    def clear(self, *, t: float | None = None) -> None:
        self._line({"op": "clear", **({"t": t} if t is not None else {})})

    def partial(self, reason: str, **details: Any) -> None:
        """The last line of a trace whose writer stopped before its end (a contract break,
        a signal, a scheduler that raised): readers then know it is not the whole run."""
        self._line({"partial": {"reason": reason, **details}})
