"""What ``explain`` finds, at either level, from a trace opened for it: a step's view (its
batch, the queue it was taken from, why each was left) and lives (a task or a request from
its start to its end). One entry point each (``step_view``, ``lives``); how a level's
engine is watched for them is the level's own (``engine/levels/``).

The trace is replayed with the policy's reasons switched on (docs/policies.md lists each
policy's codes); replays are deterministic, so the reasons are the ones of any replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..model.records import Left
from ..model.task import Id
from .levels import OpenReplay
from .levels.facts import Life, Queued, StepView
from .levels.table import level_of_file
from .run import open_replay

__all__ = ["Life", "Queued", "Reasons", "StepView", "explain_step", "lives", "reasons_at"]


def explain_step(
    path: str, step: int, policy: str | None = None, params: Mapping[str, object] | None = None
) -> StepView:
    """``step`` of the trace (either level) replayed: its batch, queue and reasons."""
    with open_replay(
        path, policy=policy, params=params or {}, note=lambda _: None, allow_incomplete=True
    ) as opened:
        return step_view(opened, step)


def reasons_at(
    path: str,
    step: int,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    *,
    follow: bool = False,
) -> Reasons | None:
    """The policy's reasons at a past ``step`` of the trace at ``path``: the one service
    for them (replay, diff, check), from a replay to the step with reasons on (a replay
    is deterministic). None where no second replay can give them: a pipe (``-``) or a
    file followed as it grows (``follow``), each read once; or a level whose reasons are
    kept as a difference is found, or not derived (``Level.reasons_replayable``)."""
    if path == "-" or follow or not level_of_file(path).reasons_replayable:
        return None
    return Reasons(step, explain_step(path, step, policy, params).left)


@dataclass(frozen=True)
class Reasons:
    """A policy's reasons at ``step``, from a replay to it: ``left`` None where the policy
    gives none (not the same as no replay: ``reasons_at`` answers None)."""

    step: int
    left: Left


def step_view(opened: OpenReplay, step: int) -> StepView:
    """The view of ``step``; bad input if the replay ends before it."""
    return opened.step_view(step)


def lives(opened: OpenReplay, *, tid: Id | None, sid: Id | None) -> list[Life]:
    """Every life of the task ``tid`` (a tid may be reused) or of the session ``sid`` (at
    the request level: of the request ``sid``, which has one)."""
    return opened.lives(tid=tid, sid=sid)
