"""The shapes every layer passes around, named once: a dump record, a task as a batch
record lists it, and a policy's reasons (docs/trace-format.md, "Dump")."""

from __future__ import annotations

from typing import Any, TypedDict

from .task import Id, Task

Record = dict[str, Any]
"""One record of a dump or a trace event as written: a JSON object."""

Reason = tuple[str, str]
"""Why a task was left out of a batch: a code (``no_room``) and a detail for people."""

Reasons = dict[int, Reason]
"""A policy's reasons for one batch, by ``id(task)`` of each task it left queued."""

Left = list[tuple[Task, str, str]] | None
"""What ``Scheduler.left_behind`` answers: each queued task with its reason, in queue
order; None when the policy gives no reasons."""


def discard(record: object) -> None:
    """The emit of a replay whose records nobody reads: the engine then builds no step
    records at all (its checks still run)."""


class TaskEntry(TypedDict, total=False):
    """A task as a batch record lists it (``prepared`` and ``meta`` only when the task has
    them)."""

    tid: Id
    sid: Id
    kind: str
    size: int
    prepared: dict[str, int]
    meta: Any


__all__ = ["Left", "Reason", "Reasons", "Record", "TaskEntry", "discard"]
