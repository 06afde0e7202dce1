"""The debugger's messages between processes: a 4-byte length, then one JSON value."""

from __future__ import annotations

import os
import struct
from typing import Any

import orjson

_HEAD = struct.Struct("<I")


def send(fd: int, message: Any) -> None:
    body = orjson.dumps(message)
    data = memoryview(_HEAD.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data) :]


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
