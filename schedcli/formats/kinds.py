"""What a file is, from its first line, in one place: which of schedcli's own formats
(trace, dump, workload, sweep results); a reader given the wrong kind raises ``WrongKind``
naming it. Which public request trace a file is, convert.py's ``detect_format`` asks the
converters."""

from __future__ import annotations

import zlib
from typing import BinaryIO

import orjson

from ..model.errors import InputError, WrongKind
from ..streams.source import (
    DEFAULT_MAX_LINE_BYTES,
    display_name,
    numbered_lines,
    open_binary,
    peek_stdin_line,
)

LEVEL = "request"
"""The header's ``level`` of a request-level trace (docs/trace-format.md)."""

NOUNS = {
    "trace": "an event trace",
    "dump": "a replay dump",
    "workload": "a workload of requests",
    "csv": "a CSV request trace",
    "sweep": "sweep results",
}


def _csv_like(line: bytes) -> bool:
    """A header or row of comma-separated text: not JSON (an array, a number), not binary."""
    if b"," not in line or line[:1] in (b"[", b"{", b'"'):
        return False
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.isprintable() or all(c.isprintable() or c == "\t" for c in text)


def kind_of_line(raw: bytes) -> str | None:
    """``trace``, ``dump``, ``workload``, ``sweep`` or ``csv`` by the look of a first line;
    None if unsure."""
    stripped = raw.strip()
    if not stripped.startswith(b"{"):
        return "csv" if _csv_like(stripped) else None
    try:
        first = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    if type(first) is not dict:
        return None
    if "metrics" in first and "policy" in first and "params" in first:
        return "sweep"
    if "arrival" in first or "prompt_tokens" in first:
        return "workload"
    if "batch" in first or "end" in first or ("line" in first and "op" in first):
        return "dump"
    if "schedcli" in first or "op" in first:
        return "trace"
    return None


def check_kind(expected: str, raw: bytes, name: str, lineno: int) -> None:
    """Raise ``WrongKind`` when a first line shows the file is not ``expected``."""
    kind = kind_of_line(raw)
    if kind is not None and kind != expected:
        raise WrongKind(name, lineno, kind, NOUNS[kind], expected)


def sniff_kind(path: str) -> str:
    """``workload``, ``dump``, ``sweep`` or ``trace``: what the file's first line looks like.

    A CSV is ``WrongKind`` (it must be converted first); an empty file is an empty trace.
    """
    name = display_name(path)
    with open_binary(path, name) as stream:
        return kind_of_stream(stream, name)


def kind_of_stream(stream: BinaryIO, name: str) -> str:
    """``sniff_kind`` of a stream opened already (it reads the first lines)."""
    for lineno, raw, _ in numbered_lines(stream, name):
        kind = kind_of_line(raw)
        if kind == "csv":
            raise WrongKind(name, lineno, kind, NOUNS[kind], "")
        return kind or "trace"
    return "trace"


def header_level(path: str) -> str | None:
    """The level the input's header names (``"level"``), if it names one as a string: its
    first line that is not blank, however long, a byte-order mark dropped. Standard input
    is read ahead for it (the reader gets those bytes back). A file that cannot be read
    names none (the task-level reader reports it)."""
    try:
        if path == "-":
            head = peek_stdin_line()
        else:
            with open_binary(path) as f:
                head = f.readline(DEFAULT_MAX_LINE_BYTES)
                while head and not head.strip():
                    head = f.readline(DEFAULT_MAX_LINE_BYTES)
    except (OSError, InputError, EOFError, zlib.error):
        return None  # a corrupt or unreadable file: the task-level reader locates it
    head = head.removeprefix(b"\xef\xbb\xbf")
    if b'"level"' not in head or b'"schedcli"' not in head:
        return None
    try:
        obj = orjson.loads(head)
    except orjson.JSONDecodeError:
        return None
    level = obj.get("level") if type(obj) is dict else None
    return level if type(level) is str else None
