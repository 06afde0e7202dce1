"""A read's worth of lines decoded at once: the recorder's spelling of a plain submit
scanned directly, the rest by one call to the structs' decoder."""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec.structs import astuple

from ...model.task import DECODE, PREFILL, Task
from ..schema import Submit, event_decoder
from .events import _STEP, _T, Line, LineError, _plain_keys, _plain_task, to_event
from .lines import _expected_keys

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
