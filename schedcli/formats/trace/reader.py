"""The streaming reader: the header up front, then runs of events on demand."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, BinaryIO, cast

from ...model.errors import InputError
from ...streams.source import (
    DEFAULT_MAX_LINE_BYTES,
    display_name,
    lines_of,
    numbered_chunks,
    open_binary,
)
from ..kinds import check_kind
from .events import Event, Header, Line, LineError, Run, StateLine, as_event
from .lines import (
    _key_total,
    check_duplicate_keys,
    decode_event,
    decode_object,
    parse_header,
    parse_state,
    partial_marker,
)
from .scan import decode_chunk


class TraceReader:
    """Reads one trace lazily: the header (if any) up front, then events on demand.

    Keeps only the current read's lines in memory. Checks that ``step`` never decreases.
    ``on_error`` (used by ``validate``) receives each problem instead of raising,
    and reading goes on with the next line.
    """

    def __init__(
        self,
        stream: BinaryIO,
        name: str,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        on_error: Callable[[InputError], None] | None = None,
    ) -> None:
        self.name = name
        self._max_line_bytes = max_line_bytes
        self._chunks = numbered_chunks(stream, name, max_line_bytes=max_line_bytes)
        self._on_error = on_error
        self.header: Header | None = None
        self.position: Callable[[], int] | None = None
        # The lines of the first read after the header, read line by line.
        self._first_lines: list[tuple[int, bytes, bool]] = []
        self._last_step = 0
        self._last_step_line = 0
        self._seen_event = False
        # The marker a writer that stopped early left as its last line: (line, what it says).
        self.partial: tuple[int, dict[str, Any]] | None = None
        # The state the trace begins from: its first line after the header (or None).
        self.state: StateLine | None = None
        self._read_header()
        self._read_state()

    def _fail(self, line: int | None, message: str) -> None:
        err = InputError(self.name, line, message)
        if self._on_error is None:
            raise err
        self._on_error(err)

    def _read_header(self) -> None:
        """The first non-blank line is the header if it has ``"schedcli"``."""
        for first_line, body, complete, _ in self._chunks:
            lines = lines_of(first_line, body, complete, self.name, self._max_line_bytes)
            if not lines:
                continue
            lineno, raw, complete = lines[0]
            self._first_lines = lines
            if b'"schedcli"' not in raw:
                return
            try:
                obj = decode_object(raw, complete)
                if "schedcli" not in obj:
                    return
            except LineError as e:  # one report for the line, header or not
                self._first_lines = lines[1:]
                self._fail(lineno, str(e))
                return
            try:
                self._first_lines = lines[1:]
                check_duplicate_keys(raw, _key_total(obj))
                self.header = parse_header(obj, lineno)
            except LineError as e:
                self._fail(lineno, str(e))
            return

    def _read_state(self) -> None:
        """The first line after the header is a state line if its op is ``state``."""
        lines = self._first_lines
        if not lines:
            for first_line, body, complete, _ in self._chunks:
                lines = lines_of(first_line, body, complete, self.name, self._max_line_bytes)
                if lines:
                    break
            self._first_lines = lines
        if not lines or b'"state"' not in lines[0][1]:
            return
        lineno, raw, complete = lines[0]
        try:
            obj = decode_object(raw, complete)
        except LineError:
            return  # not JSON: the events' reading reports it
        if obj.get("op") != "state":
            return
        self._first_lines = lines[1:]
        try:
            check_duplicate_keys(raw, _key_total(obj))
            self.state = parse_state(obj, lineno, raw)
        except LineError as e:
            self._fail(lineno, str(e))

    def _step_problem(self, event: Event) -> str | None:
        """Steps never go backwards: why the event's does, or None (and it is the latest)."""
        step = event.step
        if step is None:
            return None
        if step < self._last_step:
            return (
                f"step {step} goes backwards (line {self._last_step_line} had step "
                f"{self._last_step})"
            )
        self._last_step = step
        self._last_step_line = event.line
        return None

    def _after_partial(self, line: int) -> None:
        assert self.partial is not None
        self._fail(line, f"a line after the partial marker at line {self.partial[0]}")

    def _line_by_line(self, lines: list[tuple[int, bytes, bool]]) -> Iterator[Run]:
        for lineno, raw, complete in lines:
            if self.partial is not None:
                self._after_partial(lineno)
                continue
            try:
                event = decode_event(raw, complete, lineno)
            except LineError as e:
                marker = partial_marker(raw)
                if marker is not None:
                    self.partial = (lineno, marker)
                    continue
                if not self._seen_event:
                    # One useful line, not one per line of it.
                    check_kind("trace", raw, self.name, lineno)
                self._seen_event = True
                self._fail(lineno, str(e))
                continue
            self._seen_event = True
            problem = self._step_problem(event)
            if problem is None:
                yield lineno, [event]
            else:
                self._fail(lineno, problem)

    def _in_order(self, first_line: int, items: list[Line]) -> Iterator[Run]:
        """A decoded chunk with steps, cut around any event whose step goes backwards."""
        start = 0
        for i, item in enumerate(items):
            if isinstance(item, Event):
                problem = self._step_problem(item)
                if problem is not None:
                    if i > start:
                        yield first_line + start, items[start:i]
                    start = i + 1
                    self._fail(item.line, problem)
        if start < len(items):
            yield first_line + start, items[start:]

    def raw_lines(self) -> Iterator[tuple[int, bytes, bool]]:
        """Every line after the header, undecoded: ``(line, bytes, ends in a newline)``
        (the request-level reader decodes its own events)."""
        lines, self._first_lines = self._first_lines, []
        yield from lines
        for first_line, body, complete, _ in self._chunks:
            yield from lines_of(first_line, body, complete, self.name, self._max_line_bytes)

    def runs(self) -> Iterator[Run]:
        """Every event, as runs of lines in a row (see ``Line``): the replay's fast path.

        Each run is handed on before the next line's problem is raised, as if read alone.
        """
        lines, self._first_lines = self._first_lines, []
        yield from self._line_by_line(lines)
        limit = self._max_line_bytes
        for first_line, body, complete, newlines in self._chunks:
            if self.partial is not None:
                self._after_partial(first_line)
                continue
            decoded = None
            if complete and self._seen_event and len(body) <= limit:
                decoded = decode_chunk(first_line, body, newlines)
            if decoded is None:
                yield from self._line_by_line(
                    lines_of(first_line, body, complete, self.name, limit)
                )
            elif decoded[1]:
                yield from self._in_order(first_line, decoded[0])
            else:
                yield first_line, decoded[0]

    def __iter__(self) -> Iterator[Event]:
        for first_line, items in self.runs():
            for i, item in enumerate(items):
                yield as_event(item, first_line + i)


@contextmanager
def open_trace(
    path: str,
    *,
    name: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_error: Callable[[InputError], None] | None = None,
    on_wait: Callable[[], None] | None = None,
    follow: bool = False,
    data: bytes | None = None,
    stream: BinaryIO | None = None,
) -> Iterator[TraceReader]:
    """The trace at ``path`` opened for one pass; ``data``: its bytes, held in memory, or
    ``stream``: it opened already (``path`` then only names it)."""
    name = name or display_name(path)
    opened: AbstractContextManager[BinaryIO] = (
        nullcontext(cast(BinaryIO, io.BytesIO(data)))
        if data is not None
        else nullcontext(stream)
        if stream is not None
        else open_binary(path, name, on_wait=on_wait, follow=follow)
    )
    with opened as stream:
        reader = TraceReader(stream, name, max_line_bytes=max_line_bytes, on_error=on_error)
        raw = getattr(stream, "fileobj", stream)
        reader.position = raw.tell
        yield reader
