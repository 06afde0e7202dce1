"""The dump's step records (docs/trace-format.md, "Dump"), written straight from a batch.

A replay whose only output is the JSONL dump has no use for a batch record's dicts: each
task's entry is a struct msgspec encodes, the same bytes orjson gives the dict form
(ints and strings are spelt alike by both; a task's ``meta`` keeps orjson's spelling,
embedded as it wrote it, since the two spell some floats differently).
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from ..model.task import DECODE, Task
from .writer import JsonlWriter


class _Entry(msgspec.Struct, gc=False):
    tid: Any
    sid: Any
    kind: str
    size: int


class _EntryWithMeta(msgspec.Struct, gc=False):
    tid: Any
    sid: Any
    kind: str
    size: int
    meta: msgspec.Raw


class _Step(msgspec.Struct, gc=False):
    step: int
    batch: list[_Entry | _EntryWithMeta]
    tokens: int
    queued: int


class StepLines:
    """Writes ``{"step", "batch", "tokens", "queued"}`` lines to a dump's writer, byte for
    byte what ``writer.write`` makes of the record the engine would otherwise build."""

    def __init__(self, writer: JsonlWriter) -> None:
        self.writer = writer
        # Held here, not looked up as module globals on every line (the hot path).
        self._encode = msgspec.json.Encoder().encode
        self._entry = _Entry
        self._step = _Step

    def write(self, step: int, batch: list[Task], tokens: int, queued: int) -> None:
        entry = self._entry
        entries: list[_Entry | _EntryWithMeta] = []
        for t in batch:
            # The kind as a plain str: msgspec reads an enum's value through Python code.
            kind = "decode" if t.kind is DECODE else "prefill"
            if t.meta is None:
                entries.append(entry(t.tid, t.sid, kind, t.size))
            else:
                meta = msgspec.Raw(orjson.dumps(t.meta))
                entries.append(_EntryWithMeta(t.tid, t.sid, kind, t.size, meta))
        self.writer.write_line(self._encode(self._step(step, entries, tokens, queued)) + b"\n")


__all__ = ["StepLines"]
