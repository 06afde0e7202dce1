"""Where each queued task came from, up to one step: the observer behind ``explain --step``.

Compiled with the engine (``_compiled.py``): it is called for every submit and every batch
of a replay that may run two million steps to reach the one asked about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.task import Task

if TYPE_CHECKING:
    from .levels.task.replay import Replayer


class Reached(Exception):
    """The step was reached: the replay stops there (its policy still holds the step)."""


class Origins:
    """Each queued task with its submit line and step, in submission order, until
    ``target_step``'s batch: then ``queue`` is what get_work saw, ``batch`` what it
    returned, and ``Reached`` is raised for the caller to catch."""

    def __init__(self, target_step: int) -> None:
        self.target_step = target_step
        self.engine: Replayer | None = None  # set once the engine is made
        self.queued: dict[int, tuple[Task, int, int]] = {}  # by object id, in order
        self.batch: list[Task] | None = None
        self.line = 0
        self.steps = 0  # batches seen
        self.last = -1  # the last one's step number (an explicit trace may skip some)
        # A trace that begins from a state: id of the policy's copy of a restored task ->
        # id of the one accepted here (``claimed``), kept in its place in the queue.
        self.alias: dict[int, int] = {}

    def claimed(self, copy: Task, own: Task) -> None:
        """The policy handed back its own copy of ``copy``, a task restored from a state."""
        self.alias[id(own)] = id(copy)

    def accepted(self, tasks: list[Task], step: int) -> None:
        line = self._line()
        queued = self.queued
        for t in tasks:
            queued[id(t)] = (t, line, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        self.steps += 1
        self.last = step
        if step == self.target_step:
            self.batch = batch
            self.line = self._line()
            raise Reached
        queued, alias = self.queued, self.alias
        for t in batch:
            queued.pop(alias.pop(id(t), id(t)) if alias else id(t), None)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        pass  # never queued

    def dropped(self, tasks: list[Task], step: int) -> None:
        queued, alias = self.queued, self.alias
        for t in tasks:
            queued.pop(alias.pop(id(t), id(t)) if alias else id(t), None)

    def _line(self) -> int:
        engine = self.engine
        assert engine is not None
        return engine.current_line


class Queues(Origins):
    """The queue get_work saw at each of ``wanted`` steps (per step: the get_work's line
    and the queue as ``Origins.queued`` holds it); ``Reached`` is raised after the last of
    them. (Shrinking starts there: ``shrink/focus.py``.)"""

    def __init__(self, wanted: set[int]) -> None:
        super().__init__(max(wanted))
        self.wanted = wanted
        self.seen: dict[int, tuple[int, list[tuple[Task, int, int]]]] = {}

    def dispatched(self, batch: list[Task], step: int) -> None:
        if step in self.wanted:
            self.seen[step] = (self._line(), list(self.queued.values()))
        super().dispatched(batch, step)
