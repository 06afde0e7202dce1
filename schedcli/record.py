"""Recording scheduler calls as replayable traces: ``from schedcli.record import
RecordingScheduler`` (docs/recording.md); for a C++ runner, the header-only recorder
``schedcli/recording_scheduler.h`` under ``include_dir()`` (``schedcli includes``)."""

from __future__ import annotations

from pathlib import Path

from .engine.recorder import RecordingScheduler


def include_dir() -> str:
    """The folder to put on a C++ compiler's include path for
    ``#include <schedcli/recording_scheduler.h>``: shipped inside the package."""
    return str(Path(__file__).resolve().parent / "include")


__all__ = ["RecordingScheduler", "include_dir"]
