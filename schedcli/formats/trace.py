"""Trace format v1: a streaming, validating reader (docs/trace-format.md).

A read's worth of lines is decoded at once, straight into the structs of schema.py (the
recorder's spelling of a plain submit, the commonest line, is read here directly). A read
with any problem in it is decoded again line by line, and a line the structs refuse is
parsed once more only to explain why, in the schema's own terms: the errors and their line
numbers are the same whichever way a trace arrives.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Final

import msgspec
import orjson
from msgspec import Struct
from msgspec.structs import astuple

from ..model.errors import InputError
from ..model.limits import MAX_DEPTH
from ..model.task import DECODE, KINDS, PREFILL, Id, Task
from . import schema
from .kinds import check_kind
from .schema import EVENTS, OPS, Cancel, GetWork, Submit, TaskFields, event_decoder, json_type
from .source import (
    DEFAULT_MAX_LINE_BYTES,
    display_name,
    lines_of,
    numbered_chunks,
    open_binary,
)

FORMAT_VERSION = schema.FORMAT_VERSION


class LineError(Exception):
    """A problem with one line; the reader adds the file and line number."""


class Header:
    """The trace's header line, read. (A plain class: making a dataclass costs 0.5-2 ms of
    start-up; docs/architecture.md, "Start-up".)"""

    def __init__(
        self, line: int, policy: str | None, params: dict[str, Any], meta: Any, level: str
    ) -> None:
        self.line = line
        self.policy = policy
        self.params = params
        self.meta = meta
        self.level = level


class Event:
    """One scheduler call from the trace."""

    __slots__ = ("expect", "line", "meta", "op", "sid", "step", "t", "tasks")

    def __init__(
        self,
        op: str,
        line: int,
        step: int | None,
        t: float | None = None,
        *,
        tasks: list[Task] | None = None,
        sid: Id | None = None,
        expect: list[Id] | None = None,
        meta: Any = None,
    ) -> None:
        self.meta = meta
        self.op = op
        self.line = line
        self.step = step
        self.t = t
        self.tasks = tasks
        self.sid = sid
        self.expect = expect


Line = Event | list[Task]
"""A trace line as the reader hands it on: its event, or for the commonest line (a submit
of one task with no step, t or meta) only the group to submit, which is all a replay needs."""

Run = tuple[int, list[Line]]
"""Lines in a row: the first's number and the lines, item ``i`` being line ``first + i``."""


def as_event(item: Line, line: int) -> Event:
    """The line as an event, whichever way the reader handed it on."""
    if isinstance(item, list):
        return Event("submit", line, None, None, tasks=item)
    return item


# --- from structs to events -------------------------------------------------------------


def _task(f: Submit | TaskFields, what: str) -> Task:
    """A task from validated fields; only the size/tokens rule is left to check."""
    size = f.size
    tokens = f.tokens
    if tokens is not None:
        if size is None:
            size = len(tokens)
        elif size != len(tokens):
            raise LineError(f"size {size} does not match the {len(tokens)} tokens given")
    elif size is None:
        raise LineError(f"{what} has no size (and no tokens)")
    t = Task(
        f.tid,  # type: ignore[arg-type]  # checked by the caller for inline tasks
        f.sid,  # type: ignore[arg-type]
        KINDS[f.kind],  # type: ignore[index]
        size,
        position=f.position,
        produce_output=f.produce_output,
        priority=f.priority,
        meta=f.meta,
    )
    if tokens is not None:
        t.tokens = tokens
    return t


def _submit_tasks(s: Submit) -> list[Task]:
    if s.tasks is not None:
        inline = [name for name in schema.TASK_FIELDS if _given(s, name)]
        if inline:
            raise LineError(
                f"submit has both a tasks array and task fields ({', '.join(inline)}); "
                "use one or the other"
            )
        return [_task(f, f"task {i}") for i, f in enumerate(s.tasks)]
    for name in ("tid", "sid", "kind"):
        if getattr(s, name) is None:
            raise LineError(f"submit has no {name}")
    return [_task(s, "submit")]


def _given(s: Submit, name: str) -> bool:
    value = getattr(s, name)
    return value != 0 if name == "priority" else value is not None


def to_event(s: schema.EventStruct, line: int) -> Event:
    if type(s) is Submit:
        plain = _plain_submit(astuple(s), line)
        if plain is not None:
            return plain
        meta = s.meta if s.tasks is not None else None  # inline, meta is the task's
        return Event("submit", line, s.step, s.t, tasks=_submit_tasks(s), meta=meta)
    if type(s) is GetWork:
        return Event("get_work", line, s.step, s.t, expect=s.expect, meta=s.meta)
    if type(s) is Cancel:
        return Event("cancel", line, s.step, s.t, sid=s.sid, meta=s.meta)
    return Event("clear", line, s.step, s.t, meta=s.meta)


def partial_marker(raw: bytes) -> dict[str, Any] | None:
    """What a ``{"partial": {...}}`` line says, or None for any other line."""
    if not raw.lstrip().startswith(b'{"partial"'):
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is dict and len(obj) == 1 and type(obj.get("partial")) is dict:
        marker: dict[str, Any] = obj["partial"]
        return marker
    return None


def partial_reason(marker: dict[str, Any]) -> str:
    reason = marker.get("reason")
    return str(reason) if reason else "the writer stopped before its end"


def incomplete_trace(marker: dict[str, Any]) -> str:
    """Why a trace its writer marked partial is refused (``marker``, its partial record)."""
    return (
        f"partial trace ({partial_reason(marker)}): its writer stopped before the end; "
        "--allow-incomplete replays it anyway"
    )


# --- explaining a refused line --------------------------------------------------------


def explain_event(obj: dict[str, Any]) -> str:
    """Why a parsed line is not an event of the format."""
    op = obj.get("op")
    cls = EVENTS.get(op) if type(op) is str else None
    if cls is not None:
        what = "submit" if cls is Submit and "tasks" not in obj else str(op)
        problem = schema.explain(obj, cls, what, skip=("op",))
        if problem is not None:
            return problem
        return "not a valid event"  # pragma: no cover - the schema and explain disagree
    if op is None:
        if "schedcli" in obj:
            return "a header is only allowed on the first line"
        close = _close("op", list(obj), 0.5)
        hint = f" (did you mean 'op' instead of {close!r}?)" if close else ""
        return f'event has no "op"{hint}'
    if type(op) is not str:
        return f"op must be a string, not {json_type(op)}"
    close = _close(op, list(OPS), 0.6)
    did_you_mean = f" (did you mean {close!r}?)" if close else ""
    return f"unknown op {op!r}{did_you_mean}; expected one of {', '.join(OPS)}"


def _close(word: str, candidates: list[str], cutoff: float) -> str | None:
    import difflib

    hint = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return hint[0] if hint else None


def parse_header(obj: dict[str, Any], line: int) -> Header:
    problem = schema.explain(obj, schema.HeaderFields, "the header")
    if problem is not None:
        raise LineError(
            problem.replace("policy must", "header policy must").replace(
                "params must", "header params must"
            )
        )
    version = obj["schedcli"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise LineError(
            f"unsupported trace format version {orjson.dumps(version).decode()}; "
            f"this schedcli reads version {FORMAT_VERSION}"
        )
    params = obj.get("params") or {}
    return Header(line, obj.get("policy"), params, obj.get("meta"), obj.get("level", "task"))


# --- duplicate keys and nesting -------------------------------------------------------


def _key_total(obj: Any) -> int:
    """Keys in ``obj`` and everything nested in it (iterative: nesting may be deep).

    Also refuses nesting deeper than MAX_DEPTH, which could be read but not written back.
    """
    total = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise LineError(f"nested deeper than {MAX_DEPTH} levels")
        inner: Iterable[Any]
        if type(value) is dict:
            total += len(value)
            inner = value.values()
        elif type(value) is list:
            inner = value
        else:
            continue  # a scalar meta has no keys
        stack.extend((v, depth + 1) for v in inner if type(v) is dict or type(v) is list)
    return total


def _keys_of(s: Struct) -> int:
    """Keys a decoded struct was given, counting a value equal to its default as absent.

    An undercount (an explicit null or priority 0) only sends the line to the exact check.
    """
    values = astuple(s)
    n = 0
    for v in values:
        if v is not None:
            n += 1
    if (type(s) is Submit or type(s) is TaskFields) and s.priority == 0:
        n -= 1
    return n


def _expected_keys(s: schema.EventStruct) -> int:
    n = 1 + _keys_of(s)  # the op
    if type(s) is Submit and s.tasks is not None:
        n += sum(_keys_of(f) for f in s.tasks)
        n += sum(_key_total(f.meta) for f in s.tasks if f.meta is not None)
    if s.meta is not None:
        n += _key_total(s.meta)
    return n


class _DuplicateKey(Exception):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def check_duplicate_keys(raw: bytes, expected: int) -> None:
    """JSON parsers keep the last of two equal keys; a trace with them is ambiguous.

    Cheap test first: each key is followed by ``":``, so the count of that pair matches
    the keys decoded unless a key repeats (or spacing or a string's contents differ, which
    the exact check then clears).
    """
    if raw.count(b'":') == expected:
        return
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as e:
        raise LineError(f"duplicate key {e.args[0]!r} in one object") from None
    except (ValueError, RecursionError):
        return  # the decoder accepted it; nothing to add


def decode_object(raw: bytes, complete: bool) -> dict[str, Any]:
    """A line as a JSON object, or the reason it is not one."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if not complete:
            raise LineError(f"truncated last line (no newline at end of file): {e}") from None
        if raw.startswith(b"\xef\xbb\xbf"):
            raise LineError("byte-order mark in the middle of the file") from None
        raise LineError(f"not valid JSON: {_json_message(e, raw)}") from None
    if type(obj) is not dict:
        raise LineError(f"each line must be a JSON object, not {json_type(obj)}")
    return obj


def decode_event(raw: bytes, complete: bool, line: int) -> Event:
    """One event line, validated; LineError says what is wrong with it."""
    try:
        s = event_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        obj = decode_object(raw, complete)
        _key_total(obj)
        raise LineError(explain_event(obj)) from None
    check_duplicate_keys(raw, _expected_keys(s))
    try:
        return to_event(s, line)
    except LineError:
        if type(s) is Submit and s.tasks is None:
            # A task field given as null reads as missing: say which, and why.
            obj = decode_object(raw, complete)
            fields = {k: v for k, v in obj.items() if k in schema.TASK_FIELDS}
            problem = schema.explain(fields, schema.TaskFields, "submit")
            if problem is not None:
                raise LineError(problem) from None
        raise


def _json_message(e: orjson.JSONDecodeError, raw: bytes) -> str:
    msg = str(e)
    if "utf-8" in msg.lower() or "unicode" in msg.lower():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as u:
            return f"invalid UTF-8 at byte {u.start}"
    nul = raw.find(b"\x00")
    if nul != -1:
        return f"NUL byte at column {nul + 1}"
    return msg


# Positions in ``astuple(Submit)``: one C call instead of a lookup per field. Literals, so
# that compiled code indexes the tuple directly; checked against the struct below.
_TASKS: Final = 0
_TID: Final = 1
_SID: Final = 2
_KIND: Final = 3
_SIZE: Final = 4
_TOKENS: Final = 5
_POSITION: Final = 6
_OUTPUT: Final = 7
_PRIORITY: Final = 8
_STEP: Final = 9
_T: Final = 10
_META: Final = 11
if Submit.__struct_fields__ != (
    "tasks", "tid", "sid", "kind", "size", "tokens", "position", "produce_output",
    "priority", "step", "t", "meta",
):  # fmt: skip
    raise ImportError("schema.Submit's fields moved: update the positions in trace.py")


def _plain_task(v: tuple[Any, ...]) -> Task | None:
    """The task of the common line, one task written inline with no tokens or meta; None
    for any other line."""
    if (
        v[_TASKS] is not None
        or v[_TOKENS] is not None
        or v[_META] is not None
        or v[_SIZE] is None
        or v[_KIND] is None
        or v[_TID] is None
        or v[_SID] is None
    ):
        return None
    kind: str = v[_KIND]  # "prefill" or "decode": the decoder checked
    return Task(
        v[_TID],
        v[_SID],
        DECODE if kind == "decode" else PREFILL,
        v[_SIZE],
        position=v[_POSITION],
        produce_output=v[_OUTPUT],
        priority=v[_PRIORITY],
    )


def _plain_submit(v: tuple[Any, ...], line: int) -> Event | None:
    task = _plain_task(v)
    if task is None:
        return None
    return Event("submit", line, v[_STEP], v[_T], tasks=[task])


def _plain_keys(v: tuple[Any, ...]) -> int:
    """What _expected_keys counts for a plain submit: op, tid, sid, kind, size, and each
    optional field given (a priority of 0 counts as not given, as there)."""
    priority: int = v[_PRIORITY]
    return (
        5
        + (v[_POSITION] is not None)
        + (v[_OUTPUT] is not None)
        + (priority != 0)
        + (v[_STEP] is not None)
        + (v[_T] is not None)
    )


# The recorder's spelling of a plain one-task submit, up to its tid. A line that is this,
# digit for digit, is read without the decoder (see _canonical_task).
_CANONICAL: Final = b'{"op":"submit","tid":'
_SID_KEY: Final = b',"sid":'
_DECODE_TAIL: Final = b',"kind":"decode","size":'
_PREFILL_TAIL: Final = b',"kind":"prefill","size":'
_MAX_DIGITS: Final = 18  # any integer of 18 digits is within the 64-bit range


def _digits(body: bytes, i: int) -> tuple[int, int]:
    """The integer JSON spells at ``body[i:]`` without a sign, exponent or leading zero,
    of at most 18 digits, and the index after it; ``(-1, i)`` if there is none."""
    stop = min(len(body), i + _MAX_DIGITS + 1)  # a 19th digit is enough to refuse
    j = i
    value = 0
    while j < stop:
        c = body[j]
        if c < 48 or c > 57:
            break
        value = value * 10 + (c - 48)
        j += 1
    count = j - i
    if count == 0 or count > _MAX_DIGITS or (count > 1 and body[i] == 48):
        return -1, i
    return value, j


def _canonical_task(body: bytes, i: int) -> tuple[Task | None, int]:
    """The task of the line at ``body[i:]`` if it is, byte for byte,
    ``{"op":"submit","tid":T,"sid":S,"kind":K,"size":N}`` and its newline, with plain
    decimal integers (what the recorder and orjson write), and the index after the line;
    ``(None, i)`` for any other line, which the decoder reads. Such a line is valid JSON
    that decodes to the same Submit, so either way gives the same task."""
    # Slices compared, not startswith(word, at): compiled, the latter is a call by name.
    if body[i : i + len(_CANONICAL)] != _CANONICAL:
        return None, i
    tid, j = _digits(body, i + len(_CANONICAL))
    if tid < 0 or body[j : j + len(_SID_KEY)] != _SID_KEY:
        return None, i
    sid, j = _digits(body, j + len(_SID_KEY))
    if sid < 0:
        return None, i
    if body[j : j + len(_DECODE_TAIL)] == _DECODE_TAIL:
        kind = DECODE
        j += len(_DECODE_TAIL)
    elif body[j : j + len(_PREFILL_TAIL)] == _PREFILL_TAIL:
        kind = PREFILL
        j += len(_PREFILL_TAIL)
    else:
        return None, i
    size, j = _digits(body, j)
    if size < 0 or body[j : j + 2] != b"}\n":
        return None, i
    return Task(tid, sid, kind, size), j + 2


def _canonical_tasks(body: bytes) -> tuple[list[Task | None], bytes, int]:
    """Each line's task where it is canonical (else None), the other lines joined, and
    how many they are."""
    tasks: list[Task | None] = []
    rest: list[bytes] = []
    i = 0
    n = len(body)
    while i < n:
        task, end = _canonical_task(body, i)
        if task is None:
            end = body.find(b"\n", i) + 1  # found: the body is whole lines
            rest.append(body[i:end])
        tasks.append(task)
        i = end
    return tasks, b"".join(rest), len(rest)


# The scan pays only compiled: interpreted, a line costs it several times what msgspec takes.
_SCAN: Final = type(_canonical_tasks).__name__ != "function"


def decode_chunk(first_line: int, body: bytes, newlines: int) -> tuple[list[Line], bool] | None:
    """Every line of a chunk of ``newlines`` whole, non-blank lines at once, and whether any
    has a step; None when any line needs a closer look (a refusal, a blank line, a repeated
    key), which the line-by-line path then gives in the same words as always."""
    tasks: list[Task | None]
    if _SCAN and _CANONICAL in body:
        tasks, body, others = _canonical_tasks(body)
    else:
        tasks, others = [None] * newlines, newlines
    try:
        structs = event_decoder.decode_lines(body)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    if len(structs) != others:  # blank lines, which decode_lines skips
        return None
    items: list[Line] = []
    keys = 0
    stepped = False
    # Locals: compiled, a module's imported names are looked up in its dict at every use.
    submit, fields = Submit, astuple
    j = 0
    try:
        for canonical in tasks:
            if canonical is not None:
                items.append([canonical])
                continue
            st = structs[j]
            j += 1
            if type(st) is submit:
                v = fields(st)
                if v[_STEP] is None and v[_T] is None:
                    task = _plain_task(v)
                    if task is not None:
                        keys += _plain_keys(v)
                        items.append([task])
                        continue
            keys += _expected_keys(st)
            event = to_event(st, first_line + len(items))
            if event.step is not None:
                stepped = True
            items.append(event)
    except LineError:
        return None
    # The chunk-wide form of check_duplicate_keys over the decoded lines (a canonical line
    # has five keys, none repeated). Each key is followed by one colon, so colons == keys
    # decoded means no key repeats (nor any colon inside a string, which sends the chunk to
    # the exact check).
    return (items, stepped) if body.count(b":") == keys else None


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
        self._read_header()

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
) -> Iterator[TraceReader]:
    name = name or display_name(path)
    with open_binary(path, name, on_wait=on_wait, follow=follow) as stream:
        reader = TraceReader(stream, name, max_line_bytes=max_line_bytes, on_error=on_error)
        raw = getattr(stream, "fileobj", stream)
        reader.position = raw.tell
        yield reader
