"""A replay's step: what one batch was, as the engine hands it to its outputs.

The steppers (``engine/levels/*/replay.py``) build one ``Step`` a batch; the outputs read
its attributes, and the dump writes ``record()`` (docs/trace-format.md, "Dump"). A plain
class, compiled (a native object with a fixed layout), not a dataclass: start-up makes
none (tests/test_startup.py).
"""

from __future__ import annotations

from typing import Any, Final

from .records import Record, TaskEntry
from .task import Id, Task

_TASK_KEYS: Final = frozenset(("step", "batch", "tokens", "queued"))
_REQUEST_KEYS: Final = _TASK_KEYS | {"running", "preempted", "finished"}


class Step:
    """One batch: its step number, its entries (one a task, or a request's slice at the
    request level), its tokens, and what was queued after it. The request level adds the
    requests running after it and those it preempted and finished (all three, or none)."""

    __slots__ = ("batch", "finished", "preempted", "queued", "running", "step", "tokens")

    def __init__(
        self,
        step: int,
        batch: list[TaskEntry],
        tokens: int,
        queued: int,
        running: int | None = None,
        preempted: list[Id] | None = None,
        finished: list[Id] | None = None,
    ) -> None:
        self.step = step
        self.batch = batch
        self.tokens = tokens
        self.queued = queued
        # The request level's three, set together (None at the task level).
        self.running = running
        self.preempted = preempted
        self.finished = finished

    def record(self) -> Record:
        """The dump's record: these keys in this order (the dump is byte-stable)."""
        if self.running is None:
            return {
                "step": self.step,
                "batch": self.batch,
                "tokens": self.tokens,
                "queued": self.queued,
            }
        return {
            "step": self.step,
            "batch": self.batch,
            "tokens": self.tokens,
            "queued": self.queued,
            "running": self.running,
            "preempted": self.preempted,
            "finished": self.finished,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Step) and self.record() == other.record()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the record it stands for

    def __repr__(self) -> str:
        return f"Step({self.record()!r})"

    def tasks(self) -> list[Task]:
        """The batch's entries as tasks (a request's slice as one task of its size)."""
        return [Task(e["tid"], e["sid"], e["kind"], e["size"]) for e in self.batch]

    def with_batch(self, batch: list[TaskEntry]) -> Step:
        """The same step listing only ``batch`` (a filtered view of it)."""
        return Step(
            self.step,
            batch,
            self.tokens,
            self.queued,
            self.running,
            self.preempted,
            self.finished,
        )

    @staticmethod
    def from_record(record: Record) -> Step:
        """A step record read back from a dump (untrusted: its keys and their types are
        checked; a ``ValueError`` says what is wrong)."""
        keys = record.keys()
        if keys != _TASK_KEYS and keys != _REQUEST_KEYS:
            raise ValueError(
                "a step record has step, batch, tokens and queued (and at the request level "
                "running, preempted and finished), no other keys"
            )
        step, batch = record["step"], record["batch"]
        tokens, queued = record["tokens"], record["queued"]
        if not (_is_int(step) and _is_int(tokens) and _is_int(queued)):
            raise ValueError("a step record's step, tokens and queued are integers")
        if type(batch) is not list or not all(type(e) is dict for e in batch):
            raise ValueError("a step record's batch is a list of objects")
        if keys == _TASK_KEYS:
            return Step(step, batch, tokens, queued)
        running, preempted, finished = record["running"], record["preempted"], record["finished"]
        if not (_is_int(running) and type(preempted) is list and type(finished) is list):
            raise ValueError(
                "a request-level step record's running is an integer, its preempted and "
                "finished lists"
            )
        return Step(step, batch, tokens, queued, running, preempted, finished)


Emitted = Step | Record
"""What a replay hands its outputs: a step, or another record of the dump (a submit's
outcome, a cancel's or clear's drops, an update, the end) as its JSON object."""


def _is_int(value: Any) -> bool:
    return type(value) is int


def as_record(record: Emitted) -> Record:
    """A record as the dump writes it (``Step.record()`` of a step)."""
    return record.record() if isinstance(record, Step) else record


def step_or_record(record: Emitted) -> Emitted:
    """A record as the outputs take it from a replay or from a dump: a step record as a
    ``Step`` (checked, ``from_record``), any other as it is."""
    if isinstance(record, Step) or "batch" not in record:
        return record
    return Step.from_record(record)


__all__ = ["Emitted", "Step", "as_record", "step_or_record"]
