"""The replay driver, one for every level: feeds a trace's inputs to a policy, runs the
drain after them, holds two replays in lockstep and closes with the end's accounting.

A level's stepper (``engine/levels/<level>/replay.py``, a subclass) says only what
differs: how an input is applied to its policy (``apply``), what one step of a drain is
(``step_once``), how a stall and its stuck work are worded, and its end record
(``account``). The loop, the stops (the stall watch after the trace, the bound between a
stepped trace's steps) and lockstep are written here once. The records are the dump of
docs/trace-format.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Protocol

from ..model.errors import InvariantError, Option, Said, UsageError
from ..model.limits import INT_MAX
from ..model.records import Left, Record
from ..model.steps import Emitted
from ..model.task import Task
from .clock import EXPLICIT, PLAIN, STEPPED
from .ledger import Totals
from .lockstep import few_collections
from .recorded import OutcomeMismatch, RecordingRaised
from .stall import Repeat, Watch, opaque_said, repeat_text, stall_steps

Emit = Callable[[Emitted], None]
Runs = Iterable[tuple[int, Iterable[Any]]]  # runs of inputs, each with its first line

# Warnings of one kind shown before the rest are only counted.
WARNINGS_SHOWN: Final = 10


class PolicyCrashed(UsageError):
    """The policy raised instead of answering (a broken plugin, usually)."""


class Observer(Protocol):
    """Sees what the engine sees, with step numbers (metrics, timelines); it hears of a
    batch before the batch's record is emitted."""

    def accepted(self, tasks: list[Task], step: int) -> None: ...

    def dispatched(self, batch: list[Task], step: int) -> None: ...

    def dropped(self, tasks: list[Task], step: int) -> None: ...

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None: ...


def stderr_warning(message: str) -> None:
    print(message, file=sys.stderr)


class ReplayDriver:
    """Drives one policy through one trace's inputs: ``apply`` each (``run``), then
    ``close``. A level's stepper subclasses it and fills in the methods marked as its."""

    # What a check compares, for the app's words (levels.Driver): the call an expect is
    # recorded on, and what the calls compared are counted as.
    expect_call = ""
    check_unit = ""

    def __init__(
        self,
        policy_name: str,
        emit: Emit,
        totals: Totals,
        *,
        check: bool,
        drain: bool,
        on_step: Callable[[int], None] | None,
        observer: Observer | None,
        on_left: Callable[[int, Left], None] | None,
        inputs: Callable[[], Runs],
        before_close: Callable[[], None] | None,
    ) -> None:
        """``inputs``: the runs of the trace it replays (``replay``, ``lockstep``), read
        when called; ``before_close`` runs after the last of them (and may refuse)."""
        self.policy_name = policy_name
        self.emit = emit
        self.totals = totals
        self.check = check
        self.drain = drain
        self.on_step = on_step
        self.observer = observer
        self.on_left = on_left
        self._inputs = inputs
        self._before_close = before_close
        self.checked = 0  # recorded calls compared with their expect
        # The step of the last batch while nothing has changed the policy since, so its
        # left_behind() still speaks of it; -1 once something has.
        self.last_batch_step = -1
        # Empty batches in a row with work queued after which a policy is stopped, where
        # nothing proves it stuck (the stall_steps option).
        self.stall_steps = stall_steps()

    # --- the level's (its stepper overrides each) ---------------------------------------

    def apply(self, item: Any, line: int) -> None:
        """One input, read at ``line``, applied to the policy."""
        raise NotImplementedError

    def moves_steps(self, item: Any) -> bool:
        """Whether applying ``item`` may run steps before its call (``applying``)."""
        return False

    def applying(self, item: Any, line: int) -> Iterator[int]:
        """``apply`` of an item that ``moves_steps``, pausing after each step it runs."""
        self.apply(item, line)
        yield from ()

    def has_work(self) -> bool:
        raise NotImplementedError

    def step_once(self, step: int) -> tuple[bool, bool]:
        """One step of a drain, numbered ``step``: whether it made progress, and whether
        its batch was empty."""
        raise NotImplementedError

    def watch(self) -> Watch:
        """The stall watch of a drain after the trace."""
        raise NotImplementedError

    def stuck(self) -> str:
        """The work still queued and why, for a stop."""
        raise NotImplementedError

    def held_text(self) -> str:
        """How much work is queued, and the first few of it."""
        raise NotImplementedError

    def broken(self, message: str, *more: Said) -> InvariantError:
        """The policy broke the level's contract, where the replay stands."""
        raise NotImplementedError

    def waited(self, empty_run: int, until: int) -> InvariantError:
        """No batch for ``empty_run`` steps with work queued, before step ``until``."""
        return self.broken(
            f"no batch for {empty_run} steps with work queued ({self.held_text()}), before "
            f"the trace's next step {until} (",
            Option("stall_steps"),
            " sets how long to wait)",
        )

    def closing(self) -> Iterator[int]:
        """The drain the level asks for after the last input, yielding each step."""
        raise NotImplementedError

    def account(self) -> Record:
        """The end's accounting (every accepted task dispatched, cancelled or reported
        still queued, or the contract broken): the end record."""
        raise NotImplementedError

    # --- the loop, written once ------------------------------------------------------

    def draining(self, step: int, until: int | None = None) -> Iterator[int]:
        """Steps while work is queued (and step < until), yielding each. After the trace
        (``until`` None), a policy that stalls or cycles is found as it shows."""
        watch = self.watch() if until is None else None
        # Between inputs (``until``): something is still to come, so nothing is proven;
        # what was seen is said, at the bound.
        empty_run = 0
        while (until is None or step < until) and self.has_work():
            if step > INT_MAX:  # every step a replay writes is int64 (a state's step sets it)
                raise UsageError(
                    f"draining would take step {step}, past {INT_MAX} (2^63-1), the largest "
                    "step schedcli writes"
                )
            progress, empty = self.step_once(step)
            if progress:
                empty_run = 0
                if watch is not None:
                    watch.busy()
            elif watch is not None:
                found = watch.quiet(step, empty)
                if found is not None or watch.given_up():
                    raise self.stalled(found, watch)
            else:
                empty_run += 1
                if until is not None and empty_run >= self.stall_steps:
                    raise self.waited(empty_run, until)
            yield step
            step += 1

    def stalled(self, found: Repeat | None, watch: Watch) -> InvariantError:
        """Why the drain stops: the finding, and the work still queued with its reasons."""
        stuck = self.stuck()
        if found is not None:
            return self.broken(repeat_text(found, stuck))
        head, *more = opaque_said(watch, stuck)
        return self.broken(str(head), *more)

    def replay(self) -> Totals:
        """Every input of the trace it is bound to (``inputs``), then close."""
        return self.run(self._inputs(), self._before_close)

    def run(self, runs: Runs, before_close: Callable[[], None] | None = None) -> Totals:
        """Apply every input, then (after ``before_close``, which may refuse) close."""
        with few_collections():
            for line, items in runs:
                for item in items:
                    self.apply(item, line)  # a native call to the task level's (compiled)
                    line += 1
        if before_close is not None:
            before_close()
        return self.close()

    def lockstep(self, other: ReplayDriver, after_each: Callable[[], None]) -> None:
        """Every input here and a copy to ``other`` (a sibling's), then close both;
        ``after_each`` after each run of inputs. Steps an input (or the close) runs are
        taken in turns, so each batch is compared while both policies stand at its step."""
        with few_collections():
            for line, items in self._inputs():
                for item in items:
                    copy = self.twin(item)
                    if self.moves_steps(item) or other.moves_steps(copy):
                        _in_turns(self.applying(item, line), other.applying(copy, line))
                    else:
                        self.apply(item, line)
                        other.apply(copy, line)
                    line += 1
                after_each()
        if self._before_close is not None:
            self._before_close()
        _in_turns(self.closing(), other.closing())
        self.finish()
        other.finish()

    def twin(self, item: Any) -> Any:
        """``item`` as a second policy is fed it (its own copy where it may change it)."""
        return item

    def close(self) -> Totals:
        """After the last input: drain as the level says, then account."""
        for _ in self.closing():
            pass
        self.finish()
        return self.totals

    def finish(self) -> None:
        """The accounting check, and the end record."""
        self.emit(self.account())


def _in_turns(steps_a: Iterator[int], steps_b: Iterator[int]) -> None:
    """One step of each in turn until both are done (a generator ends with its line's rest)."""
    done_a = done_b = False
    while not (done_a and done_b):
        if not done_a:
            done_a = next(steps_a, None) is None
        if not done_b:
            done_b = next(steps_b, None) is None


__all__ = [
    "EXPLICIT",
    "PLAIN",
    "STEPPED",
    "Emit",
    "Observer",
    "OutcomeMismatch",
    "PolicyCrashed",
    "Record",
    "RecordingRaised",
    "ReplayDriver",
    "Totals",
]
