"""The engine's own record of accepted tasks, against which every policy answer is checked.

A policy that loses a task, returns one twice, breaks a session rule or overspends its
budget is caught by the call that does it (InvariantError, exit 3).
"""

from __future__ import annotations

from collections.abc import Callable

from ..formats.writer import task_entry
from ..model.errors import InvariantError
from ..model.records import Record, TaskEntry
from ..model.tally import SessionTally
from ..model.task import DECODE, Id, Task, same_id, show_id


class Totals:
    """What a replay did, for the ``end`` record and the summary."""

    def __init__(self, mode: str = "plain", budget: int | None = None) -> None:
        self.mode = mode
        self.budget = budget
        self.steps = 0
        self.accepted = 0
        self.dispatched = 0
        self.cancelled = 0
        self.rejected = 0
        self.rejected_tasks = 0
        self.queued = 0
        self.tokens = 0
        self.peak_tokens = 0
        self.still_queued: list[Id] = []

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


class Ledger:
    """tid -> accepted task not yet returned, in acceptance order.

    ``broken(message)`` builds the error to raise, located where the replay is;
    ``warn(message)`` reports a session-rule break the policy declared it makes.
    """

    def __init__(
        self,
        broken: Callable[[str], InvariantError],
        warn: Callable[[str], None],
        *,
        budget: int | None,
        two_outputs_fatal: bool = True,
    ) -> None:
        self.queued: dict[Id, Task] = {}
        self.budget = budget
        self._broken = broken
        self._warn = warn
        self._two_outputs_fatal = two_outputs_fatal
        # Queued tasks per session, for the cancel check.
        self._per_session = SessionTally()
        # tid -> the chunk of its session submitted just before it in the same group,
        # while both are queued: a chunk may not leave before the one ahead of it.
        self._behind: dict[Id, Task] = {}
        # A trace that begins from a state (``seed``): tid -> the ledger's copy of a task
        # restored from it, until the policy first hands back its own copy (``_claim``).
        self._seeded: dict[Id, Task] = {}
        # tid -> the tid of the chunk behind it in its group, for those seeded.
        self._seeded_behind: dict[Id, Id] = {}
        # Told (the ledger's copy, the policy's) of each such task taken: an observer
        # that keys tasks by identity follows them across.
        self.on_claim: Callable[[Task, Task], None] | None = None

    def __len__(self) -> int:
        return len(self.queued)

    def accept(self, tasks: list[Task]) -> None:
        queued, per_session = self.queued, self._per_session
        for t in tasks:
            if queued.setdefault(t.tid, t) is not t:
                raise self._broken(f"accepted tid {show_id(t.tid)} while it was queued")
            per_session.add(t.sid)
        if len(tasks) > 1:
            self._chain(tasks)

    def seed(self, groups: list[list[Task]]) -> None:
        """The tasks queued in the state a trace begins from, as the groups they were
        submitted in: accepted and queued. The policy restored them from the same state
        as objects of its own, so each is taken, the first time the policy hands it back,
        for the copy here with the same fields (``_claim``)."""
        for group in groups:
            self.accept(group)
            for t in group:
                self._seeded[t.tid] = t
        for behind, ahead in self._behind.items():
            if self._seeded.get(ahead.tid) is ahead:
                self._seeded_behind[ahead.tid] = behind

    def _claim(self, t: Task, held: Task | None) -> bool:
        """Whether ``t``, handed back where ``held`` is the ledger's task of its tid, is the
        policy's copy of a task seeded from a state (the same fields): then it takes the
        copy's place. Called only where identity fails, so a replay without a state pays
        nothing for it."""
        if not self._seeded or held is None or self._seeded.get(t.tid) is not held:
            return False
        if not (
            same_id(t.sid, held.sid)
            and t.kind is held.kind
            and t.size == held.size
            and bool(t.produce_output) == bool(held.produce_output)
            and t.priority == held.priority
        ):
            return False
        tid = t.tid
        del self._seeded[tid]
        if tid in self.queued:
            self.queued[tid] = t
        behind = self._seeded_behind.pop(tid, None)
        if behind is not None and self._behind.get(behind) is held:
            self._behind[behind] = t
        if self.on_claim is not None:
            self.on_claim(held, t)
        return True

    def _chain(self, group: list[Task]) -> None:
        """Remember, for each prefill chunk of a group, the chunk of its session before it."""
        last: dict[Id, Task] = {}
        for t in group:
            if t.kind is DECODE:
                continue
            ahead = last.get(t.sid)
            if ahead is not None:
                self._behind[t.tid] = ahead
            last[t.sid] = t

    def take_back(self, t: Task, call: str) -> None:
        tid = t.tid
        held = self.queued.get(tid)
        if held is not t and not self._claim(t, held):
            raise self._broken(
                f"{call} returned task {show_id(tid)}, which is not queued "
                "(returned twice, or never accepted)"
            )
        del self.queued[tid]
        self._per_session.remove(t.sid)
        if self._behind:
            self._behind.pop(tid, None)

    def cancelled(self, sid: Id, dropped: list[Task]) -> None:
        for t in dropped:
            if t.sid != sid:
                raise self._broken(
                    f"cancel({show_id(sid)}) returned task {show_id(t.tid)} of session "
                    f"{show_id(t.sid)}"
                )
            self.take_back(t, "cancel")
        left = self._per_session.of(sid, self.queued.values())
        if left:
            raise self._broken(f"cancel({show_id(sid)}) kept {left} of its queued tasks")

    def cleared(self, dropped: list[Task]) -> None:
        for t in dropped:
            self.take_back(t, "clear")
        if self.queued:
            raise self._broken(f"clear() kept {len(self.queued)} queued tasks")

    def held_back(self, waiting: dict[Id, Task], batch: list[Task]) -> None:
        """After the trace, ``batch`` hands back tasks still ``waiting`` (the queued ones not
        yet back). Only a task still waiting is progress: one given back again (or never
        accepted) is the contract broken, or the replay would ask for batches forever."""
        for t in batch:
            held = waiting.pop(t.tid, None)
            if held is not t and not self._claim(t, held):
                raise self._broken(
                    f"get_work, asked after the trace for the tasks it holds, returned task "
                    f"{show_id(t.tid)}, which is not queued (returned twice, or never accepted)"
                )

    def dispatched(self, batch: list[Task], listing: bool = True) -> tuple[int, list[TaskEntry]]:
        """Take a batch back; returns its tokens and its dump entries (none unless
        ``listing``). The hot loop."""
        queued, per_session, behind = self.queued, self._per_session, self._behind
        tokens = 0
        entries: list[TaskEntry] = []
        # get and del, not pop: compiled, dict.pop is a call by name, several times dearer.
        for t in batch:
            tid = t.tid
            held = queued.get(tid)
            if held is not t and not self._claim(t, held):
                raise self._broken(
                    f"get_work returned task {show_id(tid)}, which is not queued "
                    "(returned twice, or never accepted)"
                )
            if behind:
                ahead = behind.get(tid)
                if ahead is not None:
                    if queued.get(ahead.tid) is ahead:
                        raise self._broken(
                            f"get_work dispatched chunk {show_id(tid)} of session "
                            f"{show_id(t.sid)} before chunk {show_id(ahead.tid)}, submitted "
                            "ahead of it in its group"
                        )
                    del behind[tid]
            del queued[tid]
            per_session.remove(t.sid)
            tokens += t.size
            if listing:
                entries.append(task_entry(t))
        if len(batch) > 1 and len({t.sid for t in batch}) < len(batch):
            self._check_sessions(batch)
        if self.budget is not None and tokens > self.budget:
            raise self._broken(f"a batch of {tokens} tokens exceeds its budget of {self.budget}")
        return tokens, entries

    def account(self, totals: Totals) -> None:
        """Nothing lost: every accepted task was dispatched, cancelled, or is still queued.

        Fills in ``totals.queued`` and ``totals.still_queued`` (the ids, in acceptance order).
        """
        totals.queued = len(self.queued)
        totals.still_queued = list(self.queued)
        if totals.accepted != totals.dispatched + totals.cancelled + totals.queued:
            raise self._broken(
                f"accepted {totals.accepted} != dispatched {totals.dispatched} + cancelled "
                f"{totals.cancelled} + queued {totals.queued}"
            )

    def _check_sessions(self, batch: list[Task]) -> None:
        """A batch holding a session twice: never with its decode, and one output at most
        (counted over the whole batch, not between neighbours)."""
        seen: dict[Id, int] = {}  # sid -> tasks of it so far
        outputs: dict[Id, int] = {}
        for t in batch:
            sid = t.sid
            count = seen.get(sid, 0) + 1
            seen[sid] = count
            if t.produce_output:
                outputs[sid] = outputs.get(sid, 0) + 1
        for t in batch:
            if t.kind is DECODE and seen[t.sid] > 1:
                raise self._broken(
                    f"session {show_id(t.sid)} has a decode beside another of its tasks "
                    "in one batch"
                )
        for sid, n in outputs.items():
            if n > 1:
                message = f"one batch owes session {show_id(sid)} {_count(n)} outputs"
                if self._two_outputs_fatal:
                    raise self._broken(message)
                self._warn(message)


def _count(n: int) -> str:
    return "two" if n == 2 else str(n)
