"""The request level's stepper: how the replay driver (``engine/replay.py``) applies a
request-level trace's arrivals, aborts and steps to a RequestScheduler.

Every step event is one ``step()`` of the policy (a literal call log); a trace without
step events is drained at its end. Each step becomes a batch record shaped as a task-level
one (one entry per scheduled request, ``tid`` = ``rid@position``), so views, goldens and
``diff`` read both levels alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....formats.requests import RequestEvent, arrival, expect_of
from ....formats.requests.schema import Abort, Arrive, Schedule, Step, Update
from ....model.errors import InvariantError, Said, StepMismatch
from ....model.records import Left, Record, TaskEntry
from ....model.requests import RequestScheduler, StepPlan
from ....model.steps import Emitted
from ....model.steps import Step as StepRecord
from ....model.task import DECODE, PREFILL, Id
from ...ledger import Totals
from ...replay import Observer, PolicyCrashed, ReplayDriver
from ...stall import Watch, stuck_text

if TYPE_CHECKING:
    from ...requests.preemption import PreemptionTally


@dataclass
class RequestMismatch:
    """The first step whose plan differs from the trace's ``expect``."""

    step: int
    line: int
    expected: dict[str, Any]
    got: dict[str, Any]
    reasons: list[tuple[Id, str, str]]
    held: list[Id]  # the requests held when the step began, in arrival order


class RequestExpectMismatch(StepMismatch):
    level = "request"
    mismatch: RequestMismatch

    def __init__(self, mismatch: RequestMismatch, trace: str) -> None:
        self.mismatch = mismatch
        super().__init__(
            f"{trace}:{mismatch.line}: step {mismatch.step} differs from the recorded step"
        )


def batch_record(step: int, plan: StepPlan, running: int, waiting: int) -> StepRecord:
    entries: list[TaskEntry] = [
        {
            "tid": f"{s.rid}@{s.position}",
            "sid": s.rid,
            "kind": PREFILL if s.prefill else DECODE,
            "size": s.tokens,
        }
        for s in plan.batch
    ]
    return StepRecord(step, entries, plan.tokens, waiting, running, plan.preempted, plan.finished)


class RequestReplayer(ReplayDriver):
    """The request level's stepper: each event to ``policy`` (``feed``), each step's plan
    emitted as a batch record."""

    expect_call = "step"
    check_unit = "recorded calls"

    def __init__(
        self,
        policy: RequestScheduler,
        emit: Callable[[Emitted], None],
        *,
        policy_name: str,
        check: bool = False,
        drain: bool = False,
        on_left: Callable[[int, Left], None] | None = None,
        trace_name: str = "<trace>",
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        on_arrived: Callable[[Arrive, int, int], None] | None = None,
        measure_preemption: bool = False,
        inputs: Callable[[], Iterable[tuple[int, RequestEvent]]] = tuple,
        before_close: Callable[[], None] | None = None,
    ) -> None:
        """``inputs``: the events of the trace it replays (``replay``, ``lockstep``), read
        when called; ``before_close`` runs after the last of them (and may refuse)."""
        super().__init__(
            policy_name,
            emit,
            Totals(mode="request", budget=policy.token_budget),
            check=check,
            drain=drain,
            on_step=on_step,
            observer=observer,
            on_left=on_left,
            inputs=lambda: ((line, (event,)) for line, event in inputs()),
            before_close=before_close,
        )
        self.policy = policy
        # Told (event, line, step) of each arrival the policy accepted, never of a rejected
        # one: a rejected re-arrival of a held id must not touch that request's arrival.
        self.on_arrived = on_arrived
        self.trace_name = trace_name
        self.step_events = 0
        self.update_events = 0  # split steps' updates: each compared on its own
        self.finished = 0
        self.aborted = 0
        self.preemptions = 0
        self.current_line = 0
        # The debugger's side: told as each step begins (its number), and of a step that
        # differs from its expect (its number, the expect), which then is not fatal.
        self.step_starts: Callable[[int], None] | None = None
        self.diverged: Callable[[int, dict[str, Any]], None] | None = None
        self.waiting = 0  # requests waiting after the last step
        self._live: dict[tuple[type, Id], Id] = {}  # under check: requests held, in order
        self._unanswered = 0  # split steps scheduled and not yet updated
        self.last_reasons: list[tuple[Id, str, str]] = []
        # What preemption costs (stats, report): each step's plan, each request's end.
        self.preemption: PreemptionTally | None = None
        if measure_preemption:
            from ...requests.preemption import PreemptionTally

            self.preemption = PreemptionTally()

    # The engine's protocol with outputs (the golden comparison asks for these).
    @property
    def upcoming_step(self) -> int:
        return self.totals.steps

    def apply(self, item: RequestEvent, line: int) -> None:
        self.current_line = line
        self.feed(line, item)

    def closing(self) -> Iterator[int]:
        """Drained after the last event (a trace without steps, or ``drain``): the outputs
        of split steps still unanswered first, then steps while the policy has work."""
        if self.drain or self.step_events == 0:
            self._answer_all()
            yield from self.draining(self.totals.steps)

    def feed(self, line: int, event: RequestEvent) -> None:
        kind = type(event)
        if kind is Arrive:
            self._arrive(line, event)  # type: ignore[arg-type]
        elif kind is Abort:
            self._abort(line, event.rid)  # type: ignore[union-attr]
        elif kind is Update:
            self._update(line, event)  # type: ignore[arg-type]
        else:
            self.step_events += 1
            if kind is Schedule:
                plan = self._step(frozenset(), None, split=True)
                self._unanswered += 1
            else:
                stop = frozenset(event.stop or ())  # type: ignore[union-attr]
                given = event.sampled  # type: ignore[union-attr]
                plan = self._step(stop, {p.rid: p.tokens for p in given} if given else None)
            expect: Any = event.expect  # type: ignore[union-attr]
            if self.check and expect is not None:
                got = expect_of(plan)
                want = {
                    "batch": [[s.rid, s.tokens] for s in expect.batch],
                    "preempted": list(expect.preempted),
                }
                if kind is Step:
                    want["finished"] = list(expect.finished)
                else:
                    del got["finished"]
                self._compare(line, got, want)
            self._ended(plan.finished)

    def _update(self, line: int, event: Update) -> None:
        """A split step's outputs: the requests they finished, recorded when any did."""
        stop = frozenset(event.stop or ())
        sampled = {p.rid: p.tokens for p in event.sampled} if event.sampled else None
        self.update_events += 1
        self._unanswered -= 1  # the reader refuses an update with no schedule to answer
        try:
            finished = self.policy.update(stop, sampled)
        except InvariantError:
            raise  # the policy broke the contract (its worker vanished): said as it is
        except Exception as e:
            raise self._crashed("update", e) from e
        self.finished += len(finished)
        if self.preemption is not None:
            self.preemption.ended(finished)
        if finished:
            self.emit({"line": line, "op": "update", "finished": finished})
        if self.check and event.expect is not None:
            self._compare(line, {"finished": finished}, {"finished": list(event.expect.finished)})
        self._ended(finished)

    def _ended(self, finished: list[Id]) -> None:
        """After a step is compared: the requests it finished are no longer held."""
        if self.check:
            for rid in finished:
                self._live.pop((type(rid), rid), None)

    def _arrive(self, line: int, event: Arrive) -> None:
        try:
            reason = self.policy.add(arrival(event))
        except InvariantError:
            raise
        except Exception as e:
            raise self._crashed("add", e) from e
        if reason is None:
            self.totals.accepted += 1
            if self.check:
                self._live[(type(event.rid), event.rid)] = event.rid
            if self.on_arrived is not None:
                self.on_arrived(event, line, self.totals.steps)
        else:
            self.totals.rejected += 1
            self.emit(
                {
                    "line": line,
                    "op": "arrive",
                    "accepted": False,
                    "rid": event.rid,
                    "reason": reason,
                }
            )

    def _abort(self, line: int, rid: Id) -> None:
        try:
            was = self.policy.abort(rid)
        except InvariantError:
            raise
        except Exception as e:
            raise self._crashed("abort", e) from e
        if was is not None:
            self.aborted += 1
            self._live.pop((type(rid), rid), None)
            if self.preemption is not None:
                self.preemption.ended([rid])
        self.emit({"line": line, "op": "abort", "rid": rid, "was": was})

    def _step(
        self, stop: frozenset[Id], sampled: dict[Id, int] | None = None, split: bool = False
    ) -> StepPlan:
        if self.step_starts is not None:
            self.step_starts(self.totals.steps)
        try:
            plan = self.policy.schedule() if split else self.policy.step(stop, sampled)
            running, waiting = self.policy.counts()
        except InvariantError:
            raise
        except Exception as e:
            raise self._crashed("step", e) from e
        totals = self.totals
        step = totals.steps
        totals.steps += 1
        tokens = plan.tokens
        totals.tokens += tokens
        totals.peak_tokens = max(totals.peak_tokens, tokens)
        budget = totals.budget
        if budget is not None and tokens > budget:
            raise self._broken(step, f"scheduled {tokens} tokens over its budget of {budget}")
        self.finished += len(plan.finished)
        self.preemptions += len(plan.preempted)
        self.last_batch_step = step
        self.waiting = waiting
        record = batch_record(step, plan, running, waiting)
        if self.preemption is not None:
            self.preemption.planned(step, plan)
        if self.observer is not None:  # a request's waits are not a task's: dispatches only
            self.observer.dispatched(record.tasks(), step)
        self.emit(record)
        if self.on_step is not None:
            self.on_step(step)
        if self.on_left is not None or self.check:
            self.last_reasons = self.policy.reasons()
            if self.on_left is not None:
                self.on_left(step, self.policy.left_behind())
        return plan

    def _compare(self, line: int, got: dict[str, Any], want: dict[str, Any]) -> None:
        """Raises the mismatch; the requests held when the step began are those still
        held (its finishes are dropped only after it is compared)."""
        self.checked += 1
        if _same(got, want):
            return
        if self.diverged is not None:
            self.diverged(self.totals.steps - 1, want)
            return
        step = self.totals.steps - 1
        held = list(self._live.values())
        mismatch = RequestMismatch(step, line, want, got, self.last_reasons, held)
        raise RequestExpectMismatch(mismatch, self.trace_name)

    @property
    def check_total(self) -> int:
        """The recorded calls ``--check`` could compare: steps, and a split step's updates."""
        return self.step_events + self.update_events

    @property
    def nothing_checked(self) -> bool:
        return self.checked == 0

    expect_call = "step"  # an expect's call, for the app's words (levels.Driver)
    check_unit = "recorded calls"

    def queued_count(self) -> int:
        """Requests waiting after the last step (the batch record's ``queued``)."""
        return self.waiting

    def level_summary(self) -> dict[str, object]:
        """What this level adds to a replay's metrics: its preemptions, and what they cost
        when measured (``measure_preemption``)."""
        if self.preemption is not None:
            return self.preemption.summary()
        return {"preemptions": self.preemptions}

    def left_behind(self) -> Left:
        """The policy's reasons for what its last batch left out."""
        return self.policy.left_behind()

    def checked_text(self) -> str:
        """What ``--check`` compared, in one unit: steps, or for a split trace the calls
        (each ``schedule`` and each ``update`` is compared on its own)."""
        if self.update_events:
            calls = self.step_events + self.update_events
            return f"checked {self.checked} of {calls} calls (schedule and update)"
        return f"checked {self.checked} of {self.step_events} steps"

    def _answer_all(self) -> None:
        """The outputs of split steps still unanswered."""
        while self._unanswered:
            self._unanswered -= 1
            finished = self.policy.update()
            self.finished += len(finished)
            if self.preemption is not None:
                self.preemption.ended(finished)
            if finished:
                self.emit({"line": None, "op": "update", "finished": finished})

    def has_work(self) -> bool:
        return self.policy.has_work()

    def step_once(self, step: int) -> tuple[bool, bool]:
        plan = self._step(frozenset())
        return bool(plan.batch) and not plan.preempted, not plan.batch

    def watch(self) -> Watch:
        return Watch(self.policy, forget_on_work=False, name=self.policy_name)

    def stuck(self) -> str:
        return stuck_text(self.policy.held(), self.policy.reasons(), "request")

    def held_text(self) -> str:
        return f"{len(self.policy.held())} requests"

    def broken(self, message: str, *more: Said) -> InvariantError:
        return self._broken(self.totals.steps, message, *more)

    def account(self) -> Record:
        """Every accepted request finished, aborted or still held: the end record."""
        totals = self.totals
        held = self.policy.held()
        totals.queued = len(held)
        totals.still_queued = held
        totals.dispatched, totals.cancelled = self.finished, self.aborted
        if totals.accepted != self.finished + self.aborted + len(held):
            raise self._broken(
                totals.steps,
                f"{totals.accepted} requests accepted but {self.finished} finished, "
                f"{self.aborted} aborted and {len(held)} still held",
            )
        end: Record = {
            "steps": totals.steps,
            "requests": totals.accepted,
            "finished": self.finished,
            "aborted": self.aborted,
            "rejected": totals.rejected,
            "preemptions": self.preemptions,
            "held": len(held),
            "tokens": totals.tokens,
            "mode": "request",
        }
        if held:
            end["still_queued"] = held
        return {"end": end}

    def _broken(self, step: int, message: str, *more: Said) -> InvariantError:
        return InvariantError(
            f"policy {self.policy_name!r} broke the request-level contract at step {step}: "
            f"{message}",
            *more,
        )

    def _crashed(self, call: str, e: Exception) -> PolicyCrashed:
        return PolicyCrashed(
            f"policy {self.policy_name!r} raised in {call} at step {self.totals.steps}: "
            f"{type(e).__name__}: {e}"
        )


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Ids compare with their type: 1 and "1" are different requests."""

    def typed(value: Any) -> Any:
        if isinstance(value, list):
            return [typed(v) for v in value]
        return (type(value).__name__, value)

    return bool(typed(a) == typed(b))
