"""One line at a time: a line decoded, its duplicate keys refused, and why a line the
structs refuse is not an event, in the schema's own terms."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import msgspec
import orjson
from msgspec import Struct
from msgspec.structs import astuple

from ...model.limits import INT_MAX, INT_MIN, MAX_DEPTH
from .. import schema
from ..schema import EVENTS, OPS, Submit, TaskFields, event_decoder, json_type
from .events import FORMAT_VERSION, Event, Header, LineError, StateLine, to_event


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
    if op == schema.STATE_OP:
        return "a state line is allowed only once, as the first line after the header"
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


def _wide_integer(value: Any, field: str) -> str | None:
    """The first integer under ``value`` past signed 64 bits, as ``field: why``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if INT_MIN <= value <= INT_MAX:
            return None
        return f"{field}: must be an integer from {INT_MIN} to {INT_MAX}, not {value}"
    if isinstance(value, list):
        items: Any = ((f"{field}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, dict):
        items = ((f"{field}.{k}", v) for k, v in value.items())
    else:
        return None
    for where, v in items:
        found = _wide_integer(v, where)
        if found is not None:
            return found
    return None


def parse_state(obj: dict[str, Any], line: int, raw: bytes | None = None) -> StateLine:
    """A state line (``{"op": "state", ...}``), its fields checked; the policy's state
    itself is checked by the policy that restores it. ``raw``, the line's bytes: orjson
    reads an integer past 64 bits as a float, so a state would take 2^70 as a number and
    write it back as one; every integer in the state must be within signed 64 bits."""
    if raw is not None and re.search(rb"[0-9]{19}", raw):  # 19 digits: maybe past int64
        exact = json.loads(raw)  # the schema below bounds the line's own integers
        wide = _wide_integer(exact.get("state"), "state") if type(exact) is dict else None
        if wide is not None:
            raise LineError(wide)
    problem = schema.explain(obj, schema.StateFields, "the state line", skip=("op",))
    if problem is not None:
        raise LineError(problem)
    ledger: dict[str, int] = obj["ledger"]
    gone = ledger["dispatched"] + ledger["cancelled"]
    if gone > ledger["accepted"]:
        raise LineError(
            f"ledger: dispatched {ledger['dispatched']} + cancelled {ledger['cancelled']} "
            f"is more than accepted {ledger['accepted']}"
        )
    if ledger["rejected"] == 0 < ledger["rejected_tasks"]:  # each rejected group holds one+
        raise LineError(
            f"ledger: rejected 0 groups hold no tasks, not rejected_tasks "
            f"{ledger['rejected_tasks']}"
        )
    if ledger["rejected"] > ledger["rejected_tasks"]:
        raise LineError(
            f"ledger: rejected {ledger['rejected']} groups hold more than rejected_tasks "
            f"{ledger['rejected_tasks']} tasks"
        )
    return StateLine(line, obj["step"], obj["state"], dict(ledger))


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
    if type(s) is Submit or type(s) is TaskFields:
        if s.priority == 0:
            n -= 1
        if s.prepared is not None:
            n += 2  # its own size and offset
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
