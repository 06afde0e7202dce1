"""The debugger's messages between processes: a 4-byte length, then one JSON value."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

import orjson

from ...model.errors import Option, Said

_HEAD = struct.Struct("<I")


def said_out(parts: Sequence[Said]) -> list[Any]:
    """A message given as parts (words, and the options the app words as flags), as JSON:
    an option is ``{"option": name, "value": value}``."""
    return [p if isinstance(p, str) else {"option": p.name, "value": p.value} for p in parts]


def said_in(sent: Sequence[Any]) -> tuple[Said, ...]:
    """``said_out``'s parts, read back."""
    return tuple(p if isinstance(p, str) else Option(p["option"], p["value"]) for p in sent)


def send(fd: int, message: Any) -> None:
    body = orjson.dumps(message)
    write_all(fd, _HEAD.pack(len(body)) + body)


def whole(data: bytes | bytearray) -> bool:
    """Whether ``data`` is exactly one message (what a worker ended having written)."""
    if len(data) < _HEAD.size:
        return False
    size: int = _HEAD.unpack_from(data)[0]
    return len(data) == _HEAD.size + size


def write_all(fd: int, data: bytes) -> None:
    """``data`` (messages already framed) written whole."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> Any:
    """The next message; None at the end of the stream (the writer is gone)."""
    head = _read_exactly(fd, _HEAD.size)
    if head is None:
        return None
    body = _read_exactly(fd, _HEAD.unpack(head)[0])
    return None if body is None else orjson.loads(body)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
