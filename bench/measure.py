"""One subprocess measured on its own: CPU seconds (user + system) and peak RSS.

``os.wait4`` gives the child's own resource use, where ``RUSAGE_CHILDREN`` would mix it
with every child before it (its ``ru_maxrss`` is the largest of them all).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    cpu: float  # seconds, user + system
    peak_mb: float  # peak resident set
    code: int


def measured(args: Sequence[str], *, stdout: int | None = subprocess.DEVNULL) -> Usage:
    """Run ``args`` to the end; its CPU time, peak RSS and exit code. The child may
    cache compiled bytecode, as a user's runs do (even where PYTHONDONTWRITEBYTECODE
    is set for this process): otherwise every run would recompile every module."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(list(args), stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Usage(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


def schedcli(*args: str) -> Usage:
    """``schedcli ARGS`` under this interpreter, output discarded."""
    return measured([sys.executable, "-m", "schedcli", *args])


def best(runs: Sequence[Usage]) -> Usage:
    """The least CPU and the largest peak of several runs of one command."""
    return Usage(min(r.cpu for r in runs), max(r.peak_mb for r in runs), runs[-1].code)


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "NOT met"
