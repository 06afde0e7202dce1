"""The two transports to a ``core.Core``: in this process (``-p vllm``), or in a worker
process run by another Python (``-p vllm@PYTHON``), over a pipe.

A worker runs ``core.py`` as a script under that interpreter: vLLM is imported there once,
and one worker per interpreter serves every scheduler this process builds (a sweep's many
points pay its start-up once). Calls are answered in order, one JSON line each way; the
worker's stderr is this process's (vLLM's own errors reach the user).

Invariants:
- A call's answer is the same value whichever transport carried it: ``Core`` returns only
  JSON's values, and the in-process transport hands them over as they are.
- A worker that ends (killed, crashed, its interpreter gone) ends every scheduler it
  served: each later call raises ``WorkerGone`` naming the interpreter and how it ended,
  an ``InvariantError`` (exit 3, as a C++ scheduler's process that vanished): the engines
  pass it on as it is, and the output so far is kept, marked partial.
- A worker belongs to the process that started it: a fork (the debugger's checkpoints)
  starts its own rather than write into its parent's pipe.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from ...model.errors import InvariantError
from .vllm_build import SUPPORTED

CORE = Path(__file__).resolve().with_name("core.py")


class WorkerGone(InvariantError):
    """The worker process ended: the scheduler behind it is gone."""

    how = ""  # how it ended ("was ended by signal 9 (SIGKILL)")


class Remote(RuntimeError):
    """The scheduler raised in the worker (not a refusal of what was given): its type and
    message."""


class LocalCore:
    """A ``Core`` in this process."""

    def __init__(self, params: dict[str, Any], scheduler: str | None) -> None:
        from . import core

        try:
            self._core = core.Core(params, scheduler)
        except core.Unsupported as e:
            raise ValueError(str(e)) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


class Worker:
    """One interpreter's worker process, shared by every scheduler built on it here."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.pid = os.getpid()  # the process whose calls it answers
        env = dict(os.environ)
        try:
            self._process = subprocess.Popen(
                [python, "-u", str(CORE)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        except OSError as e:
            raise ValueError(f"vllm@{python}: the interpreter does not run: {e}") from None
        self._lock = threading.Lock()
        self._next = 0
        try:
            self.info: dict[str, Any] = self.ask({"info": True})
        except ValueError as e:  # its vLLM is none schedcli drives: the worker said which
            self.close()
            raise ValueError(f"vllm@{python}: {e}") from None
        except WorkerGone as e:
            self.close()
            raise ValueError(
                f"vllm@{python}: {python} did not start schedcli's vLLM worker ({e.how}): "
                f"vllm@ takes a Python interpreter with vLLM {SUPPORTED} installed"
            ) from None

    def ask(self, message: dict[str, Any]) -> Any:
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        with self._lock:
            try:
                process.stdin.write(json.dumps(message, separators=(",", ":")) + "\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                raise self._gone(message, self._ended())
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not ("ok" in reply or "error" in reply):
            self._process.kill()  # out of step with us: nothing it says can be trusted
            raise self._gone(message, f"answered {line.strip()[:80]!r}, not a reply")
        if "error" in reply:
            kind, text = reply["error"], reply["message"]
            if kind in ("ValueError", "Unsupported"):
                raise ValueError(text)
            raise Remote(text)
        return reply["ok"]

    def new(self, params: dict[str, Any], scheduler: str | None) -> int:
        with self._lock:
            self._next += 1
            handle = self._next
        self.ask({"new": handle, "params": params, "scheduler": scheduler})
        return handle

    def _gone(self, message: dict[str, Any], how: str) -> WorkerGone:
        call = message.get("call") or ("new" if "new" in message else "info")
        gone = WorkerGone(
            f"vllm@{self.python}: the vLLM worker (process {self._process.pid}) {how}, at a "
            f"call to {call}: vLLM's scheduler or the worker crashed, or it was killed from "
            "outside; every scheduler it held is gone"
        )
        gone.how = how
        return gone

    def _ended(self) -> str:
        code = self._process.poll()
        if code is None:
            try:
                code = self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        how = (
            "is still running but stopped answering"
            if code is None
            else f"was ended by signal {-code} ({_signal_name(-code)})"
            if code < 0
            else f"exited with status {code}"
        )
        return how

    def close(self) -> None:
        process = self._process
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.close()
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()


class RemoteCore:
    """A ``Core`` in a worker: each method a call over the pipe."""

    def __init__(self, worker: Worker, params: dict[str, Any], scheduler: str | None) -> None:
        self._worker = worker
        self._handle = worker.new(params, scheduler)

    def __getattr__(self, name: str) -> Any:
        worker, handle = self._worker, self._handle

        def call(*args: Any) -> Any:
            return worker.ask({"call": name, "core": handle, "args": list(args)})

        return call

    def close(self) -> None:
        """Release the scheduler; one whose worker ended is gone already (the run's own
        error, not this, is what the user hears)."""
        with contextlib.suppress(WorkerGone):
            self._worker.ask({"call": "close", "core": self._handle, "args": []})


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "an unknown signal"


_workers: dict[str, Worker] = {}


def worker(python: str) -> Worker:
    """The worker for ``python`` (an interpreter path), started on first use."""
    found = _workers.get(python)
    if found is None or found.pid != os.getpid() or found._process.poll() is not None:
        found = _workers[python] = Worker(python)
    return found


def interpreter(given: str) -> str:
    """``given`` as an interpreter to run: a path (``~`` expanded) to an executable file,
    or a name on PATH; a ValueError saying which it is not."""
    import shutil

    path = os.path.expanduser(given)
    if os.sep not in path:
        found = shutil.which(path)
        if found is None:
            raise ValueError(f"vllm@{given}: no interpreter {given!r} on PATH")
        return found
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise ValueError(f"vllm@{given}: {path} is not an executable file (a Python with vLLM)")
    return os.path.abspath(path)


@atexit.register
def _close_all() -> None:
    for w in list(_workers.values()):
        if w.pid == os.getpid():  # a fork's copy of its parent's worker is not its own
            w.close()
    _workers.clear()


def core_for(python: str | None, params: dict[str, Any], scheduler: str | None) -> Any:
    """A core over ``params`` (and the ``Scheduler`` subclass ``scheduler`` names, if any):
    in this process when ``python`` is None, else in that interpreter's worker."""
    if python is None:
        return LocalCore(params, scheduler)
    return RemoteCore(worker(python), params, scheduler)


def describe_here() -> dict[str, Any]:
    """What ``info`` answers, for the vLLM importable in this process."""
    from . import vllm_build

    try:
        return vllm_build.describe()
    except vllm_build.Unsupported as e:
        raise ValueError(str(e)) from None


__all__ = ["Remote", "WorkerGone", "core_for", "describe_here", "interpreter", "worker"]
