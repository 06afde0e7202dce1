"""SIGINT and SIGTERM end a run at a record boundary, never inside a write.

The handlers raise :class:`Stopped` where the program is, except while a record is
being written: then the signal is held and raised right after that write, so output
always ends with a whole line (a signal inside a blocked write would otherwise cut it).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Stopped(BaseException):
    """A stop signal. A BaseException of our own, so no library turns it into another."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 130 if self.signum == signal.SIGINT else 143

    @property
    def reason(self) -> str:
        """What stopped the run, in a word: ``interrupted`` (Ctrl-C) or ``terminated``."""
        return "interrupted" if self.signum == signal.SIGINT else "terminated"


def stop_reason(e: BaseException) -> str:
    """Why a run stopped early, for the partial marker of what it was writing."""
    return e.reason if isinstance(e, Stopped) else str(e)


class _Guard:
    writing = False
    held: int | None = None


guard = _Guard()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if guard.writing:
        guard.held = signum
        return
    raise Stopped(signum)


def install() -> None:
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


@contextmanager
def whole_write() -> Iterator[None]:
    """Hold stop signals for the duration of one record's write (nested: the outermost
    one raises what was held)."""
    outer = guard.writing
    guard.writing = True
    try:
        yield
    finally:
        guard.writing = outer
    if not outer:
        raise_held()


def raise_held() -> None:
    held = guard.held
    if held is not None:
        guard.held = None
        raise Stopped(held)


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """This process (just forked from ``parent``) is sent ``sig`` when its parent ends,
    where the system allows (Linux's PR_SET_PDEATHSIG): a worker or a supervised command
    never outlives the process that answers for it. A parent that ended before this call
    ends this process at once."""
    import os
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, sig)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(128 + sig)
