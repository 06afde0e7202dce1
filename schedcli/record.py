"""Recording scheduler calls as replayable traces: ``from schedcli.record import
RecordingScheduler`` (docs/recording.md); for a C++ runner, the header-only recorder
``schedcli/recording_scheduler.h`` under ``include_dir()`` (``schedcli includes``)."""

from __future__ import annotations

from .engine.recorder import RecordingScheduler
from .runtimes.executorch import include_dir

__all__ = ["RecordingScheduler", "include_dir"]
