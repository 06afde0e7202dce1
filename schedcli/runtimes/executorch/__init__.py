"""ExecuTorch's batching schedulers, from C++: the header-only recorder
``schedcli/recording_scheduler.h`` (docs/recording.md), and ExecuTorch's own scheduler
tests re-expressed as traces (``conformance/``, its README says how), shipped in this
folder."""

from __future__ import annotations

from pathlib import Path


def include_dir() -> str:
    """The folder to put on a C++ compiler's include path for
    ``#include <schedcli/recording_scheduler.h>`` (``schedcli includes`` prints it)."""
    return str(Path(__file__).resolve().parent / "include")


def conformance_dir() -> str:
    """The conformance suite's folder: ``contract/`` (any Scheduler) and
    ``decode-first/`` (DecodeFirstScheduler), package data (``schedcli conformance``
    checks it)."""
    return str(Path(__file__).resolve().parent / "conformance")
