"""Opening input files as streams of numbered lines: gzip, stdin, BOM, CRLF, long lines."""

from __future__ import annotations

import io
import os
import select
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

from ..model.errors import InputError

if TYPE_CHECKING:
    from typing_extensions import Buffer

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_BOM: Final = b"\xef\xbb\xbf"
# 64 KiB: a read's lines are decoded at once, and buffers this size stay in the cache.
_CHUNK: Final = 1 << 16


FOLLOW_POLL_SECONDS = 0.2


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


class WaitHook:
    """What to do before input blocks: flush what has been written, so a live reader
    sees each record as soon as it is known. Callbacks are added once outputs exist."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def add(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def __call__(self) -> None:
        for callback in self.callbacks:
            callback()


class _LiveRaw(io.RawIOBase):
    """A pipe or terminal, read with os.read; ``on_wait`` runs whenever a read would block.

    Files are read without this: asking before every read would cost, and never wait.
    """

    def __init__(self, fd: int, on_wait: Callable[[], None]) -> None:
        self._fd = fd
        self._on_wait = on_wait

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:
        ready, _, _ = select.select([self._fd], [], [], 0)
        if not ready:
            self._on_wait()
        return os.readv(self._fd, [memoryview(buffer)])


class _FollowRaw(io.RawIOBase):
    """A file still being written (``tail -f``): at its end, wait for more, never EOF.

    Ends only with a signal (Ctrl-C), like tail -f.
    """

    def __init__(self, f: io.BufferedReader, on_wait: Callable[[], None]) -> None:
        self._f = f
        self._on_wait = on_wait

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:
        while True:
            n = self._f.readinto(buffer)
            if n:
                return int(n)
            self._on_wait()
            time.sleep(FOLLOW_POLL_SECONDS)

    def close(self) -> None:
        self._f.close()
        super().close()


class _Prefixed(io.RawIOBase):
    """Bytes read ahead (``peek_stdin_line``), then the stream they came from."""

    def __init__(self, head: bytes, rest: BinaryIO | io.RawIOBase) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:
        out = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(out), len(self._head))
            out[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._rest.readinto(out)  # type: ignore[union-attr]


class _Kept(io.RawIOBase):
    """A stream whose every byte read is kept, to be given back (``looked_ahead``)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.kept = bytearray()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:
        out = memoryview(buffer).cast("B")
        data = self._stream.read(len(out))
        n = len(data)
        out[:n] = data
        self.kept += data
        return n


def looked_ahead(stream: BinaryIO, look: Callable[[BinaryIO], str]) -> tuple[str, BinaryIO]:
    """What ``look`` makes of ``stream``'s first bytes, and the stream to read from where
    ``look`` began: the same one, sought back, where it can seek (a file, or a ``.gz``
    file), else one that gives back the bytes ``look`` read first (a pipe): an input is
    opened, and read, once."""
    under = getattr(stream, "fileobj", stream)  # a gzip stream seeks by its file's seeks
    if under.seekable():
        start = stream.tell()
        found = look(stream)
        stream.seek(start)
        return found, stream
    kept = _Kept(stream)
    found = look(io.BufferedReader(kept, 1 << 16))
    return found, io.BufferedReader(_Prefixed(bytes(kept.kept), stream), 1 << 16)


# Standard input's first bytes, read ahead to learn its level, for the stream they came
# from: the next open_binary("-") of that same stream gives them back first.
_stdin_ahead: tuple[object, bytes] | None = None


def peek_stdin_line(limit: int = DEFAULT_MAX_LINE_BYTES) -> bytes:
    """Standard input's first line that is not blank (decompressed, if gzip), read now
    and kept for the reader, so a pipe's level can be told from its header."""
    global _stdin_ahead
    buffer = sys.stdin.buffer
    ahead = _stdin_ahead[1] if _stdin_ahead is not None and _stdin_ahead[0] is buffer else b""
    try:
        fd: int | None = buffer.fileno()  # read past the buffer: nothing is held in it yet
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        fd = None
    while True:
        try:
            gzipped = ahead[:2] == _GZIP_MAGIC
            text = zlib.decompressobj(31).decompress(ahead, limit) if gzipped else ahead
        except zlib.error:
            text = b""  # not readable as gzip: the reader says where
        line = text.lstrip(b" \t\r\n").split(b"\n", 1)
        if len(line) > 1 or len(ahead) >= limit:
            break
        read = getattr(buffer, "read1", buffer.read)
        chunk = os.read(fd, _CHUNK) if fd is not None else read(_CHUNK)
        if not chunk:
            break
        ahead += chunk
    _stdin_ahead = (buffer, ahead)
    return line[0].removeprefix(_BOM)


def _fd_of(stream: BinaryIO) -> int | None:
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None


def _is_live(stream: BinaryIO) -> bool:
    """A pipe, socket or terminal: input that can make a reader wait."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    return not stat.S_ISREG(mode)


@contextmanager
def open_binary(
    path: str,
    name: str | None = None,
    *,
    on_wait: Callable[[], None] | None = None,
    follow: bool = False,
) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed when it is gzip (recognised by its magic bytes).

    ``-`` is standard input. ``on_wait`` runs before a read from a pipe or terminal (or a
    followed file) would wait for more input. ``follow`` keeps reading a file that is
    still being written.
    """
    name = name or display_name(path)
    raw: BinaryIO
    owned: list[BinaryIO] = []
    if follow and path == "-":
        raise InputError(name, None, "--follow reads a file that is being written, not stdin")
    if path == "-":
        global _stdin_ahead
        raw = sys.stdin.buffer
        ahead, _stdin_ahead = _stdin_ahead, None
        if on_wait is not None and _is_live(raw):
            raw = io.BufferedReader(_LiveRaw(raw.fileno(), on_wait), 1 << 16)
        if ahead is not None and ahead[0] is sys.stdin.buffer and ahead[1]:
            rest: BinaryIO | io.RawIOBase = raw
            if raw is sys.stdin.buffer and _fd_of(raw) is not None:
                rest = io.FileIO(raw.fileno(), "rb", closefd=False)  # read ahead by fd too
            raw = io.BufferedReader(_Prefixed(ahead[1], rest), 1 << 16)
    else:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise InputError(name, None, "no such file") from None
        except IsADirectoryError:
            raise InputError(name, None, "is a directory, not a file") from None
        except PermissionError:
            raise InputError(name, None, "permission denied") from None
        except OSError as e:
            raise InputError(name, None, f"cannot open: {e.strerror or e}") from None
        raw = f
        owned.append(f)
        if follow:
            raw = io.BufferedReader(_FollowRaw(f, on_wait or (lambda: None)), 1 << 16)
        elif on_wait is not None and _is_live(f):
            raw = io.BufferedReader(_LiveRaw(f.fileno(), on_wait), 1 << 16)
    try:
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        if not head and raw.seekable():
            pos = raw.tell()
            head = raw.read(2)
            raw.seek(pos)
        if head == _GZIP_MAGIC:
            import gzip  # here: 2 ms of every start-up otherwise

            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()  # the file, or our wrapper (which leaves a descriptor open)
        for stream in owned:
            stream.close()


def numbered_chunks(
    stream: BinaryIO, name: str, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes, bool, int]]:
    """Yield ``(first_line_number, body, complete, newlines)`` for each read's worth of
    whole lines.

    ``body`` ends with the newline of its last line when ``complete``; the one exception is
    the file's last line when it has no newline (``complete`` False). ``newlines`` counts
    the lines that end in the body (counting once is a scan of the read). Line numbers are
    1-based and count every line. A byte-order mark at the start is dropped. A partial
    line longer than ``max_line_bytes`` is an error, found without holding more than
    ``max_line_bytes`` of it (plus one read) in memory; whole lines are the caller's to check.
    """
    read = getattr(stream, "read1", stream.read)
    lineno = 1  # the number of the first line not yet yielded
    parts: list[bytes] = []  # a line still without its newline, as read (joined once)
    held = 0
    bom_checked = False
    try:
        while True:
            chunk = read(_CHUNK)
            if not chunk:
                break
            if not bom_checked:
                if held + len(chunk) < len(_BOM):  # too few bytes yet to tell
                    parts.append(chunk)
                    held += len(chunk)
                    continue
                chunk = b"".join([*parts, chunk])
                parts, held, bom_checked = [], 0, True
                if chunk.startswith(_BOM):
                    chunk = chunk[len(_BOM) :]
            cut = chunk.rfind(b"\n") + 1
            if cut:
                if parts:
                    parts.append(chunk[:cut])
                    body = b"".join(parts)
                else:
                    body = chunk if cut == len(chunk) else chunk[:cut]
                rest = chunk[cut:]
                parts = [rest] if rest else []
                held = len(rest)
                # Counted by what replace removes: it finds each newline with memchr, about
                # three times faster than bytes.count's byte-by-byte loop.
                newlines = len(body) - len(body.replace(b"\n", b""))
                yield lineno, body, True, newlines
                lineno += newlines
            else:
                parts.append(chunk)
                held += len(chunk)
            if held > max_line_bytes + 1:
                raise _too_long(name, lineno, max_line_bytes)
        tail = b"".join(parts)
        if tail:
            yield lineno, tail, False, 0
    except (OSError, zlib.error) as e:
        if not _corrupt_gzip(e):
            raise
        raise InputError(name, lineno, f"corrupt gzip data: {e}") from None
    except EOFError:
        raise InputError(name, lineno, "gzip data ends early: the file was cut short") from None


def _corrupt_gzip(e: BaseException) -> bool:
    """gzip.BadGzipFile or zlib.error (only a file opened with gzip raises the first)."""
    gzip = sys.modules.get("gzip")
    return isinstance(e, zlib.error) or (gzip is not None and isinstance(e, gzip.BadGzipFile))


def lines_of(
    first_line: int, body: bytes, complete: bool, name: str, max_line_bytes: int
) -> list[tuple[int, bytes, bool]]:
    """A chunk's non-blank lines as ``(line_number, content, complete)``, line ends removed
    (``\\n`` or ``\\r\\n``); a line longer than ``max_line_bytes`` is an error."""
    if not complete:
        if len(body) > max_line_bytes:
            raise _too_long(name, first_line, max_line_bytes)
        return [] if body.isspace() else [(first_line, body, False)]
    found: list[tuple[int, bytes, bool]] = []
    lineno = first_line
    for line in body.split(b"\n")[:-1]:
        if line[-1:] == b"\r":
            line = line[:-1]
        if len(line) > max_line_bytes:
            raise _too_long(name, lineno, max_line_bytes)
        if line and not line.isspace():
            found.append((lineno, line, True))
        lineno += 1
    return found


def numbered_lines(
    stream: BinaryIO, name: str, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line_number, content, complete)`` for each non-blank line (see
    ``numbered_chunks`` and ``lines_of``); ``complete`` is False only for a last line with
    no newline."""
    for first_line, body, complete, _ in numbered_chunks(
        stream, name, max_line_bytes=max_line_bytes
    ):
        yield from lines_of(first_line, body, complete, name, max_line_bytes)


def _too_long(name: str, lineno: int, max_line_bytes: int) -> InputError:
    return InputError(
        name, lineno, f"line is longer than --max-line-bytes ({max_line_bytes} bytes)"
    )


def file_size(path: str) -> int | None:
    if path == "-":
        return None
    try:
        return Path(path).stat().st_size
    except OSError:
        return None
