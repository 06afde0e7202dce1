"""The replay engine: owns the loop, the bookkeeping and the accounting; the policy decides.

The engine feeds trace events to a policy, calls ``get_work`` as the trace's step mode
says, and emits one record per thing that happened (see the dump in trace-format.md).
It keeps its own ledger of queued tasks and checks every answer of the policy against
it, so a policy that loses a task, returns one twice or breaks a session rule is caught
where it happens (InvariantError, exit 3).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import CheckFailed, InvariantError, UsageError
from .scheduler import Scheduler
from .task import DECODE, Id, Task, same_id, show_id
from .trace import Event

Record = dict[str, Any]
Emit = Callable[[Record], None]

EXPLICIT, STEPPED, PLAIN = "explicit", "stepped", "plain"

# Consecutive empty batches while work is queued, with no event in between, before
# the replay is declared stuck. A deterministic policy repeats itself after one.
STUCK_AFTER = 1000


@dataclass
class Totals:
    """What a replay did, for the ``end`` record and the summary."""

    mode: str = EXPLICIT
    steps: int = 0
    accepted: int = 0
    dispatched: int = 0
    cancelled: int = 0
    rejected: int = 0
    rejected_tasks: int = 0
    queued: int = 0
    tokens: int = 0
    peak_tokens: int = 0
    budget: int | None = None
    still_queued: list[Id] = field(default_factory=list)

    @property
    def mean_utilisation(self) -> float | None:
        if not self.budget or not self.steps:
            return None
        return self.tokens / (self.steps * self.budget)

    @property
    def peak_utilisation(self) -> float | None:
        if not self.budget:
            return None
        return self.peak_tokens / self.budget

    def end_record(self) -> Record:
        end: Record = {
            "steps": self.steps,
            "dispatched": self.dispatched,
            "cancelled": self.cancelled,
            "rejected": self.rejected,
            "queued": self.queued,
            "accepted": self.accepted,
            "rejected_tasks": self.rejected_tasks,
            "tokens": self.tokens,
            "mode": self.mode,
        }
        if self.still_queued:
            end["still_queued"] = self.still_queued
        return {"end": end}


@dataclass
class Mismatch:
    """The first get_work whose batch differs from the trace's ``expect``."""

    step: int
    line: int
    expected: list[Id]
    got: list[Task]
    queued: dict[Id, Task]


class ExpectMismatch(CheckFailed):
    def __init__(self, mismatch: Mismatch) -> None:
        self.mismatch = mismatch
        super().__init__(
            f"line {mismatch.line}: step {mismatch.step} differs from the recorded batch"
        )


class PolicyCrashed(UsageError):
    """The policy raised instead of answering (a broken plugin, usually)."""


def task_entry(t: Task) -> Record:
    """A task as a batch record lists it."""
    if t.meta is None:
        return {"tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size}
    return {"tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size, "meta": t.meta}


class Observer(Protocol):
    """Sees what the engine sees, with step numbers (metrics, timelines)."""

    def accepted(self, tasks: list[Task], step: int) -> None: ...

    def dispatched(self, batch: list[Task], step: int) -> None: ...

    def dropped(self, tasks: list[Task], step: int) -> None: ...


class Replayer:
    """Drives one policy through one trace's events."""

    def __init__(
        self,
        policy: Scheduler,
        emit: Emit,
        *,
        policy_name: str = "",
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.policy = policy
        self.warn = warn or _stderr_warning
        # A policy that reproduces a flawed original may owe a session two outputs;
        # then that is reported, not fatal.
        self._two_outputs_fatal = policy.one_output_per_session
        self.observer = observer
        self.emit = emit
        self.policy_name = policy_name or type(policy).__name__
        self.check = check
        self.drain = drain
        self.on_step = on_step
        self.totals = Totals(budget=policy.token_budget)
        # Our own ledger: tid -> accepted task not yet returned, in acceptance order,
        # and how many of each session's tasks it holds.
        self.queued: dict[Id, Task] = {}
        self.per_session: dict[Id, int] = {}
        self._line = 0
        self._next_step = 0

    @property
    def upcoming_step(self) -> int:
        """The step number the next get_work will have (events are shown against it)."""
        return self._next_step

    # --- failures ---------------------------------------------------------------------

    def _where(self) -> str:
        return f"line {self._line}" if self._line else "the end of the trace"

    def _crash(self, call: str, e: Exception) -> PolicyCrashed:
        return PolicyCrashed(
            f"policy {self.policy_name!r} raised in {call} at step {self._next_step} "
            f"({self._where()}): {type(e).__name__}: {e}"
        )

    def _broken(self, message: str) -> InvariantError:
        return InvariantError(
            f"policy {self.policy_name!r} broke the Scheduler contract at step "
            f"{self._next_step} ({self._where()}): {message}"
        )

    # --- the ledger -------------------------------------------------------------------

    def _has_work(self) -> bool:
        try:
            answer = self.policy.has_work()
        except Exception as e:
            raise self._crash("has_work", e) from e
        if answer != bool(self.queued):
            raise self._broken(
                f"has_work() is {answer} but {len(self.queued)} accepted tasks are queued"
            )
        return answer

    def _take_back(self, t: Task, call: str) -> None:
        tid = t.tid
        if self.queued.get(tid) is not t:
            raise self._broken(
                f"{call} returned task {show_id(tid)}, which is not queued "
                "(returned twice, or never accepted)"
            )
        del self.queued[tid]
        per_session = self.per_session
        left = per_session[t.sid] - 1
        if left:
            per_session[t.sid] = left
        else:
            del per_session[t.sid]

    # --- events -----------------------------------------------------------------------

    def submit(self, event: Event) -> None:
        tasks = event.tasks or []
        try:
            reason = self.policy.try_submit(tasks)
        except Exception as e:
            raise self._crash("submit", e) from e
        totals = self.totals
        if reason is None:
            queued = self.queued
            per_session = self.per_session
            for t in tasks:
                if t.tid in queued:
                    raise self._broken(f"accepted tid {show_id(t.tid)} while it was queued")
                queued[t.tid] = t
                per_session[t.sid] = per_session.get(t.sid, 0) + 1
            totals.accepted += len(tasks)
            if self.observer is not None:
                self.observer.accepted(tasks, self._next_step)
            return
        totals.rejected += 1
        totals.rejected_tasks += len(tasks)
        self.emit(
            {
                "line": event.line,
                "op": "submit",
                "accepted": False,
                "tids": [t.tid for t in tasks],
                "sids": list(dict.fromkeys(t.sid for t in tasks)),
                "reason": str(reason),
            }
        )

    def cancel(self, event: Event) -> None:
        sid = event.sid
        assert sid is not None
        try:
            dropped = self.policy.cancel(sid)
        except Exception as e:
            raise self._crash("cancel", e) from e
        for t in dropped:
            if t.sid != sid:
                raise self._broken(
                    f"cancel({show_id(sid)}) returned task {show_id(t.tid)} of session "
                    f"{show_id(t.sid)}"
                )
            self._take_back(t, "cancel")
        left = self.per_session.get(sid)
        if left:
            raise self._broken(f"cancel({show_id(sid)}) kept {left} of its queued tasks")
        self.totals.cancelled += len(dropped)
        if self.observer is not None:
            self.observer.dropped(dropped, self._next_step)
        self.emit(
            {"line": event.line, "op": "cancel", "sid": sid, "dropped": [t.tid for t in dropped]}
        )

    def clear(self, event: Event) -> None:
        try:
            dropped = self.policy.clear()
        except Exception as e:
            raise self._crash("clear", e) from e
        for t in dropped:
            self._take_back(t, "clear")
        if self.queued:
            raise self._broken(f"clear() kept {len(self.queued)} queued tasks")
        self.totals.cancelled += len(dropped)
        if self.observer is not None:
            self.observer.dropped(dropped, self._next_step)
        self.emit({"line": event.line, "op": "clear", "dropped": [t.tid for t in dropped]})

    def get_work(self, step: int, event: Event | None = None) -> int:
        """One get_work call recorded as ``step``; returns the batch size."""
        try:
            batch = self.policy.get_work()
        except Exception as e:
            raise self._crash("get_work", e) from e
        queued = self.queued
        per_session = self.per_session
        tokens = 0
        entries = []
        sessions: dict[Id, Task] = {}
        for t in batch:
            tid = t.tid
            if queued.get(tid) is not t:
                raise self._broken(
                    f"get_work returned task {show_id(tid)}, which is not queued "
                    "(returned twice, or never accepted)"
                )
            del queued[tid]
            sid = t.sid
            left = per_session[sid] - 1
            if left:
                per_session[sid] = left
            else:
                del per_session[sid]
            prev = sessions.get(sid)
            if prev is not None:
                self._check_same_session(prev, t)
            sessions[sid] = t
            tokens += t.size
            entries.append(  # task_entry(t), inlined: this loop is the hot path
                {"tid": tid, "sid": sid, "kind": t.kind, "size": t.size}
                if t.meta is None
                else {"tid": tid, "sid": sid, "kind": t.kind, "size": t.size, "meta": t.meta}
            )
        totals = self.totals
        budget = totals.budget
        if budget is not None and tokens > budget:
            raise self._broken(f"a batch of {tokens} tokens exceeds its budget of {budget}")
        totals.steps += 1
        totals.dispatched += len(batch)
        totals.tokens += tokens
        if tokens > totals.peak_tokens:
            totals.peak_tokens = tokens
        self._next_step = step + 1
        if self.observer is not None:
            self.observer.dispatched(batch, step)
        if (
            self.check
            and event is not None
            and event.expect is not None
            and not _same_ids([t.tid for t in batch], event.expect)
        ):
            raise ExpectMismatch(Mismatch(step, event.line, event.expect, batch, dict(queued)))
        self.emit({"step": step, "batch": entries, "tokens": tokens, "queued": len(queued)})
        if self.on_step is not None:
            self.on_step(step)
        return len(batch)

    def _check_same_session(self, prev: Task, t: Task) -> None:
        if prev.kind is DECODE or t.kind is DECODE:
            raise self._broken(
                f"session {show_id(t.sid)} has a decode beside another of its tasks in one batch"
            )
        if prev.produce_output and t.produce_output:
            message = f"one batch owes session {show_id(t.sid)} two outputs"
            if self._two_outputs_fatal:
                raise self._broken(message)
            self.warn(
                f"warning: step {self._next_step} ({self._where()}): {message} "
                f"(policy {self.policy_name!r} keeps the reference's behaviour)"
            )

    # --- the loop -----------------------------------------------------------------------

    def _drain_from(self, step: int, until: int | None = None) -> int:
        """Call get_work while work is queued (and step < until); returns the next step."""
        empty_run = 0
        while (until is None or step < until) and self._has_work():
            if self.get_work(step):
                empty_run = 0
            else:
                empty_run += 1
                if empty_run >= STUCK_AFTER:
                    raise self._broken(
                        f"{STUCK_AFTER} empty batches in a row while {len(self.queued)} "
                        "tasks are queued: the replay would never finish"
                    )
            step += 1
        return step

    def run(self, events: Iterable[Event], *, explicit: bool) -> Totals:
        """Replay every event, then finish (drain as the mode says, and account)."""
        self.start(explicit=explicit)
        if explicit:
            # The hot loop of explicit traces, inlined from feed().
            submit, get_work = self.submit, self.get_work
            for event in events:
                op = event.op
                self._line = event.line
                if op == "submit":
                    submit(event)
                elif op == "get_work":
                    get_work(self._step, event)
                    self._step += 1
                else:
                    self._apply(event)
        else:
            feed = self.feed
            for event in events:
                feed(event)
        return self.close()

    def start(self, *, explicit: bool) -> None:
        self._explicit = explicit
        self.totals.mode = EXPLICIT if explicit else PLAIN
        self._step = 0
        self._current: int | None = None

    def feed(self, event: Event) -> None:
        """Apply one event, calling get_work where the step mode says."""
        self._line = event.line
        if self._explicit:
            if event.op == "get_work":
                self.get_work(self._step, event)
                self._step += 1
            else:
                self._apply(event)
            return
        # Stepped and plain: an event without a step belongs to the step of the event
        # before it (0 at the start); a trace with no steps is one step 0, then a drain.
        step = event.step
        current = self._current
        if step is not None:
            self.totals.mode = STEPPED
        else:
            step = current if current is not None else 0
        if current is None:
            self._current = self._next_step = step
        elif step > current:
            if self._has_work():
                self.get_work(current)
            self._drain_from(current + 1, until=step)
            self._current = self._next_step = step
            self._line = event.line
        self._apply(event)

    def close(self) -> Totals:
        """After the last event: drain (stepped and plain, or --drain) and account."""
        self._line = 0
        if self._explicit:
            if self.drain:
                self._drain_from(self._step)
        else:
            current = self._current if self._current is not None else 0
            if self._has_work():
                self.get_work(current)
            self._drain_from(current + 1)
        self.finish()
        return self.totals

    def _apply(self, event: Event) -> None:
        op = event.op
        if op == "submit":
            self.submit(event)
        elif op == "cancel":
            self.cancel(event)
        elif op == "clear":
            self.clear(event)
        else:
            raise AssertionError(op)

    def finish(self) -> None:
        """The accounting check: every accepted task dispatched, cancelled or queued."""
        totals = self.totals
        self._has_work()
        totals.queued = len(self.queued)
        totals.still_queued = list(self.queued)
        if totals.accepted != totals.dispatched + totals.cancelled + totals.queued:
            raise self._broken(
                f"accepted {totals.accepted} != dispatched {totals.dispatched} + cancelled "
                f"{totals.cancelled} + queued {totals.queued}"
            )
        self.emit(totals.end_record())


def _stderr_warning(message: str) -> None:
    print(message, file=sys.stderr)


def _same_ids(got: list[Id], expected: list[Id]) -> bool:
    return len(got) == len(expected) and all(map(same_id, got, expected))
