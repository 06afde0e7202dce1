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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..model.errors import UsageError

_BUFFER = 1 << 20


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
    """Where data goes: FILE (written as it comes), or stdout for None or ``-``."""
    if path is None or path == "-":
        out = sys.stdout.buffer
        try:
            yield out
        finally:
            with contextlib.suppress(BrokenPipeError):
                out.flush()
        return
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
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise unwritable(path, e) from None
    ok = False
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # a new file's usual mode, not mkstemp's private one
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as f, _compressed(f, path) as out:
            yield out
        os.replace(tmp, target)
        ok = True
    except OSError as e:
        raise unwritable(path, e) from None
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
