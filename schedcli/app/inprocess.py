"""``schedcli ARGS`` by its own entry point in this process: what the tests, the fuzzer and
the compiled-versus-pure comparison use instead of a subprocess (far faster)."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..streams.interrupt import guard


@dataclass
class CliRun:
    """What one ``schedcli`` command did: its exit code, and its stdout and stderr bytes."""

    code: int
    stdout: bytes
    stderr: bytes


def run_cli_in_process(
    args: Sequence[str], *, input: bytes = b"", columns: int | None = None
) -> CliRun:
    """``schedcli ARGS`` run by its own entry point in this process (far faster than a
    subprocess): standard streams captured, stop-signal handlers and COLUMNS restored."""
    from .entry import main  # imported when used: the command line pulls in every command

    out, err = io.BytesIO(), io.BytesIO()
    # Kept in locals: a wrapper collected after the swap back would close its buffer.
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    stdin = io.TextIOWrapper(io.BytesIO(input), encoding="utf-8")
    saved = sys.stdout, sys.stderr, sys.stdin
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    held = guard.writing, guard.held  # the exit holds stops for its last flush
    old_columns = os.environ.get("COLUMNS")
    if columns is not None:
        os.environ["COLUMNS"] = str(columns)
    sys.stdout, sys.stderr, sys.stdin = stdout, stderr, stdin
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved
        for s, h in handlers.items():
            signal.signal(s, h)
        guard.writing, guard.held = held
        if columns is not None:
            if old_columns is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old_columns
    run = CliRun(code, out.getvalue(), err.getvalue())
    for wrapper in (stdout, stderr, stdin):
        wrapper.detach()
    return run


__all__ = ["CliRun", "run_cli_in_process"]
