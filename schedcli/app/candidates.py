"""Shrink's candidates: some of a trace's lines, named by ranges of line numbers, written
out by streaming a private copy of the trace. Memory follows how many pieces a candidate
is in (and how many expects the trace has), never the trace's size."""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from ..formats.requests import RequestReader
from ..formats.source import display_name, numbered_lines, open_binary
from ..formats.trace import open_trace, partial_marker

Event = dict[str, Any]
_CHUNK = 1 << 20
# Every MARK-th line's byte offset is kept (8 bytes a thousand lines), so a candidate is
# read from near its first line, not from the top of the trace.
MARK = 1024


def has_expect(e: Event) -> bool:
    return e.get("op") in ("get_work", "step") and "expect" in e


class Ranges:
    """Ascending, disjoint line numbers as ``(start, stop)`` spans. Sliced by position and
    added like a list, so delta debugging takes it as it takes a list."""

    __slots__ = ("_len", "spans")

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self.spans = tuple(spans)
        self._len = sum(b - a for a, b in self.spans)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for a, b in self.spans:
            yield from range(a, b)

    def __getitem__(self, where: slice) -> Ranges:
        start, stop, _ = where.indices(self._len)
        spans, pos = [], 0
        for a, b in self.spans:
            lo, hi = max(start - pos, 0), min(stop - pos, b - a)
            if lo < hi:
                spans.append((a + lo, a + hi))
            pos += b - a
            if pos >= stop:
                break
        return Ranges(spans)

    def __add__(self, other: Ranges) -> Ranges:
        spans = list(self.spans)
        for a, b in other.spans:
            if spans and spans[-1][1] == a:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
        return Ranges(spans)


class Lines:
    """The trace's events one a line, in a private copy beside the candidates (in
    ``folder``): no blank lines, no partial markers, the header kept apart."""

    def __init__(self, path: str) -> None:
        self.name = display_name(path)
        self._folder = tempfile.TemporaryDirectory(prefix="schedcli-shrink-")
        self.folder = self._folder.name
        raw = os.path.join(self.folder, "original")
        with open_binary(path, self.name) as stream, open(raw, "wb") as out:
            shutil.copyfileobj(stream, out, _CHUNK)
        with open_trace(raw, name=self.name) as reader:  # every line valid, as replay reads
            header = reader.header
            self.level = header.level if header is not None else "task"
            for _ in RequestReader(reader) if self.level == "request" else reader:
                pass
        self.header: bytes | None = None
        self.count = 0
        self.expects = array("q")  # the lines that are get_work events with an expect
        self.marks = array("q")  # the byte offset of line k * MARK
        self.path = os.path.join(self.folder, "trace.jsonl")
        offset = 0
        with open(raw, "rb") as stream, open(self.path, "wb", buffering=_CHUNK) as out:
            for _, content, _ in numbered_lines(stream, self.name):
                content = content.strip()
                if partial_marker(content) is not None:
                    continue
                first = self.header is None and not self.count
                if first and b'"schedcli"' in content and "schedcli" in orjson.loads(content):
                    self.header = content
                    continue
                if b'"expect"' in content and has_expect(orjson.loads(content)):
                    self.expects.append(self.count)
                if self.count % MARK == 0:
                    self.marks.append(offset)
                out.write(content + b"\n")
                offset += len(content) + 1
                self.count += 1
        os.unlink(raw)

    def close(self) -> None:
        self._folder.cleanup()


class _Cursor:
    """Reads the copy forward, line by line or a run of lines at a time."""

    def __init__(self, f: IO[bytes], marks: Sequence[int]) -> None:
        self._f = f
        self._marks = marks
        self._buf = b""  # what is read and not yet passed: from the start of line ``line``
        self.line = 0

    def _more(self) -> bool:
        data = self._f.read(_CHUNK)
        self._buf = self._buf + data if self._buf else data
        return bool(data)

    def skip_to(self, to: int) -> None:
        """Pass lines up to ``to`` unread where a mark is nearer than this line."""
        mark = to // MARK
        if mark * MARK > self.line:
            self._f.seek(self._marks[mark])
            self._buf = b""
            self.line = mark * MARK
        self.advance(to, None)

    def advance(self, to: int, write: Callable[[bytes], Any] | None) -> None:
        """Pass lines up to ``to`` (not included), writing them if ``write`` is given."""
        while self.line < to:
            buf, need = self._buf, to - self.line
            cut, passed = 0, 0
            if need < 64:  # a few lines: find them, do not count the whole buffer
                while passed < need:
                    found = buf.find(b"\n", cut)
                    if found < 0:
                        break
                    cut, passed = found + 1, passed + 1
            else:
                whole = buf.count(b"\n")
                if whole <= need:
                    cut, passed = (buf.rfind(b"\n") + 1 if whole else 0), whole
                else:
                    for _ in range(need):
                        cut = buf.index(b"\n", cut) + 1
                    passed = need
            if passed:
                if write is not None:
                    write(buf[:cut])
                self._buf = buf[cut:]
                self.line += passed
            elif not self._more():
                return

    def take(self) -> bytes:
        """The next line, without its newline."""
        while b"\n" not in self._buf:
            if not self._more():
                break
        line, _, self._buf = self._buf.partition(b"\n")
        self.line += 1
        return line


@dataclass(frozen=True)
class Candidate:
    """Some of the trace's lines, with the expects of ``stripped`` lines dropped and some
    groups' tasks cut (``tasks``); events are only ever dropped, never edited."""

    kept: Ranges
    stripped: Sequence[int] = ()  # ascending line numbers whose expect is dropped
    tasks: Mapping[int, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kept)

    def event(self, raw: bytes, i: int) -> Event:
        """Line ``i`` (``raw``) as this candidate has it."""
        e: Event = orjson.loads(raw)
        at = bisect.bisect_left(self.stripped, i)
        if at < len(self.stripped) and self.stripped[at] == i:
            e = {k: v for k, v in e.items() if k != "expect"}
        if i in self.tasks:
            e = {**e, "tasks": self.tasks[i]}
        return e

    def lines(self, lines: Lines) -> Iterator[tuple[int, bytes]]:
        """Each kept line's number and text (for a small candidate)."""
        with open(lines.path, "rb") as f:
            cursor = _Cursor(f, lines.marks)
            for a, b in self.kept.spans:
                cursor.skip_to(a)
                for i in range(a, b):
                    yield i, cursor.take()

    def write(self, lines: Lines, out: IO[bytes], *, canonical: bool = False) -> None:
        """The candidate as a trace: runs of lines copied as they are, edited lines
        re-encoded (``canonical``: every line re-encoded, as the shrunk trace is written)."""
        write, dumps = out.write, orjson.dumps
        if lines.header is not None:
            write((dumps(orjson.loads(lines.header)) if canonical else lines.header) + b"\n")
        if canonical:
            for i, raw in self.lines(lines):
                write(dumps(self.event(raw, i)) + b"\n")
            return
        edits = sorted({*self.stripped, *self.tasks})
        with open(lines.path, "rb") as f:
            cursor = _Cursor(f, lines.marks)
            for a, b in self.kept.spans:
                cursor.skip_to(a)
                for e in edits[bisect.bisect_left(edits, a) : bisect.bisect_left(edits, b)]:
                    cursor.advance(e, write)
                    write(dumps(self.event(cursor.take(), e)) + b"\n")
                cursor.advance(b, write)
