"""A process the outside code cannot end (#54): the command's verdict survives a C++
scheduler that ends the process.

The shim turns ``exit``, ``_exit``, ``_Exit`` and ``quick_exit`` inside a call into the
policy's error at the step and line (shim.cpp), but nothing in a process outlives a raw
``exit_group`` system call or a SIGKILL. So the console script's process, the first time it
loads outside code, forks: the child runs the command on, and the original process (the one
the shell waits for) only waits for it and answers for it.

Invariants:
- The child writes one byte to the pipe as Python exits normally (an ``atexit`` hook, run
  by every way out of the command: its exit code, an error's, a stop's). A child that ends
  without it did not finish: never exit 0.
- The child's calls into the C++ write which call is running into one shared byte
  (``watch``), so an end inside a call is named: exit 3, as the policy's crash would be; a
  child killed by a signal (the scheduler's or a sender's outside: not to be told apart)
  ends the supervisor with that signal, as the shell would see it unsupervised.
- The child is sent SIGTERM when the supervisor ends (PR_SET_PDEATHSIG): it never runs on
  alone.
- The supervisor holds no file of the command's but stdin, stdout and stderr (a reader
  waiting for the end of a pipe sees it when the child ends), and passes on a stop sent to
  it alone; one the terminal sent reached the child too.
- It forks only from the console script's own process while no other thread runs (a fork
  keeps only the calling thread); elsewhere (tests in-process, pool workers, whose parent
  answers for them) there is no supervisor.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import signal
import sys
import threading
from typing import NoReturn

from ..streams.interrupt import die_with_parent

# The calls as shim.cpp numbers them in the shared byte (its kCalls), 0 for none.
CALLS = (
    "",
    "its factory",
    "submit",
    "get_work",
    "has_work",
    "cancel",
    "clear",
    "max_prefill_chunk_size",
)
SI_KERNEL = 0x80  # siginfo's si_code for a signal the kernel sent (a terminal's Ctrl-C)
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
BROKE_CONTRACT = 3


class _State:
    allowed: int | None = None  # the process that may be supervised (the console script's)
    shared: mmap.mmap | None = None


_state = _State()


def allow() -> None:
    """This process is the console script's: outside code it loads gets a supervisor."""
    _state.allowed = os.getpid()


def watched() -> mmap.mmap | None:
    """Before outside code is loaded: the supervisor started, if this process may have one,
    and the shared byte the shim keeps its call in (None without a supervisor)."""
    if _state.shared is None and _state.allowed == os.getpid() and threading.active_count() == 1:
        _start()
    return _state.shared


def _start() -> None:
    shared = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED: the child's writes are seen here
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(write_end)
        _supervise(pid, read_end, shared)
    os.close(read_end)
    die_with_parent(parent)  # the command never outlives the process the shell waits for
    _state.shared = shared
    me = os.getpid()

    def finished() -> None:
        if os.getpid() == me:  # not a process the command forked, ending on its own
            with contextlib.suppress(OSError):
                os.write(write_end, b"1")

    atexit.register(finished)


def _supervise(pid: int, marker: int, shared: mmap.mmap) -> NoReturn:
    os.closerange(3, marker)
    os.closerange(marker + 1, 1 << 16)
    waited = {*STOPS, signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        info = signal.sigwaitinfo(waited)
        if info.si_signo != signal.SIGCHLD and info.si_code != SI_KERNEL:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)
    os.set_blocking(marker, False)
    try:
        finished = os.read(marker, 1) == b"1"
    except BlockingIOError:
        finished = False
    if finished:
        _end_as(status)
    call = CALLS[shared[0]] if shared[0] < len(CALLS) else ""
    inside = f" inside its call {call}" if call else ""
    partial = "anything it was writing may be empty or cut short (a dump without its end record)"
    if os.WIFSIGNALED(status):
        # Killed: by the scheduler or from outside, which cannot be told apart here; ended
        # as the child was, as the shell would see it unsupervised.
        print(
            f"schedcli: the process running the command with a C++ scheduler was killed "
            f"({_how(status)}){inside} before it finished, by the scheduler or from outside; "
            f"{partial}",
            file=sys.stderr,
            flush=True,
        )
        _end_as(status)
    where = inside or " while it was loaded, outside any call into it (a thread of its own?)"
    print(
        f"schedcli: the process running the C++ scheduler ended ({_how(status)}){where}, "
        "before the command finished: a scheduler must return from every call, never end "
        f"the process. The verdict is that the policy broke the contract; {partial}.",
        file=sys.stderr,
        flush=True,
    )
    code = _code(status)
    os._exit(BROKE_CONTRACT if call or code == 0 else code)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"signal {sig}, {signal.Signals(sig).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _code(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _end_as(status: int) -> NoReturn:
    """End as the child ended: its exit code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
    os._exit(_code(status))
