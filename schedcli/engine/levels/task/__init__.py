"""The task level: a trace of submits, cancels, clears and get_works, replayed through a
``Scheduler`` by ``engine/replay.py``'s ``Replayer`` (``opened.OpenTrace``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Final, cast

from ....formats.trace import Header, TraceReader
from ....model.errors import InputError, StepMismatch
from ....model.scheduler import Scheduler
from ....model.task import Id
from ...clock import StepClock
from .. import CheckEvent, Collect, Difference, Failure, OpenReplay, Partial, choose_policy
from . import check
from .opened import OpenTrace, interface_check


class TaskLevel:
    name: Final = "task"
    preempts = False  # a task-level policy never preempts
    reasons_replayable = True  # a built-in works its reasons out where asked

    @contextmanager
    def open(
        self,
        reader: TraceReader,
        header: Header | None,
        name: str,
        policy: str | None,
        params: Mapping[str, object],
        note: Callable[[str], None],
        follow: bool,
        allow_incomplete: bool,
    ) -> Iterator[OpenReplay]:
        built, label, used = choose_policy(header, name, policy, params, note)
        yield OpenTrace(reader, cast(Scheduler, built), label, used, name, allow_incomplete, self)

    def read_all(self, reader: TraceReader) -> None:
        for _ in reader.runs():
            pass

    def events(
        self, reader: TraceReader, collect: Collect, unfit: CheckEvent | None
    ) -> tuple[int, Partial]:
        """The valid events, their steps checked by replay's rules (``StepClock``) and
        their tasks by the policy's interface; and the partial marker."""
        clock = StepClock(reader.name)
        events = 0
        for event in reader:
            try:
                clock.check(event)
            except InputError as e:
                collect(e)
                continue
            problems = unfit(event) if unfit is not None else []
            for problem in problems:
                collect(problem)
            events += not problems
        return events, reader.partial

    def interface_check(
        self,
        header: Header | None,
        trace_name: str,
        policy: str | None,
        params: Mapping[str, object],
    ) -> CheckEvent | None:
        return interface_check(header, trace_name, policy, params)

    def no_life(self, path: str, tid: Id | None, sid: Id | None) -> InputError:
        what = f"task {tid!r}" if tid is not None else f"session {sid!r}"
        return InputError(path, None, f"no submit in this trace holds {what}")

    def difference(self, error: StepMismatch) -> Difference:
        return check.difference(error.mismatch)

    def failure(self, error: StepMismatch) -> Failure | None:
        return check.failure(error.mismatch)


LEVEL = TaskLevel()

__all__ = ["LEVEL", "OpenTrace", "TaskLevel"]
