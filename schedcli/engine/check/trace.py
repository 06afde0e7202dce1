"""One trace of a suite checked: replayed once, its expects checked as they come, its dump
compared with its golden step by step (and, on ``update``, written to take its place), the
outcome a ``Verdict``: what was found, as data, for the app to word."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ...formats.dump import partial_record
from ...formats.writer import JsonlWriter
from ...model.errors import CheckFailed, InputError, InvariantError, SchedcliError, StepMismatch
from ...model.records import Left
from ...model.steps import Emitted, Step
from ...streams.interrupt import stop_reason
from ...streams.output import atomic_output
from ..diff import DiffResult
from ..pool import Vanished
from ..run import open_replay
from .golden import GoldenComparison, LeftOut
from .suite import link_trouble, shown_as

PASS, FAIL, UNCHECKED, ERROR = "pass", "FAIL", "unchecked", "error"
BROKEN = "BROKEN"  # the policy broke the Scheduler contract (exit 3): not the trace's fault


@dataclass
class Job:
    """One trace to check, and how (sent to a worker process)."""

    trace: str
    golden: str | None
    policy: str | None
    params: dict[str, object]
    update: bool
    dry_run: bool
    golden_required: bool = True
    allow_incomplete: bool = False
    alias: tuple[str, str] | None = None  # Suite.alias: how its paths are shown
    # What the run was given outside the command's arguments (--executorch, or
    # $EXECUTORCH_ROOT, for a C++ policy; --stall-steps): its reproduce command repeats it.
    executorch: str | None = None
    stall_steps: str | None = None


@dataclass(frozen=True)
class Compared:
    """The replay's dump against the golden: steps compared, whether the golden pins the
    contract break the replay ended in, rejections worded differently (never a
    difference), and what differs (``first_step``: where it starts)."""

    steps: int
    pinned: bool
    reasons_differing: int
    same: bool
    steps_differing: int
    events_differing: int
    first_step: int | None


@dataclass(frozen=True)
class Updated:
    """What ``update`` did to ``golden`` (with ``dry_run``, would do): wrote a new one of
    ``steps`` steps (in place of one that could not be read: ``unreadable`` says why), or,
    with ``steps`` None, replaced one that differed (``Verdict.compared`` says how)."""

    golden: str
    dry_run: bool
    steps: int | None = None
    unreadable: str | None = None


@dataclass
class Verdict:
    """One trace's outcome: ``status`` (PASS, FAIL, UNCHECKED, ERROR, BROKEN) and what was
    found. What failed is kept as found (``mismatch``, ``error``, ``diff`` and ``left_out``,
    ``ended``):
    live objects of the replay, worded and drawn where the trace was checked."""

    job: Job
    status: str
    golden: str | None = None  # the golden compared, or written
    checked: str | None = None  # what the expects checked; None: nothing
    compared: Compared | None = None
    updated: Updated | None = None
    no_golden: bool = False  # it failed for want of a golden
    expects: bool = False  # the trace records expects (they had something to check)
    line: int | None = None  # the trace line a failure points at
    exit_code: int = 0  # for ERROR 2 (bad input), for BROKEN 3
    mismatch: StepMismatch | None = None  # the first step that differs from its expect
    error: SchedcliError | None = None  # a CheckFailed, or why it was not checked
    diff: DiffResult | None = None  # the golden's difference
    left_out: LeftOut | None = None  # what the replay left out there that the golden has
    ended: Vanished | None = None  # the process checking it ended without a verdict


def check_job(job: Job) -> Verdict:
    """``job``'s verdict, whatever it raises: a difference from its expects fails it, bad
    input is an ERROR and a contract break BROKEN (each with its exit code)."""
    try:
        verdict = check_trace(job)
    except CheckFailed as e:  # a submit outcome differs, or the recording is incomplete
        verdict = Verdict(job, FAIL, expects=True, error=e, line=_line_of(e))
    except SchedcliError as e:
        status = BROKEN if isinstance(e, InvariantError) else ERROR
        verdict = Verdict(job, status, error=e, line=_line_of(e), exit_code=e.exit_code)
    if verdict.golden is None and job.golden is not None and os.path.exists(job.golden):
        verdict.golden = job.golden
    return verdict


def vanished(job: Job, ended: Vanished) -> Verdict:
    """The verdict of a job whose process ended without one: its policy ended the process
    (a C++ scheduler), a contract break."""
    return Verdict(job, BROKEN, exit_code=3, ended=ended)


def _line_of(e: SchedcliError) -> int | None:
    line = getattr(e, "line", None)
    return line if isinstance(line, int) else None


class _Tee:
    """The replay's records to each sink."""

    def __init__(self) -> None:
        self.sinks: list[Callable[[Emitted], None]] = []

    def __call__(self, record: Emitted) -> None:
        for sink in self.sinks:
            sink(record)


def check_trace(job: Job) -> Verdict:
    """One trace replayed once: its expects checked as they come, its dump compared with
    its golden (when there is one) step by step, and on ``update`` written beside it to
    take its place if it differs or is missing. A link that leads to no file is bad
    input naming the link; a difference from an expect is a FAIL (raised: a CheckFailed
    that is not a step's)."""
    trouble = link_trouble(job.trace)
    if trouble is not None:
        raise InputError(shown_as(job.alias, job.trace), None, trouble)
    new = NewGolden(job.golden, job.dry_run) if job.update and job.golden else None
    try:
        return _check(job, new)
    finally:
        if new is not None:
            new.drop()  # unless kept


def _check(job: Job, new: NewGolden | None) -> Verdict:
    golden = job.golden
    tee = _Tee()
    with open_replay(
        job.trace,
        policy=job.policy,
        params=job.params,
        note=lambda _: None,
        allow_incomplete=job.allow_incomplete,
    ) as opened:
        opened.explain()  # a difference's reasons, kept as it is found
        engine = opened.replayer(tee, check=True)
        comparison = None
        unreadable = _unreadable(golden) if new is not None and golden is not None else None
        if golden is not None and os.path.exists(golden) and unreadable is None:
            label = f"replay under {opened.policy_name}"
            comparison = GoldenComparison(golden, label, lambda: engine, job.allow_incomplete)
            # Named as the user knows it (drawn, so not rewritten after: lines wrap).
            comparison.result.labels = (f"golden {shown_as(job.alias, golden)}", label)
            tee.sinks.append(comparison)
        if new is not None:
            tee.sinks.append(new)
        pinned = broke = False
        try:
            engine.replay()
        except StepMismatch as e:
            return Verdict(job, FAIL, expects=True, mismatch=e, line=e.mismatch.line)
        except InvariantError as e:  # passes only where the golden pins this very break
            if comparison is None:
                raise
            broke = True
            ending = partial_record(stop_reason(e), engine.totals.steps, True)
            pinned = comparison.pins(ending)
            if not pinned and (not comparison.pins_a_break or new is not None):
                raise  # no golden expected a break (or --update: never blessed in passing)
        if comparison is not None and not broke:
            comparison.finish()
    verdict = Verdict(job, PASS)
    if not engine.nothing_checked:
        verdict.checked, verdict.expects = engine.checked_text(), True
    if comparison is not None:
        _compared(verdict, job, comparison, pinned, new)
    elif new is not None:
        verdict.updated = new.keep(Updated(new.golden, new.dry_run, new.steps, unreadable))
        if not new.dry_run:
            verdict.golden = golden
    elif golden is not None and job.golden_required:
        verdict.status, verdict.no_golden = FAIL, True
    written = verdict.updated is not None and not verdict.updated.dry_run
    if verdict.checked is None and comparison is None and not written and not verdict.no_golden:
        verdict.status = UNCHECKED  # nothing to check: no expect, no golden
    return verdict


def _compared(
    verdict: Verdict,
    job: Job,
    comparison: GoldenComparison,
    pinned: bool,
    new: NewGolden | None,
) -> None:
    verdict.golden = job.golden
    result = comparison.result
    first = result.first
    verdict.compared = Compared(
        result.steps_compared,
        pinned,
        result.reasons_differing,
        comparison.same,
        result.steps_differing,
        result.events_differing,
        first.step if first is not None else None,
    )
    if comparison.same:
        return
    if new is not None:
        verdict.updated = new.keep(Updated(new.golden, new.dry_run))
        if not new.dry_run:
            return  # the golden is now this replay's dump
    verdict.status = FAIL
    verdict.diff = result
    verdict.left_out = comparison.left_out(lambda step: _reasons_at(job, step))
    verdict.line = comparison.first_line


def _reasons_at(job: Job, step: int) -> Left:
    """The replay's reasons at ``step`` (``explain.reasons_at``)."""
    from ..explain import reasons_at

    found = reasons_at(job.trace, step, job.policy, job.params)
    return found.left if found is not None else None


def _unreadable(golden: str) -> str | None:
    """Why a golden about to be rewritten cannot be read as a complete dump (cut short,
    malformed), so ``update`` writes it anew instead of comparing with it; None if it
    reads, or does not exist."""
    if not os.path.exists(golden):
        return None
    from ...formats.dump import read_dump

    try:
        for _ in read_dump(golden, golden=True):
            pass
    except SchedcliError as e:
        return str(e)
    return None


class _Dropped(Exception):
    """Leaves an atomic output unwritten."""


@dataclass
class NewGolden:
    """``update``: the replay's dump written beside the golden as it is made (never held
    in memory), put in the golden's place only by ``keep``; with ``dry_run``, only its
    steps counted."""

    golden: str
    dry_run: bool
    steps: int = 0
    _stack: ExitStack = field(default_factory=ExitStack)
    _write: JsonlWriter | None = None

    def __post_init__(self) -> None:
        if not self.dry_run:
            Path(self.golden).parent.mkdir(parents=True, exist_ok=True)
            self._write = JsonlWriter(self._stack.enter_context(atomic_output(self.golden)))

    def __call__(self, record: Emitted) -> None:
        if isinstance(record, Step):
            self.steps += 1
        if self._write is not None:
            self._write(record)

    def keep(self, updated: Updated) -> Updated:
        """The golden replaced (atomically), unless ``dry_run``; ``updated`` returned."""
        if not self.dry_run:
            self._stack.close()
        return updated

    def drop(self) -> None:
        self._stack.__exit__(_Dropped, _Dropped(), None)
