"""Recording scheduler calls as replayable traces: ``from schedcli.record import
RecordingScheduler`` (docs/recording.md)."""

from __future__ import annotations

from .engine.recorder import RecordingScheduler

__all__ = ["RecordingScheduler"]
