"""What ``explain`` finds, at either level: a step's view (its batch, its queue, why each
was left), and lives (a task or request from its start to its end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.records import Left
from ..model.task import Task


@dataclass
class Queued:
    task: Task
    line: int  # the trace line that submitted it
    step: int  # the step it was submitted at


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


def _entry(t: Task) -> dict[str, Any]:
    return {"tid": t.tid, "sid": t.sid, "kind": t.kind.value, "size": t.size}
