"""The command line's entry points: ``main`` runs a command and is the one place exceptions
become messages and exit codes; ``run`` is the console script.

Exit codes: 0 ok, 1 a check found a difference, 2 bad input or usage,
3 a policy broke the Scheduler contract, 4 an internal error of schedcli,
130 interrupted (143 on SIGTERM).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

from .._compiled import CORE_IS_STALE, STALE
from ..model.errors import SchedcliError, UsageError
from ..model.limits import OPTIONS, BoundError
from ..runtimes import supervisor
from ..streams import interrupt
from ..streams.interrupt import Stopped, guard
from .cli import app_for
from .completion import init_if_completing
from .console import PipeClosed
from .usage import error_text, usage_message

# A bug in schedcli itself; 3 stays "a policy broke the contract".
INTERNAL_ERROR = 4


def _exit(code: int) -> NoReturn:
    guard.writing = True  # the last flush is a write too: a signal now waits for it
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        _silence_stdout()
    sys.exit(code)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _warn_if_stale() -> None:
    """An edited checkout runs pure Python until rebuilt: same answers, slower. Said on a
    terminal, where someone may wonder at the speed; pipes and tests see no difference."""
    if CORE_IS_STALE and sys.stderr.isatty():
        print(f"schedcli: warning: {STALE}; running pure Python meanwhile", file=sys.stderr)


def run() -> NoReturn:
    """The console script: ``main``, then its exit hooks, then out without the rest of
    the interpreter's teardown unless something may need it (another thread, or a plugin's
    objects). Every output of schedcli's own is flushed and closed by then; the teardown
    would only free memory the process is about to give back (35 ms a command, 100 ms
    once matplotlib is loaded). Outside code that this process loads gets a supervisor
    (``runtimes.supervisor``): a C++ scheduler cannot end the command with exit 0."""
    supervisor.allow()
    try:
        main()
        code = 0
    except SystemExit as e:
        if not isinstance(e.code, int) or threading.active_count() > 1 or _plugin_imported():
            raise
        code = e.code
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place exceptions become messages and exit codes."""
    interrupt.install()
    _warn_if_stale()
    init_if_completing()
    saved = os.environ.get(EXECUTORCH_ROOT)
    saved_steps = os.environ.get(STALL_STEPS_ENV)
    try:
        args = _take_stall_steps(_take_executorch(sys.argv[1:] if argv is None else argv))
        code = app_for(args)(args=args, prog_name="schedcli", standalone_mode=False)
        if isinstance(code, int) and code:
            _exit(code)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        _exit(code)
    except SchedcliError as e:
        if os.environ.get("SCHEDCLI_DEBUG") and e.__cause__ is not None:
            # A plugin that failed to import, start or answer: its own traceback.
            traceback.print_exception(e.__cause__, file=sys.stderr)
        if str(e):  # an empty message: what failed was said already
            print(error_text(e), file=sys.stderr)
        _exit(e.exit_code)
    except Stopped as e:
        print(f"schedcli: {e.reason}", file=sys.stderr)
        _exit(e.exit_code)
    except (BrokenPipeError, PipeClosed):
        _silence_stdout()
        sys.exit(0)
    except OSError as e:
        print(f"schedcli: {e.strerror or e}", file=sys.stderr)
        _exit(2)
    except Exception as e:
        usage = usage_message(e)
        if usage is not None:
            print(usage, file=sys.stderr)
            _exit(2)
        # A bug in schedcli itself: still one line, and the internal-error code.
        if os.environ.get("SCHEDCLI_DEBUG"):
            raise
        print(
            f"schedcli: internal error: {type(e).__name__}: {e} "
            "(set SCHEDCLI_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        _exit(INTERNAL_ERROR)
    finally:
        for name, value in ((EXECUTORCH_ROOT, saved), (STALL_STEPS_ENV, saved_steps)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    _exit(0)


EXECUTORCH_ROOT = "EXECUTORCH_ROOT"


def _take_executorch(args: list[str]) -> list[str]:
    """``--executorch PATH``, given to any command, is the ExecuTorch checkout ``-p
    cxx:decode-first`` builds from: it sets ``$EXECUTORCH_ROOT`` for the run (and the
    processes it starts) and leaves the command's own arguments."""

    def use(value: str) -> None:
        if not os.path.isdir(value):
            raise UsageError(f"--executorch: {value}: no such folder")
        os.environ[EXECUTORCH_ROOT] = value

    return _take(args, "--executorch", "a PATH (the ExecuTorch checkout)", use)


STALL_STEPS_ENV = "SCHEDCLI_STALL_STEPS"  # engine/stall.py reads it (not imported here)


def _take_stall_steps(args: list[str]) -> list[str]:
    """``--stall-steps N``, given to any command that runs a policy: how many steps in a
    row without a batch, with work queued, before a policy not proven stuck is stopped
    (docs/policies.md). It sets ``$SCHEDCLI_STALL_STEPS`` for the run (and the processes
    it starts), checked against its bound in ``limits.OPTIONS``, and leaves the rest."""

    def use(value: str) -> None:
        try:
            steps = OPTIONS["stall_steps"].parse("--stall-steps", value)
        except BoundError as e:
            raise UsageError(str(e)) from None
        os.environ[STALL_STEPS_ENV] = str(steps)

    return _take(args, "--stall-steps", "a number of steps", use)


def _take(args: list[str], option: str, needs: str, use: Callable[[str], None]) -> list[str]:
    """``args`` without ``option VALUE`` / ``option=VALUE`` (each given to ``use``), up to
    a ``--``, after which everything is the command's own."""
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return rest + args[i:]
        if arg == option or arg.startswith(option + "="):
            value = arg.partition("=")[2] if "=" in arg else None
            if value is None:
                if i + 1 >= len(args):
                    raise UsageError(f"{option} needs {needs}")
                value = args[i + 1]
                i += 1
            use(value)
        else:
            rest.append(arg)
        i += 1
    return rest


def _plugin_imported() -> bool:
    """Whether a plugin was imported (the catalog's own module is light: importing it
    here costs nothing)."""
    from ..catalog import plugin_imported

    return plugin_imported()
