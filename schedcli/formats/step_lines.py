"""The dump's step records (docs/trace-format.md, "Dump"), written straight from a batch.

A replay whose only output is the JSONL dump has no use for a batch record's dicts: each
task's entry is spelt here as text, the same bytes orjson gives the dict form. The common
entry, a decode of one token with an integer tid, is its tid and a tail kept per session
(``,"sid":S,"kind":"decode","size":1}``); any other goes through orjson itself. (A
trace's ids are 64-bit integers or strings, which orjson and ``str`` spell alike.)
"""

from __future__ import annotations

from typing import Final

import orjson

from ..model.task import DECODE, Id, Task
from .writer import JsonlWriter, task_entry

# Sessions whose decode tail is kept; past this many the tails start over.
_TAILS_KEPT: Final = 4096
_FIRST: Final = '{"tid":'
_NEXT: Final = ',{"tid":'


class StepLines:
    """Writes ``{"step", "batch", "tokens", "queued"}`` lines to a dump's writer, byte for
    byte what ``writer.write`` makes of the record the engine would otherwise build."""

    def __init__(self, writer: JsonlWriter) -> None:
        self.writer = writer
        # sid -> its decode entry's tail. Keyed only by exact ints and strs: 1 and True
        # are one dict key but spelt differently.
        self._tails: dict[Id, str] = {}

    def write(self, step: int, batch: list[Task], tokens: int, queued: int) -> None:
        tails = self._tails
        # The line's pieces, joined once: a decode's entry is its opening (with a comma
        # before all but the first entry), its tid and its session's tail.
        pieces: list[str] = [f'{{"step":{step},"batch":[']
        first = True
        for t in batch:
            tid, sid = t.tid, t.sid
            if (
                type(tid) is int
                and t.kind is DECODE
                and t.size == 1
                and t.meta is None
                and t.prepared is None
                and (type(sid) is int or type(sid) is str)
            ):
                tail = tails.get(sid)
                if tail is None:
                    tail = self._tail(sid)
                pieces.append(_FIRST if first else _NEXT)
                pieces.append(str(tid))
                pieces.append(tail)
            else:
                if not first:
                    pieces.append(",")
                pieces.append(_entry(t))
            first = False
        pieces.append(f'],"tokens":{tokens},"queued":{queued}}}\n')
        self.writer.write_line("".join(pieces).encode())

    def _tail(self, sid: Id) -> str:
        tails = self._tails
        if len(tails) >= _TAILS_KEPT:
            tails.clear()
        tail = tails[sid] = ',"sid":' + orjson.dumps(sid).decode() + ',"kind":"decode","size":1}'
        return tail


def _entry(t: Task) -> str:
    return orjson.dumps(task_entry(t)).decode()


__all__ = ["StepLines"]
