"""The facts a level hands to explain, check, shrink and fit: a queued task, a step's view,
a task's life, a failure's signature, a --check difference, a timed step. Apart from the
level interface (engine/levels/__init__.py) so a replay, which makes none of them, does not
make their dataclasses at start-up (docs/architecture.md, "Start-up")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...model.records import Left
from ...model.task import Task


@dataclass
class TimedStep:
    """A recording's busy step, timed (``fit``'s model explains ``seconds`` by the rest)."""

    tokens: int
    decodes: int
    context: int | None  # None: a task without a position was in the batch
    seconds: float


@dataclass
class Queued:
    task: Task
    line: int  # the trace line that submitted it
    step: int  # the step it was submitted at


def _entry(t: Task) -> dict[str, Any]:
    return {"tid": t.tid, "sid": t.sid, "kind": t.kind.value, "size": t.size}


@dataclass
class StepView:
    step: int
    line: int | None  # the get_work event's line; None for an implicit step
    batch: list[Task]
    queue: list[Queued]  # as get_work saw it, in submission order
    left: Left
    policy: str

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "line": self.line,
            "policy": self.policy,
            "batch": [_entry(t) for t in self.batch],
            "left": None
            if self.left is None
            else [{**_entry(t), "reason": code, "detail": detail} for t, code, detail in self.left],
            "queue": [
                {**_entry(q.task), "line": q.line, "step": q.step, "age": self.step - q.step}
                for q in self.queue
            ],
        }


@dataclass
class Life:
    """One task from submit to dispatch, cancel, or the end of the trace."""

    task: Task
    line: int
    step: int
    passed_over: list[tuple[int, str, str]] = field(default_factory=list)
    outcome: str = "still queued"
    outcome_step: int | None = None
    reason: str | None = None  # why the policy refused it at submit (rejected)

    def to_json(self) -> dict[str, Any]:
        return {
            **_entry(self.task),
            "submitted": {"line": self.line, "step": self.step},
            "passed_over": [
                {"step": step, "reason": code, "detail": detail}
                for step, code, detail in self.passed_over
            ],
            "outcome": {"what": self.outcome, "step": self.outcome_step}
            if self.reason is None
            else {"what": "rejected", "step": self.outcome_step, "reason": self.reason},
        }


@dataclass(frozen=True)
class Failure:
    """How a shrink candidate failed: the line to cut after (0: none), what identifies
    it, and the step it failed at (-1: none known)."""

    line: int
    signature: tuple[Any, ...]
    step: int = -1
    # What any trace failing this way submits (by id_key): the tids the failing batch
    # expects, the requests the failing step expects.
    needs: frozenset[Any] = frozenset()
    # The sessions (at the request level, requests) queued at the failing step, if known.
    present: frozenset[Any] = frozenset()


# A row of a --check difference: its label, the recorded side and its mark, the replayed
# side and its mark. A mark is "" (the same), "out" (recorded only), "in" (replayed only)
# or "differs".
Row = tuple[str, str, str, str, str]


@dataclass
class Difference:
    """A ``--check`` difference as facts the views draw: a table of the recorded step
    beside the replayed one, and why the replay left out what the recording had."""

    title: str
    rows: list[Row]
    caption: str | None = None
    why: list[str] = field(default_factory=list)  # a heading, then a line each; or none


__all__ = [
    "Difference",
    "Failure",
    "Life",
    "Queued",
    "Row",
    "StepView",
    "TimedStep",
]
