"""Shrink's candidates: some of a trace's lines, named by ranges of line numbers, written
out by streaming a private copy of the trace. Memory follows how many pieces a candidate
is in and how many expects the trace has, never the trace's bytes (a line's offset is kept
every 64 lines: 8 bytes where the lines take some 4 KB)."""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import IO, Any

import orjson

from ...formats.trace import open_trace, partial_marker
from ...streams.source import (
    DEFAULT_MAX_LINE_BYTES,
    display_name,
    lines_of,
    numbered_chunks,
    open_binary,
)
from ..levels.table import level_of

Event = dict[str, Any]
_LIMIT = DEFAULT_MAX_LINE_BYTES  # the copy's lines were read within it, as replay reads
_CHUNK = 1 << 20
# A candidate's reads: a few marks' worth of lines, so one seek and read finds a span's
# start and no span rereads a megabyte.
_READ = 1 << 14
# A candidate of at most SMALL lines and at most HELD bytes (bounded from the marks) is
# replayed from memory, its lines held once read; all lines held take at most 2 * HELD.
SMALL = 4096
HELD = 1 << 25
# Every MARK-th line's byte offset is kept (8 bytes each 64 lines: 250 KB for two million),
# so a candidate is read from near each span's first line, not from the top of the trace.
MARK = 64


# The calls that make a step, and the ones a recording checks with an expect: get_work; a
# request-level step (or a split step's schedule and update).
STEP_OPS = frozenset({"get_work", "step", "schedule", "update"})


def has_expect(e: Event) -> bool:
    return e.get("op") in STEP_OPS and "expect" in e


class Ranges:
    """Ascending, disjoint line numbers as ``(start, stop)`` spans. Sliced by position and
    added like a list, so delta debugging takes it as it takes a list."""

    __slots__ = ("_len", "spans")

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self.spans = tuple(spans)
        self._len = sum(b - a for a, b in self.spans)

    @classmethod
    def of(cls, lines: Iterable[int]) -> Ranges:
        """The spans of ascending, distinct line numbers."""
        spans: list[tuple[int, int]] = []
        for i in lines:
            if spans and spans[-1][1] == i:
                spans[-1] = (spans[-1][0], i + 1)
            else:
                spans.append((i, i + 1))
        return cls(spans)

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ranges) and self.spans == other.spans

    __hash__ = None  # type: ignore[assignment]

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
            level_of(reader.header).read_all(reader)
        self.header: bytes | None = None
        self.count = 0
        self.expects = array("q")  # the lines that are get_work events with an expect
        self.marks = array("q")  # the byte offset of line k * MARK
        self.path = os.path.join(self.folder, "trace.jsonl")
        self.held: dict[int, bytes] = {}  # lines of small candidates, read once
        self.held_bytes = 0
        self._offset = 0  # the copy's length so far
        with open(raw, "rb") as stream, open(self.path, "wb", buffering=_CHUNK) as out:
            for first_line, body, complete, _ in numbered_chunks(stream, self.name):
                if complete and self._copy_whole(body, out):
                    continue
                for _, content, _ in lines_of(first_line, body, complete, self.name, _LIMIT):
                    self._copy_line(content.strip(), out)
        os.unlink(raw)

    def _copy_line(self, content: bytes, out: IO[bytes]) -> None:
        if partial_marker(content) is not None:
            return
        first = self.header is None and not self.count
        if first and b'"schedcli"' in content and "schedcli" in orjson.loads(content):
            self.header = content
            return
        if b'"expect"' in content and has_expect(orjson.loads(content)):
            self.expects.append(self.count)
        if self.count % MARK == 0:
            self.marks.append(self._offset)
        out.write(content + b"\n")
        self._offset += len(content) + 1
        self.count += 1

    def _copy_whole(self, body: bytes, out: IO[bytes]) -> bool:
        """A read of plain lines copied as it is, its marks found from the lines' lengths;
        False, having copied nothing, if any line needs a look of its own: the first, a
        blank one, one with spaces around it, a partial marker."""
        if (not self.count and self.header is None) or b'"partial"' in body:
            return False
        lines = body.split(b"\n")
        lines.pop()  # after the last newline: nothing
        # strip gives back the very line when it has nothing to strip: an identity compare.
        if b"" in lines or list(map(bytes.strip, lines)) != lines:
            return False
        if b'"expect"' in body:
            loads = orjson.loads
            self.expects.extend(
                self.count + k
                for k, line in enumerate(lines)
                if b'"expect"' in line and has_expect(loads(line))
            )
        out.write(body)
        before = list(accumulate(map(len, lines), initial=0))  # line k: before[k] + k bytes in
        for k in range(-self.count % MARK, len(lines), MARK):
            self.marks.append(self._offset + before[k] + k)
        self._offset += len(body)
        self.count += len(lines)
        return True

    def index(self, line: int) -> int:
        """The copy's line number of ``line`` of a candidate file that keeps a prefix of
        the copy (file lines count from 1, the header among them)."""
        return line - 1 - (self.header is not None)

    def bound(self, kept: Ranges) -> int:
        """At least the bytes of the ``kept`` lines, at most the copy's: the blocks of
        ``MARK`` lines they are in, each counted once."""
        marks, total, size, counted = self.marks, self._offset, 0, 0  # blocks before counted
        for a, b in kept.spans:
            first, end = max(a // MARK, counted), -(-b // MARK)
            if first < end:
                size += (marks[end] if end < len(marks) else total) - marks[first]
                counted = end
        return size

    def close(self) -> None:
        self._folder.cleanup()


class _Cursor:
    """Reads the copy forward, line by line or a run of lines at a time.

    Holds one read (``_buf``, whose byte ``_at`` starts line ``line``) and cuts lines from
    it without copying the rest. A run that passes marks is copied by their byte offsets,
    without looking for newlines: a run of any length costs at most ``MARK`` lines' search.
    """

    def __init__(self, f: IO[bytes], marks: Sequence[int]) -> None:
        self._f = f
        self._marks = marks
        self._buf = b""
        self._at = 0
        self._base = 0  # the file offset of _buf[0]; the file stands at _base + len(_buf)
        self.line = 0

    def _more(self) -> bool:
        """Read on, keeping the unread rest of the buffer (at most a partial line)."""
        data = self._f.read(_READ)
        if not data:
            return False
        rest = self._buf[self._at :]
        self._base += self._at
        self._buf, self._at = (rest + data if rest else data), 0
        return True

    def _jump(self, offset: int, line: int) -> None:
        """Move to ``line``, which starts at byte ``offset``, dropping what is held."""
        self._f.seek(offset)
        self._buf, self._at, self._base, self.line = b"", 0, offset, line

    def skip_to(self, to: int) -> None:
        """Pass lines up to ``to`` unread where a mark is nearer than this line."""
        mark = min(to // MARK, len(self._marks) - 1)
        if mark * MARK > self.line:
            held = self._marks[mark] - self._base
            if held < len(self._buf):  # in this read already
                self._at, self.line = held, mark * MARK
            else:
                self._jump(self._marks[mark], mark * MARK)
        self.advance(to, None)

    def advance(self, to: int, write: Callable[[bytes], Any] | None) -> None:
        """Pass lines up to ``to`` (not included), writing them if ``write`` is given."""
        mark = min(to // MARK, len(self._marks) - 1)  # ``to`` may be the end of the trace
        if write is not None and mark * MARK > self.line:
            self._copy_to(self._marks[mark], write)
            self.line = mark * MARK
        while self.line < to:
            buf, at = self._buf, self._at
            found = buf.find(b"\n", at)
            if found < 0:
                if not self._more():
                    return
                continue
            cut = found + 1
            lines = 1
            while self.line + lines < to:  # the rest of the run, in this read
                found = buf.find(b"\n", cut)
                if found < 0:
                    break
                cut, lines = found + 1, lines + 1
            if write is not None:
                write(buf[at:cut])
            self._at = cut
            self.line += lines

    def _copy_to(self, offset: int, write: Callable[[bytes], Any]) -> None:
        """Write everything from the current line up to byte ``offset`` of the file, and
        stand there."""
        held = offset - self._base
        if held <= len(self._buf):
            write(self._buf[self._at : held])
            self._at = held
            return
        write(self._buf[self._at :])
        left = offset - (self._base + len(self._buf))
        while left > 0:
            data = self._f.read(min(left, _READ))
            if not data:
                raise RuntimeError("shrink's copy of the trace ends before its marks")
            write(data)
            left -= len(data)
        self._buf, self._at, self._base = b"", 0, offset

    def take(self) -> bytes:
        """The next line, without its newline."""
        while True:
            found = self._buf.find(b"\n", self._at)
            if found >= 0 or not self._more():
                break
        end = found if found >= 0 else len(self._buf)
        line = self._buf[self._at : end]
        self._at = end + 1
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

    def data(self, lines: Lines) -> bytes:
        """A small candidate as a trace, in memory: its lines read once for every later
        candidate that keeps them (what is held is dropped when it passes ``HELD`` bytes)."""
        held = lines.held
        missing = [i for i in self.kept if i not in held]
        if missing:
            if lines.held_bytes > HELD:
                held.clear()
                lines.held_bytes = 0
                missing = list(self.kept)
            for i, raw in Candidate(Ranges.of(missing)).lines(lines):
                held[i] = raw
                lines.held_bytes += len(raw)
        edits = {*self.stripped, *self.tasks}
        dumps = orjson.dumps
        out = [] if lines.header is None else [lines.header]
        out.extend(dumps(self.event(held[i], i)) if i in edits else held[i] for i in self.kept)
        out.append(b"")
        return b"\n".join(out)

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
