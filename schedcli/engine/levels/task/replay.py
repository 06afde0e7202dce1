"""The task level's stepper: how the replay driver (``engine/replay.py``) applies a task
trace's events to a ``Scheduler`` and turns each get_work into a batch record.

The step clock (``engine/clock.py``) says when get_work is due, and the ledger
(``engine/ledger.py``) checks every answer of the policy, so a policy that loses a task,
returns one twice or breaks a session rule is caught where it happens (exit 3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import final

from ....formats.step_lines import StepLines
from ....formats.trace import Event, Line, Run, StateLine, as_event
from ....model.errors import (
    BadSnapshot,
    InputError,
    InvariantError,
    PolicyAborted,
    Said,
    SchedcliError,
    SnapshotUnsupported,
    UnfitTask,
)
from ....model.limits import INT_MAX
from ....model.records import Left, Record, discard
from ....model.scheduler import Scheduler
from ....model.steps import Step
from ....model.task import Id, Task, same_id, show_id
from ...clock import EXPLICIT, StepClock
from ...ledger import Ledger, Totals
from ...lockstep import twin
from ...recorded import (
    ExpectMismatch,
    Mismatch,
    OutcomeMismatch,
    RecordingRaised,
    raised_in,
    recorded_rejection,
)
from ...replay import WARNINGS_SHOWN, Emit, Observer, PolicyCrashed, ReplayDriver, stderr_warning
from ...stall import Watch, stuck_text, tasks_stuck


@final  # no level subclasses it: its calls to itself are bound when compiled
class Replayer(ReplayDriver):
    """The task level's stepper: each event to a ``Scheduler`` (``feed``), each get_work's
    batch checked by the ledger and emitted as a step record. Failures and warnings are
    named for the policy and located at the step and line."""

    expect_call = "get_work"
    check_unit = "batches"

    def _where(self) -> str:
        return f"line {self._line}" if self._line else "the end of the trace"

    def _past_int64(self, step: int) -> SchedcliError:
        """The tokens dispatched add up past what a count is written in: the trace's sizes
        are each within bounds, their sum is not (a bound on the input, exit 2)."""
        return InputError(
            self.clock.trace_name,
            self._line or None,
            f"the tokens dispatched up to step {step} add up to {self.totals.tokens}, past "
            f"{INT_MAX} (2^63-1), the largest count schedcli writes",
        )

    def _crash(self, call: str, e: Exception) -> SchedcliError:
        if isinstance(e, PolicyAborted):
            return self._broken(f"{call}: {e}")
        if isinstance(e, UnfitTask):
            where = self.clock.trace_name
            return InputError(where, self._line or None, f"{e} (policy {self.policy_name!r})")
        return PolicyCrashed(
            f"policy {self.policy_name!r} raised in {call} at step {self._next_step} "
            f"({self._where()}): {type(e).__name__}: {e}"
        )

    def crashed(self, call: str, e: Exception) -> SchedcliError:
        """The policy raised in ``call`` (snapshot(), for a state taken): as ``_crash``."""
        return self._crash(call, e)

    def _broken(self, message: str, *more: Said) -> InvariantError:
        where = f"at step {self._next_step} ({self._where()})"
        return InvariantError(
            f"policy {self.policy_name!r} broke the Scheduler contract {where}: {message}", *more
        )

    def _two_outputs(self, message: str) -> None:
        self.two_output_batches += 1
        if self.two_output_batches <= WARNINGS_SHOWN:
            self._warn(
                f"warning: step {self._next_step} ({self._where()}): {message} "
                f"(policy {self.policy_name!r} keeps the reference's behaviour)"
            )

    def __init__(
        self,
        policy: Scheduler,
        emit: Emit,
        *,
        policy_name: str = "",
        trace_name: str = "<trace>",
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        warn: Callable[[str], None] | None = None,
        on_left: Callable[[int, Left], None] | None = None,
        recorded_outcomes: bool = False,
        dump: StepLines | None = None,
        allow_incomplete: bool = False,
        inputs: Callable[[], Iterable[Run]] = tuple,
        before_close: Callable[[], None] | None = None,
        start: StateLine | None = None,
    ) -> None:
        """``start``: the state the trace begins from (its state line), restored into the
        policy before the first event. ``inputs``: the lines of the trace it replays
        (``replay``, ``lockstep``), read when called; ``before_close`` runs after the last
        of them (and may refuse).
        ``recorded_outcomes``: the trace is a recording that marks every rejected submit
        (``meta.rejected``), so under ``check`` an unmarked submit must be accepted. Under
        ``check``, a call the recorded scheduler raised in (``meta.raised``) fails the
        check, unless ``allow_incomplete``.
        ``dump``: the JSONL dump is the only output, and takes each batch's step record
        from the batch itself (``emit`` gets the other records)."""
        super().__init__(
            policy_name or type(policy).__name__,
            emit,
            Totals(budget=policy.token_budget),
            check=check,
            drain=drain,
            on_step=on_step,
            observer=observer,
            on_left=on_left,
            inputs=inputs,
            before_close=before_close,
        )
        self.policy = policy
        self.dump = dump
        self._listing = dump is None and emit is not discard  # step records are wanted
        self.recorded_outcomes = recorded_outcomes
        # Why tasks were left behind, after every batch (``on_left``): asked of the policy
        # only when someone listens, since collecting reasons costs it a pass over its queue.
        if on_left is not None:
            policy.explaining = True
        self._check_raised = check and not allow_incomplete
        self._warn = warn or stderr_warning
        self.clock = StepClock(trace_name)
        self.ledger = Ledger(
            self._broken,
            self._two_outputs,
            budget=policy.token_budget,
            two_outputs_fatal=policy.one_output_per_session,
        )
        self._line = 0
        self._next_step = 0
        self.get_work_events = 0  # get_work events read (explicit mode)
        self.outcomes_checked = 0  # submits whose accepted/rejected outcome was compared
        self.two_output_batches = 0
        if start is not None:
            self._begin(start)

    def _begin(self, start: StateLine) -> None:
        """The policy restored from the state; the ledger holds its queued tasks as accepted
        and queued, the totals its counts, and the clock is explicit from its step, so the
        replay goes on as the full one did from there (docs/trace-format.md)."""
        self._line = start.line
        groups = restore_state(self.policy, start, self.clock.trace_name)
        self.ledger.seed(groups)
        counts = start.ledger
        totals = self.totals
        totals.steps = start.step
        totals.accepted = counts["accepted"]
        totals.dispatched = counts["dispatched"]
        totals.cancelled = counts["cancelled"]
        totals.rejected = counts["rejected"]
        totals.rejected_tasks = counts["rejected_tasks"]
        totals.tokens = counts["tokens"]
        self.clock.start(start.step, start.line)
        self._next_step = start.step
        observer = self.observer
        if observer is not None:
            for group in groups:
                observer.accepted(group, start.step)
            claimed = getattr(observer, "claimed", None)
            if claimed is not None:  # it keys tasks by identity (origins, lives)
                self.ledger.on_claim = claimed

    # --- the rest of the driver protocol (engine/run.py, Driver) ----------------------

    @property
    def check_total(self) -> int:  # what --check could compare: get_work events
        return self.get_work_events

    @property
    def nothing_checked(self) -> bool:
        return self.checked == 0 and self.outcomes_checked == 0

    def checked_text(self) -> str:
        said = f"checked {self.checked} of {self.get_work_events} batches"
        if self.outcomes_checked:
            said += f" and {self.outcomes_checked} submit outcomes"
        return said

    def queued_count(self) -> int:
        return len(self.ledger.queued)

    def level_summary(self) -> dict[str, object]:  # the task level adds nothing to metrics
        return {}

    def left_behind(self) -> Left:
        return self.policy.left_behind()

    @property
    def queued(self) -> dict[Id, Task]:
        """Accepted tasks not yet returned, in acceptance order."""
        return self.ledger.queued

    @property
    def current_line(self) -> int:
        """The trace line being applied (0 after the last one)."""
        return self._line

    @property
    def upcoming_step(self) -> int:
        """The step number the next get_work will have (events are shown against it)."""
        return self._next_step

    def has_work(self) -> bool:
        try:
            answer = self.policy.has_work()
        except Exception as e:
            raise self._crash("has_work", e) from e
        if answer != bool(self.ledger.queued):
            raise self._broken(
                f"has_work() is {answer} but {len(self.ledger)} accepted tasks are queued"
                + (f" (tasks: {_some(self.ledger.queued)})" if self.ledger.queued else "")
            )
        return answer

    # --- one call each ------------------------------------------------------------------

    def submit(self, event: Event) -> None:
        self._submit(event.tasks or [], event.line, event.meta)

    def _submit(self, tasks: list[Task], line: int, meta: object = None) -> None:
        self.last_batch_step = -1
        try:
            reason = self.policy.try_submit(tasks)
        except Exception as e:
            raise self._crash("submit", e) from e
        if self.check:
            self._check_outcome(line, meta, reason)
        totals = self.totals
        if reason is None:
            self.ledger.accept(tasks)
            totals.accepted += len(tasks)
            if self.observer is not None:
                self.observer.accepted(tasks, self._next_step)
            return
        totals.rejected += 1
        totals.rejected_tasks += len(tasks)
        if self.observer is not None:
            self.observer.rejected(tasks, self._next_step, str(reason))
        self.emit(
            {
                "line": line,
                "op": "submit",
                "accepted": False,
                "tids": [t.tid for t in tasks],
                "sids": list(dict.fromkeys(t.sid for t in tasks)),
                "reason": str(reason),
            }
        )

    def _check_outcome(self, line: int, meta: object, reason: str | None) -> None:
        recorded = recorded_rejection(meta)
        if recorded is None and not self.recorded_outcomes:
            return  # this trace does not say whether the submit was accepted
        self.outcomes_checked += 1
        if (recorded is None) != (reason is None):
            replayed = None if reason is None else str(reason)
            raise OutcomeMismatch(self.clock.trace_name, line, recorded, replayed)

    def cancel(self, event: Event) -> None:
        sid = event.sid
        assert sid is not None  # the reader never builds a cancel without one
        self.last_batch_step = -1
        try:
            dropped = self.policy.cancel(sid)
        except Exception as e:
            raise self._crash("cancel", e) from e
        self.ledger.cancelled(sid, dropped)
        self.totals.cancelled += len(dropped)
        if self.observer is not None:
            self.observer.dropped(dropped, self._next_step)
        self.emit(
            {"line": event.line, "op": "cancel", "sid": sid, "dropped": [t.tid for t in dropped]}
        )

    def clear(self, event: Event) -> None:
        self.last_batch_step = -1
        try:
            dropped = self.policy.clear()
        except Exception as e:
            raise self._crash("clear", e) from e
        self.ledger.cleared(dropped)
        self.totals.cancelled += len(dropped)
        if self.observer is not None:
            self.observer.dropped(dropped, self._next_step)
        self.emit({"line": event.line, "op": "clear", "dropped": [t.tid for t in dropped]})

    def get_work(self, step: int, event: Event | None = None) -> int:
        """One get_work call recorded as ``step``; returns the batch size."""
        self._next_step = step
        try:
            batch = self.policy.get_work()
        except Exception as e:
            raise self._crash("get_work", e) from e
        tokens, entries = self.ledger.dispatched(batch, self._listing)
        totals = self.totals
        totals.steps += 1
        totals.dispatched += len(batch)
        totals.tokens += tokens
        if totals.tokens > INT_MAX:  # every count a dump, stats or a view writes is int64
            raise self._past_int64(step)
        if tokens > totals.peak_tokens:
            totals.peak_tokens = tokens
        self._next_step = step + 1
        self.last_batch_step = step
        if self.observer is not None:
            self.observer.dispatched(batch, step)
        if self.on_left is not None:
            self.on_left(step, self.policy.left_behind())
        if event is not None:
            self.get_work_events += 1
        if self.check and event is not None and event.expect is not None:
            self.checked += 1
            if not _same_ids([t.tid for t in batch], event.expect):
                queued = dict(self.ledger.queued)
                left = self.policy.left_behind()  # this batch's reasons, while they hold
                mismatch = Mismatch(step, event.line, event.expect, batch, queued, left)
                raise ExpectMismatch(mismatch, self.clock.trace_name)
        if self._listing:
            self.emit(Step(step, entries, tokens, len(self.ledger)))
        elif self.dump is not None:
            self.dump.write(step, batch, tokens, len(self.ledger))
        if self.on_step is not None:
            self.on_step(step)
        return len(batch)

    # --- the loop -----------------------------------------------------------------------

    def step_once(self, step: int) -> tuple[bool, bool]:
        return self.get_work(step) > 0, True

    def watch(self) -> Watch:
        return Watch(self.policy, name=self.policy_name)

    def stuck(self) -> str:
        return tasks_stuck(self.policy, list(self.ledger.queued))

    def held_text(self) -> str:
        return f"{len(self.ledger)} tasks: {_some(self.ledger.queued)}"

    def broken(self, message: str, *more: Said) -> InvariantError:
        return self._broken(message, *more)

    def _advancing(self, event: Event) -> Iterator[int]:
        """Stepped traces: run the steps an event's step number moves past, yielding each."""
        moved = self.clock.advance(event)
        if moved is not None:
            old, new = moved
            if self.has_work():
                self.get_work(old)
                yield old
            yield from self.draining(old + 1, until=new)
            self._line = event.line
        if self.clock.mode is not EXPLICIT:
            self._next_step = self.clock.final_step

    def feed(self, event: Event) -> None:
        """Apply one event, calling get_work where the step mode says."""
        self._line = event.line
        if self._check_raised and event.meta is not None:
            raised = raised_in(event.meta)
            if raised is not None:
                raise RecordingRaised(self.clock.trace_name, event.line, event.op, raised)
        if event.op == "get_work":
            self.get_work(self.clock.get_work_step(event), event)
            return
        if event.step is not None or self.clock.current is None:
            for _ in self._advancing(event):
                pass
        self._call(event)

    def _call(self, event: Event) -> None:
        op = event.op
        if op == "submit":
            self.submit(event)
        elif op == "cancel":
            self.cancel(event)
        else:
            self.clear(event)

    def apply(self, item: Line, line: int) -> None:
        """One trace line as the reader hands it on: ``feed``, with a submit that has no
        step taken straight to the policy once the step clock has started (the clock has
        nothing to do for it)."""
        self._line = line
        if isinstance(item, list):
            if self.clock.current is None:
                self.feed(as_event(item, line))
            else:
                self._submit(item, line)
        elif (
            item.op == "submit"
            and item.step is None
            and self.clock.current is not None
            and (item.meta is None or not self._check_raised)
        ):
            self._submit(item.tasks or [], line, item.meta)
        else:
            self.feed(item)

    def moves_steps(self, item: Line) -> bool:
        """Whether applying ``item`` may run steps before its call (a stepped event)."""
        return (
            isinstance(item, Event)
            and item.op != "get_work"
            and (item.step is not None or self.clock.current is None)
        )

    def applying(self, item: Line, line: int) -> Iterator[int]:
        """``apply`` of an item that ``moves_steps``, pausing after each batch of the steps
        it moves past, so that ``diff`` can hold two policies at the same step (their
        reasons still speak of it)."""
        assert isinstance(item, Event)
        self._line = line
        yield from self._advancing(item)
        self._call(item)

    def twin(self, item: Line) -> Line:
        return twin(item)

    def closing(self) -> Iterator[int]:
        """The drain the mode asks for after the last event, yielding each step; then
        ``finish``."""
        self._line = 0
        clock = self.clock
        self.totals.mode = clock.mode
        if clock.mode is EXPLICIT:
            if self.drain:
                yield from self.draining(clock.next_explicit)
        else:
            step = clock.final_step
            if self.has_work():
                self.get_work(step)
                yield step
            yield from self.draining(step + 1)

    def account(self) -> Record:
        """Every accepted task dispatched, cancelled or still queued (and still held)."""
        hidden = self.two_output_batches - WARNINGS_SHOWN
        if hidden > 0:
            self._warn(f"warning: and {hidden} more times a batch owed a session two outputs")
        self.has_work()
        if self.ledger.queued:
            self._still_held()
        self.ledger.account(self.totals)
        return self.totals.end_record()

    def _still_held(self) -> None:
        """Tasks still queued at the end must still be in the policy, not forgotten by it:
        the policy is asked for batches (shown nowhere) until each has come back. One it
        never returns, while has_work() says there is none, or while it gives none and
        its state is unchanged (or --stall-steps empty batches in a row, where nothing
        proves that), was lost (the contract broken, with or without --drain)."""
        waiting = dict(self.ledger.queued)
        self.last_batch_step = -1  # the policy is about to move past its last batch
        watch = Watch(self.policy, name=self.policy_name)
        step = self.clock.final_step
        while waiting:
            try:
                more = self.policy.has_work()
                batch = self.policy.get_work() if more else []
            except Exception as e:
                raise self._crash("get_work (after the trace, for the tasks it holds)", e) from e
            if not more:
                raise self._broken(
                    "has_work() is False while tasks it accepted were never returned: asked "
                    f"for batches after the trace, it lost them (tasks: {_some(waiting)})"
                )
            self.ledger.held_back(waiting, batch)
            if batch:
                watch.busy()
                continue
            step += 1
            found = watch.quiet(step, True)
            if found is not None or watch.given_up():
                why = (
                    "gives none, its state "
                    + ("unchanged" if found.stalled else "repeating")
                    + ": it never will"
                    if found is not None
                    else f"gave none in {watch.empty_run} calls in a row, and "
                    f"{watch.reason()}; whether it ever would is not known"
                )
                raise self._broken(
                    "tasks it accepted are still queued at the end, and asked for batches "
                    f"after the trace, it {why}. Stuck: {stuck_text(list(waiting), (), 'task')}"
                )


def restore_state(policy: Scheduler, start: StateLine, trace_name: str) -> list[list[Task]]:
    """``start``'s state restored into ``policy`` (freshly built), and its queued tasks as
    the groups they were submitted in; whatever is wrong is bad input at the state's line
    (exit 2), in the same words for ``replay`` and ``validate``. A state is its policy's
    own: it restores only into the policy it names."""
    line = start.line
    state = start.state
    named = state.get("policy")
    try:
        policy.restore(state)
    except SnapshotUnsupported as e:
        raise InputError(
            trace_name, line, f"{e}; this trace begins from a state, which it must restore"
        ) from None
    except BadSnapshot as e:
        if named != policy.name:  # the first thing wrong with another policy's state
            raise InputError(trace_name, line, _not_its_own(named, policy.name)) from None
        raise InputError(trace_name, line, _field(e)) from None
    except SchedcliError:
        raise
    except Exception as e:  # the policy's own code raised: reported as a get_work raising is
        raise PolicyCrashed(
            f"policy {policy.name!r} raised in restore() restoring the state "
            f"(line {line}): {type(e).__name__}: {e}"
        ) from e
    if named != policy.name:  # a plugin's restore need not check it
        raise InputError(trace_name, line, _not_its_own(named, policy.name))
    from ....model.snapshot import a_list, a_task

    groups: list[list[Task]] = []
    try:
        for i, g in enumerate(a_list(state.get("queued"), "queued")):
            items = a_list(g, f"queued[{i}]")
            groups.append([a_task(v, f"queued[{i}][{j}]")[0] for j, v in enumerate(items)])
    except BadSnapshot as e:
        raise InputError(trace_name, line, _field(e)) from None
    counts = start.ledger
    held = counts["accepted"] - counts["dispatched"] - counts["cancelled"]
    queued = sum(len(g) for g in groups)
    if held != queued:
        raise InputError(
            trace_name,
            line,
            f"ledger: accepted {counts['accepted']} - dispatched {counts['dispatched']} - "
            f"cancelled {counts['cancelled']} = {held} tasks still queued, but the state "
            f"holds {queued}",
        )
    held_tokens = sum(t.size for g in groups for t in g)
    if counts["tokens"] + held_tokens > INT_MAX:  # replay and validate refuse alike, here
        raise InputError(
            trace_name,
            line,
            f"ledger: tokens {counts['tokens']} + the {held_tokens} tokens the state holds "
            f"queued is past {INT_MAX} (2^63-1), the largest count schedcli writes",
        )
    return groups


def _field(e: BadSnapshot) -> str:
    """A refused state's field, as the state line spells its path."""
    where = "state" if e.field in ("", "state") else f"state.{e.field}"
    return f"{where}: {e.why}"


def _not_its_own(named: object, policy: str) -> str:
    if not isinstance(named, str):
        return f"state.policy must name the policy the state is of, not {named!r}"
    return (
        f"the state is of policy {named!r}: a state restores only into the policy it names, "
        f"not into {policy!r}: replay it under {named}"
    )


def _some(tasks: dict[Id, Task]) -> str:
    """The first few tids of ``tasks``, and how many more."""
    shown = ", ".join(show_id(tid) for tid in list(tasks)[:5])
    return shown + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")


def _same_ids(got: list[Id], expected: list[Id]) -> bool:
    return len(got) == len(expected) and all(map(same_id, got, expected))
