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


# Starts the command from a small interpreter and reports its use: a child forked from
# this (possibly large) process would count this one's pages in its peak until it execs.
_STARTER = """
import os, subprocess, sys
err = open(sys.argv[1], "wb") if sys.argv[1] else subprocess.DEVNULL
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
_, status, usage = os.wait4(proc.pid, 0)
print(usage.ru_utime + usage.ru_stime, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def measured(args: Sequence[str], stderr: str | os.PathLike[str] = "") -> Usage:
    """Run ``args`` to the end, output discarded (its stderr written to ``stderr``, if
    given); its CPU time, peak RSS and exit code.
    It may cache compiled bytecode, as a user's runs do (even where this process has
    PYTHONDONTWRITEBYTECODE): otherwise every run would recompile every module."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", _STARTER, os.fspath(stderr), *args],
        env=env,
        capture_output=True,
        check=True,
    ).stdout.split()
    return Usage(float(out[0]), int(out[1]) / 1024, int(out[2]))


def schedcli(*args: str) -> Usage:
    """``schedcli ARGS`` under this interpreter, output discarded."""
    return measured([sys.executable, "-m", "schedcli", *args])


def best(runs: Sequence[Usage]) -> Usage:
    """The least CPU and the largest peak of several runs of one command."""
    return Usage(min(r.cpu for r in runs), max(r.peak_mb for r in runs), runs[-1].code)


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "NOT met"
