"""Trace format v1: a streaming, validating reader (see shared/specs/trace-format.md)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import orjson

from ..model.errors import InputError
from ..model.task import KINDS, Id, Task, show_id
from .source import DEFAULT_MAX_LINE_BYTES, display_name, numbered_lines, open_binary

FORMAT_VERSION = 1
_INT_MIN = -(2**63)
_INT_END = 2**63

TASK_FIELDS = ("tid", "sid", "kind", "size", "tokens", "position", "produce_output", "priority")
_TASK_KEYS = frozenset((*TASK_FIELDS, "meta"))
_COMMON = ("op", "step", "t")
EVENT_FIELDS: dict[str, frozenset[str]] = {
    "submit": frozenset((*_COMMON, "tasks", "meta")),
    "cancel": frozenset((*_COMMON, "sid", "meta")),
    "get_work": frozenset((*_COMMON, "expect", "meta")),
    "clear": frozenset((*_COMMON, "meta")),
}
HEADER_FIELDS = frozenset(("schedcli", "policy", "params", "meta"))
OPS = ("submit", "cancel", "get_work", "clear")


class LineError(Exception):
    """A problem with one line; the reader adds the file and line number."""


@dataclass(frozen=True)
class Header:
    line: int
    policy: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    meta: Any = None


class Event:
    """One scheduler call from the trace."""

    __slots__ = ("expect", "line", "op", "sid", "step", "t", "tasks")

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
    ) -> None:
        self.op = op
        self.line = line
        self.step = step
        self.t = t
        self.tasks = tasks
        self.sid = sid
        self.expect = expect


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction" if not value.is_integer() else "an out-of-range number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _unknown_fields(extra: set[str], allowed: frozenset[str], what: str) -> LineError:
    name = min(extra)
    hint = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.6)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    return LineError(f"unknown field {name!r} in {what}{did_you_mean}")


def _only_fields(obj: dict[str, Any], allowed: frozenset[str], what: str) -> None:
    if not obj.keys() <= allowed:
        raise _unknown_fields(set(obj.keys() - allowed), allowed, what)


def _int(value: object, name: str, *, minimum: int | None = None) -> int:
    if type(value) is not int:
        if isinstance(value, float) and value.is_integer():
            raise LineError(f"{name} is beyond the 64-bit integer range")
        raise LineError(f"{name} must be an integer, not {_json_type(value)}")
    if not _INT_MIN <= value < _INT_END:
        raise LineError(f"{name} is beyond the 64-bit integer range")
    if minimum is not None and value < minimum:
        raise LineError(f"{name} must be >= {minimum}, not {value}")
    return value


def _id(value: object, name: str) -> Id:
    tp = type(value)
    if tp is str:
        return value  # type: ignore[return-value]
    if tp is int:
        if _INT_MIN <= value < _INT_END:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        raise LineError(f"{name} is beyond the 64-bit integer range")
    if value is None:
        raise LineError(f"{name} is missing")
    if isinstance(value, float) and value.is_integer():
        raise LineError(f"{name} is beyond the 64-bit integer range")
    raise LineError(f"{name} must be an integer or a string, not {_json_type(value)}")


_INLINE_KEYS = _TASK_KEYS | frozenset(_COMMON)


def parse_task(d: object, what: str = "task", allowed: frozenset[str] = _TASK_KEYS) -> Task:
    """A task object, validated. The common shape takes a fast path; anything unusual
    goes through the careful checks, which also write the error messages."""
    if type(d) is dict and d.keys() <= allowed and "tokens" not in d:
        tid = d.get("tid")
        sid = d.get("sid")
        size = d.get("size")
        k = d.get("kind")
        kind = KINDS.get(k) if type(k) is str else None
        tt = type(tid)
        st = type(sid)
        if (
            kind is not None
            and type(size) is int
            and 0 <= size < _INT_END
            and (tt is str or (tt is int and _INT_MIN <= tid < _INT_END))  # type: ignore[operator]
            and (st is str or (st is int and _INT_MIN <= sid < _INT_END))  # type: ignore[operator]
        ):
            position = d.get("position")
            out = d.get("produce_output")
            priority = d.get("priority", 0)
            if (
                (position is None or (type(position) is int and 0 <= position < _INT_END))
                and (out is None or type(out) is bool)
                and type(priority) is int
                and _INT_MIN <= priority < _INT_END
            ):
                return Task.trusted(tid, sid, kind, size, position, out, priority, d.get("meta"))  # type: ignore[arg-type]
    return _parse_task_checked(d, what, allowed)


def _parse_task_checked(d: object, what: str, allowed: frozenset[str]) -> Task:
    if type(d) is not dict:
        raise LineError(f"{what} must be an object, not {_json_type(d)}")
    _only_fields(d, allowed, what)
    if "tid" not in d:
        raise LineError(f"{what} has no tid")
    tid = _id(d["tid"], "tid")
    if "sid" not in d:
        raise LineError(f"{what} {show_id(tid)} has no sid")
    sid = _id(d["sid"], "sid")
    raw_kind = d.get("kind")
    kind = KINDS.get(raw_kind) if type(raw_kind) is str else None
    if kind is None:
        if "kind" not in d:
            raise LineError(f'{what} has no kind ("prefill" or "decode")')
        raise LineError(
            f'kind must be "prefill" or "decode", not {orjson.dumps(d["kind"]).decode()}'
        )
    tokens = d.get("tokens")
    size = d.get("size")
    if tokens is not None:
        if type(tokens) is not list:
            raise LineError(f"tokens must be an array of integers, not {_json_type(tokens)}")
        for tok in tokens:
            _int(tok, "each token")
        if size is None:
            size = len(tokens)
        elif _int(size, "size", minimum=0) != len(tokens):
            raise LineError(f"size {size} does not match the {len(tokens)} tokens given")
    elif size is None:
        raise LineError(f"{what} has no size (and no tokens)")
    elif type(size) is not int or size < 0 or size >= _INT_END:
        _int(size, "size", minimum=0)
    position = d.get("position")
    if position is not None:
        _int(position, "position", minimum=0)
    out = d.get("produce_output")
    if out is not None and type(out) is not bool:
        raise LineError(f"produce_output must be true or false, not {_json_type(out)}")
    priority = d.get("priority", 0)
    if type(priority) is not int or not _INT_MIN <= priority < _INT_END:
        _int(priority, "priority")
    return Task(
        tid,
        sid,
        kind,
        size,
        position=position,
        produce_output=out,
        tokens=tokens,
        priority=priority,
        meta=d.get("meta"),
    )


def _step_and_time(obj: dict[str, Any]) -> tuple[int | None, float | None]:
    step = obj.get("step")
    if step is not None and (type(step) is not int or step < 0 or step >= _INT_END):
        _int(step, "step", minimum=0)
    t = obj.get("t")
    if t is not None and (type(t) not in (int, float)):
        raise LineError(f"t must be a number of seconds, not {_json_type(t)}")
    return step, t


def parse_event(obj: dict[str, Any], line: int) -> Event:
    op = obj.get("op")
    if op == "submit":
        if "tasks" in obj:
            allowed = EVENT_FIELDS["submit"]
            if not obj.keys() <= allowed:
                extra = set(obj.keys() - allowed)
                if extra & _TASK_KEYS:
                    raise LineError(
                        "submit has both a tasks array and task fields "
                        f"({', '.join(sorted(extra & _TASK_KEYS))}); use one or the other"
                    )
                raise _unknown_fields(extra, allowed, "submit")
            raw = obj["tasks"]
            if type(raw) is not list:
                raise LineError(f"tasks must be an array of task objects, not {_json_type(raw)}")
            tasks = [parse_task(d, f"task {i}") for i, d in enumerate(raw)]
        else:
            tasks = [parse_task(obj, "submit", _INLINE_KEYS)]
        step = obj.get("step")
        t = obj.get("t")
        if step is None and t is None:
            return Event("submit", line, None, None, tasks=tasks)
        step, t = _step_and_time(obj)
        return Event("submit", line, step, t, tasks=tasks)
    if op == "get_work":
        _only_fields(obj, EVENT_FIELDS["get_work"], "get_work")
        expect = obj.get("expect")
        if expect is not None:
            if type(expect) is not list:
                raise LineError(f"expect must be an array of tids, not {_json_type(expect)}")
            expect = [_id(x, "each expected tid") for x in expect]
        step, t = _step_and_time(obj)
        return Event("get_work", line, step, t, expect=expect)
    if op == "cancel":
        _only_fields(obj, EVENT_FIELDS["cancel"], "cancel")
        if "sid" not in obj:
            raise LineError("cancel has no sid")
        sid = _id(obj["sid"], "sid")
        step, t = _step_and_time(obj)
        return Event("cancel", line, step, t, sid=sid)
    if op == "clear":
        _only_fields(obj, EVENT_FIELDS["clear"], "clear")
        step, t = _step_and_time(obj)
        return Event("clear", line, step, t)
    if op is None:
        if "schedcli" in obj:
            raise LineError("a header is only allowed on the first line")
        hint = ""
        close = difflib.get_close_matches("op", list(obj), n=1, cutoff=0.5)
        if close:
            hint = f" (did you mean 'op' instead of {close[0]!r}?)"
        raise LineError(f'event has no "op"{hint}')
    if type(op) is not str:
        raise LineError(f"op must be a string, not {_json_type(op)}")
    close = difflib.get_close_matches(op, OPS, n=1, cutoff=0.6)
    did_you_mean = f" (did you mean {close[0]!r}?)" if close else ""
    raise LineError(f"unknown op {op!r}{did_you_mean}; expected one of {', '.join(OPS)}")


def parse_header(obj: dict[str, Any], line: int) -> Header:
    _only_fields(obj, HEADER_FIELDS, "the header")
    version = obj["schedcli"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise LineError(
            f"unsupported trace format version {orjson.dumps(version).decode()}; "
            f"this schedcli reads version {FORMAT_VERSION}"
        )
    policy = obj.get("policy")
    if policy is not None and type(policy) is not str:
        raise LineError(f"header policy must be a string, not {_json_type(policy)}")
    params = obj.get("params", {})
    if params is None:
        params = {}
    if type(params) is not dict:
        raise LineError(f"header params must be an object, not {_json_type(params)}")
    return Header(line, policy, params, obj.get("meta"))


# orjson writes at most 255 levels; 200 leaves room for the dump's own wrapping.
MAX_DEPTH = 200


def _key_total(obj: dict[str, Any]) -> int:
    """Keys in ``obj`` and everything nested in it (iterative: nesting may be deep).

    Also refuses nesting deeper than MAX_DEPTH, which could be read but not written back.
    """
    total = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise LineError(f"nested deeper than {MAX_DEPTH} levels")
        inner = value.values() if type(value) is dict else value
        if type(value) is dict:
            total += len(value)
        stack.extend((v, depth + 1) for v in inner if type(v) is dict or type(v) is list)
    return total


class _DuplicateKey(Exception):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def check_duplicate_keys(raw: bytes, obj: dict[str, Any]) -> None:
    """JSON parsers keep the last of two equal keys; a trace with them is ambiguous.

    Cheap test first: each key is followed by ``":``, so the count of that pair in the
    line matches the number of keys parsed, unless a key repeats (or the spacing or a
    string's contents differ, which the exact check then clears).
    """
    nested = "tasks" in obj or "meta" in obj or "params" in obj
    expected = _key_total(obj) if nested else len(obj)
    if raw.count(b'":') == expected:
        return
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as e:
        raise LineError(f"duplicate key {e.args[0]!r} in one object") from None
    except ValueError:
        return  # orjson accepted it; nothing to add


def decode_line(raw: bytes, complete: bool) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if not complete:
            raise LineError(f"truncated last line (no newline at end of file): {e}") from None
        if raw.startswith(b"\xef\xbb\xbf"):
            raise LineError("byte-order mark in the middle of the file") from None
        raise LineError(f"not valid JSON: {_json_message(e, raw)}") from None
    if type(obj) is not dict:
        raise LineError(f"each line must be a JSON object, not {_json_type(obj)}")
    check_duplicate_keys(raw, obj)
    return obj


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


class TraceReader:
    """Reads one trace lazily: the header (if any) up front, then events on demand.

    Keeps only the current line in memory. Checks that ``step`` never decreases.
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
        self._lines = numbered_lines(stream, name, max_line_bytes=max_line_bytes)
        self._on_error = on_error
        self.header: Header | None = None
        self.position: Callable[[], int] | None = None
        self._first: tuple[int, dict[str, Any]] | None = None
        self._read_header()

    def _fail(self, line: int | None, message: str) -> None:
        err = InputError(self.name, line, message)
        if self._on_error is None:
            raise err
        self._on_error(err)

    def _next_object(self) -> tuple[int, dict[str, Any]] | None:
        for lineno, raw, complete in self._lines:
            try:
                return lineno, decode_line(raw, complete)
            except LineError as e:
                self._fail(lineno, str(e))
        return None

    def _read_header(self) -> None:
        first = self._next_object()
        if first is None:
            return
        lineno, obj = first
        if "schedcli" in obj:
            try:
                self.header = parse_header(obj, lineno)
            except LineError as e:
                self._fail(lineno, str(e))
        else:
            self._first = first

    def __iter__(self) -> Iterator[Event]:
        last_step = 0
        last_step_line = 0
        fail = self._fail

        def checked(obj: dict[str, Any], lineno: int) -> Event | None:
            """The line's event, or None when it is reported (validate goes on)."""
            nonlocal last_step, last_step_line
            try:
                event = parse_event(obj, lineno)
            except LineError as e:
                fail(lineno, str(e))
                return None
            step = event.step
            if step is not None:
                if step < last_step:
                    fail(
                        lineno,
                        f"step {step} goes backwards (line {last_step_line} had step {last_step})",
                    )
                    return None
                last_step = step
                last_step_line = lineno
            return event

        if self._first is not None:  # read while looking for a header
            first_line, first_obj = self._first
            self._first = None
            event = checked(first_obj, first_line)
            if event is not None:
                yield event
        loads = orjson.loads
        for lineno, raw, complete in self._lines:
            obj: Any
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            try:
                if type(obj) is not dict:
                    obj = decode_line(raw, complete)  # the error, worded for people
                check_duplicate_keys(raw, obj)
            except LineError as e:
                fail(lineno, str(e))
                continue
            event = checked(obj, lineno)
            if event is not None:
                yield event


@contextmanager
def open_trace(
    path: str,
    *,
    name: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_error: Callable[[InputError], None] | None = None,
) -> Iterator[TraceReader]:
    name = name or display_name(path)
    with open_binary(path, name) as stream:
        reader = TraceReader(stream, name, max_line_bytes=max_line_bytes, on_error=on_error)
        raw = getattr(stream, "fileobj", stream)
        reader.position = raw.tell
        yield reader
