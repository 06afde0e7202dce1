"""Where output goes, for every output option alike.

``-`` is standard output; a name ending in ``.gz`` is written gzip-compressed (with no
timestamp, so bytes stay identical run to run); a device or pipe (``/dev/null``, a FIFO)
is written in place; any other file is written beside its name and renamed over it only
when complete, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..model.errors import UsageError
from .interrupt import whole_write

_BUFFER = 1 << 20


Named = tuple[str, str]  # (what the command line calls it, the path given)


def refuse_overwriting(inputs: Sequence[Named], outputs: Sequence[Named]) -> None:
    """UsageError (exit 2) when an output is the same file as an input, or as another
    output: the same device and inode however the path is spelt (a symlink, a hard link,
    ``.``/``..``, ``-`` for a redirected stdin or stdout), or for an output not yet made,
    the same resolved path. Called before anything is opened for writing, as writing would
    destroy what is still to be read. Devices and pipes are never refused."""
    read: dict[object, str] = {}
    written: dict[object, str] = {}
    for label, path in inputs:
        found = _file_id(path, 0)
        if found is not None:
            read.setdefault(found, _named(label, path, "input"))
    stdout = [o for o in outputs if o[1] == "-"][:1]  # several outputs may share stdout
    for label, path in [o for o in outputs if o[1] != "-"] + stdout:
        key: object = _file_id(path, 1)
        if key is None and path != "-":
            key = ("not yet made", os.path.realpath(path))
        if key is None:
            continue
        this = _named(label, path, "output")
        if key in read:
            raise UsageError(
                f"{this} is the same file as {read[key]}: writing it would destroy the "
                "input; choose another file"
            )
        if key in written:
            raise UsageError(
                f"{written[key]} and {this} are the same file: one would overwrite the "
                "other; choose another file"
            )
        written[key] = this


def _named(label: str, path: str, direction: str) -> str:
    if path != "-":
        return f"{label} {path}"
    return label if label.startswith("standard") else f"{label} - (standard {direction})"


def _file_id(path: str, fd: int) -> tuple[int, int] | None:
    """A regular file's (device, inode), following symlinks; None for anything else (no
    such file yet, a device, a pipe, a loop of symlinks)."""
    try:
        st = os.fstat(fd) if path == "-" else os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def unwritable(path: str, e: OSError) -> UsageError:
    return UsageError(f"{path}: cannot write: {e.strerror or e}")


def _special(path: str) -> bool:
    """An existing file that is not a regular one: renaming over it would replace it."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextmanager
def _compressed(raw: IO[bytes], path: str) -> Iterator[IO[bytes]]:
    if not path.endswith(".gz"):
        yield raw
        return
    import gzip  # here: 1-2 ms of every start-up otherwise

    # Level 1: a recorder writes as its scheduler runs. On record_bench's 66 MB recording,
    # 7.1 MB in 0.22 s of CPU, where zlib's default level 6 takes 0.91 s for 6.3 MB.
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1) as gz:
        yield gz  # type: ignore[misc]


@contextmanager
def output_stream(path: str | None) -> Iterator[IO[bytes]]:
    """Where data goes: FILE (written as it comes), or stdout for None or ``-``.

    A regular FILE is opened, and so emptied, at the first byte written (or when the run
    ends having written none): a command that fails before writing anything (a policy it
    cannot build, a parameter it refuses) leaves an existing FILE as it was. Whether FILE
    can be written is checked at once, without touching it."""
    if path is None or path == "-":
        out = sys.stdout.buffer
        try:
            yield out
        finally:
            with contextlib.suppress(BrokenPipeError):
                out.flush()
        return
    if _special(path):  # a device or a pipe: written in place, from the start
        with _opened(path) as out:
            yield out
        return
    _check_writable(path)
    lazy = _OnFirstWrite(path)
    try:
        yield lazy  # type: ignore[misc]
    except BaseException:
        lazy.close()  # never opened if nothing was written: FILE is as it was
        raise
    lazy.open()  # a run that wrote nothing still leaves FILE as its (empty) output
    lazy.close()


@contextmanager
def _opened(path: str) -> Iterator[IO[bytes]]:
    try:
        f = open(path, "wb", buffering=_BUFFER)  # noqa: SIM115 - closed below
    except OSError as e:
        raise unwritable(path, e) from None
    try:
        with _compressed(f, path) as out:
            yield out
    finally:
        try:
            f.close()
        except OSError as e:
            raise unwritable(path, e) from None


def _check_writable(path: str) -> None:
    """UsageError now, as opening would give it later, for a FILE that cannot be written
    (its folder missing or not writable, FILE itself read-only or a folder)."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise UsageError(f"{path}: cannot write: Is a directory")
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: cannot write: No such file or directory")
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        raise UsageError(f"{path}: cannot write: Permission denied")


class _OnFirstWrite:
    """FILE, opened at the first write (``open``); until then nothing of it is touched."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._opened: contextlib.ExitStack | None = None
        self._out: IO[bytes] | None = None

    def open(self) -> IO[bytes]:
        if self._out is None:
            stack = contextlib.ExitStack()
            self._out = stack.enter_context(_opened(self._path))
            self._opened = stack
        return self._out

    def write(self, data: bytes) -> int:
        return self.open().write(data)

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def close(self) -> None:
        if self._opened is not None:
            stack, self._opened = self._opened, None
            stack.close()

    def __getattr__(self, name: str) -> object:  # anything else a writer asks of a file
        return getattr(self.open(), name)


@contextmanager
def atomic_output(path: str) -> Iterator[IO[bytes]]:
    """FILE written whole or not at all (``-``, devices and pipes are written directly)."""
    if path == "-" or _special(path):
        with output_stream(path) as out:
            yield out
        return
    import tempfile  # 4 ms of start-up: only a file written whole needs it

    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    ok = False
    tmp: str | None = None
    try:
        # A stop while the temporary file comes into being waits until its name is known,
        # so the finally below always removes it (a worker stopped here left one, #58's CI).
        with whole_write():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
            except OSError as e:
                raise unwritable(path, e) from None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a new file's usual mode, not mkstemp's private one
        with os.fdopen(fd, "wb", buffering=_BUFFER) as f, _compressed(f, path) as out:
            yield out
        os.replace(tmp, target)
        ok = True
    except OSError as e:
        raise unwritable(path, e) from None
    finally:
        if not ok and tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
