"""Replays under a time limit (``shrink --max-time``): each in a forked worker process
that is abandoned, killed, when the limit comes first.

A policy may loop forever inside a call: a Python loop (which a signal could interrupt,
unless the policy catches what it raises) or a C++ one (which holds the GIL, so no Python
signal handler ever runs). Only another process can stop either, so under a limit every
replay of a candidate runs in a worker forked once from this process (it shares the
trace's copy and the test as they are here): one job at a time, sent over a pipe, its
answer awaited until the limit. At the limit the worker's process group is killed (a
``cmd:`` command and what it started go with it) and a new worker is forked for the next
job, if any.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from ...model.errors import InvariantError
from ...streams.interrupt import die_with_parent


class Abandoned(Exception):
    """A replay still running at the time limit, stopped; it ran ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"a replay still running at the time limit, after {seconds:.1f} s")
        self.seconds = seconds


def can_bound() -> bool:
    """Whether replays can run in a worker here (a process that can fork)."""
    return hasattr(os, "fork")


class Worker:
    """Runs ``serve(job)`` in a forked process, one job at a time, each under a time limit
    (``ask``). ``close`` ends the process."""

    def __init__(self, serve: Callable[[Any], Any]) -> None:
        self._serve = serve
        self._pid = 0  # 0: no worker running
        self._conn: Connection[Any, Any] | None = None

    def ask(self, job: Any, until: float) -> Any:
        """``serve(job)``'s answer (or its exception, raised here), if the worker gives it
        by ``until`` (a ``time.monotonic()``); else the worker is killed and ``Abandoned``
        raised."""
        conn = self._conn if self._conn is not None else self._start()
        sent = time.monotonic()
        try:
            conn.send(job)
        except OSError:
            self._ended()
        while not conn.poll(max(0.0, until - time.monotonic())):
            if time.monotonic() >= until:
                self.close()
                raise Abandoned(time.monotonic() - sent)
        try:
            ok, value = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            self._ended()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Kill the worker, whatever it is doing, and reap it (a no-op when none runs)."""
        pid, conn = self._pid, self._conn
        self._pid, self._conn = 0, None
        if conn is not None:
            conn.close()
        if pid:
            _kill(pid)
            os.waitpid(pid, 0)

    def _start(self) -> Connection[Any, Any]:
        mine, theirs = Pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            code = 70
            try:
                mine.close()
                _follow(parent)
                _loop(theirs, self._serve)
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        with contextlib.suppress(OSError):  # as the worker does: no race with a kill of it
            os.setpgid(pid, pid)
        self._pid, self._conn = pid, mine
        return mine

    def _ended(self) -> NoReturn:
        """The worker's process ended during a job: how, as a broken contract (only the
        policy's code runs in it besides schedcli's)."""
        pid = self._pid
        self._pid = 0
        self.close()
        _kill(pid)  # what it started, if anything is left of its group
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            how = f"killed by {signal.Signals(number).name if number in _NAMED else number}"
        else:
            how = f"exit status {os.waitstatus_to_exitcode(status)}"
        raise InvariantError(
            f"the process replaying shrink's candidates ended during a replay ({how}): "
            "a policy must not end the process it runs in"
        )


_NAMED = {int(s) for s in signal.Signals}


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # its group; itself, if not yet in a group
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _follow(parent: int) -> None:
    """The worker in a process group of its own (a terminal's Ctrl-C reaches the parent,
    which ends the worker), killed with the parent where the system allows (Linux): a
    worker stuck in a policy's loop never outlives shrink."""
    os.setpgid(0, 0)
    die_with_parent(parent, signal.SIGKILL)


def _loop(conn: Connection[Any, Any], serve: Callable[[Any], Any]) -> None:
    """Answer jobs until the parent closes the pipe: ``(True, answer)`` or ``(False,
    exception)``."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[bool, Any] = (True, serve(job))
        except BaseException as e:
            reply = (False, _portable(e))
        try:
            data = pickle.dumps(reply)
        except Exception as e:  # an answer that cannot cross: said as an error
            data = pickle.dumps((False, _portable(e)))
        try:
            conn.send_bytes(data)
        except OSError:  # the parent is gone
            return


def _portable(e: BaseException) -> BaseException:
    """``e`` as it can cross to the parent, its traceback in a note (``SCHEDCLI_DEBUG``
    shows it): itself where it pickles, else a RuntimeError saying it."""
    said = "".join(traceback.format_exception(e))
    e.add_note(f"in the process replaying shrink's candidates:\n{said}")
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        plain = RuntimeError(f"{type(e).__name__}: {e}")
        plain.__notes__ = list(getattr(e, "__notes__", []))
        return plain
