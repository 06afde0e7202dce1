"""What a recording says beyond its batches (whether a submit was accepted, a call the
recorded scheduler raised in), and how a replay under ``--check`` disagrees with it."""

from __future__ import annotations

from typing import ClassVar

from ..model.errors import CheckFailed, Option, StepMismatch
from ..model.records import Left
from ..model.task import Id, Task


class OutcomeMismatch(CheckFailed):
    """A submit the recording accepted and the replay rejected, or the other way round."""

    located = True

    def __init__(self, trace: str, line: int, recorded: str | None, replayed: str | None) -> None:
        self.line = line
        self.recorded = recorded
        self.replayed = replayed
        if recorded is not None:
            what = f"the recording rejected this submit ({recorded}); the replay accepted it"
        else:
            what = f"the recording accepted this submit; the replay rejected it ({replayed})"
        super().__init__(f"{trace}:{line}: {what}")


def recorded_rejection(meta: object) -> str | None:
    """Why a recorder marked a submit rejected (``meta.rejected``), or None."""
    if type(meta) is dict:
        reason = meta.get("rejected")
        if reason is not None:
            return str(reason)
    return None


class RecordingRaised(CheckFailed):
    """Under ``--check``: the recorded scheduler raised at this call, so the recording
    stops there and cannot vouch for the rest of the run."""

    located = True

    def __init__(self, trace: str, line: int, op: str, raised: object) -> None:
        self.line = line
        super().__init__(
            f"{trace}:{line}: the recorded scheduler raised in {op} ({raised}): the "
            "recording is incomplete from here; ",
            Option("allow_incomplete"),
            " checks what came before",
        )


def raised_in(meta: object) -> object:
    """What a recorder says the recorded call raised (``meta.raised``), or None."""
    return meta.get("raised") if type(meta) is dict else None


class Mismatch:
    """The first get_work whose batch differs from the trace's ``expect``."""

    def __init__(
        self,
        step: int,
        line: int,
        expected: list[Id],
        got: list[Task],
        queued: dict[Id, Task],
        left: Left = None,
    ) -> None:
        self.step = step
        self.line = line
        self.expected = expected
        self.got = got
        self.queued = queued
        # Why the policy left each queued task out of this batch, if it was explaining.
        self.left = left


class ExpectMismatch(StepMismatch):
    level: ClassVar[str] = "task"
    mismatch: Mismatch

    def __init__(self, mismatch: Mismatch, trace: str) -> None:
        self.mismatch = mismatch
        super().__init__(
            f"{trace}:{mismatch.line}: step {mismatch.step} differs from the recorded batch"
        )
