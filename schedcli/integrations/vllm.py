"""Deprecated path of the vLLM recorder: ``schedcli.runtimes.vllm.recorder``
(``RecordingVllmScheduler``, ``RecordingVllmAsyncScheduler``). The old names load the new
classes, with a warning, so that a ``--scheduler-cls`` set before the move still works."""

from __future__ import annotations

import warnings

from ..runtimes.vllm.recorder import RecordingVllmAsyncScheduler, RecordingVllmScheduler

RecordingScheduler = RecordingVllmScheduler
RecordingAsyncScheduler = RecordingVllmAsyncScheduler

warnings.warn(
    "schedcli.integrations.vllm is deprecated: load "
    "schedcli.runtimes.vllm.recorder.RecordingVllmScheduler (or RecordingVllmAsyncScheduler)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["RecordingAsyncScheduler", "RecordingScheduler"]
