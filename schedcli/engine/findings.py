"""Findings: the anomalies operators hunt for, each flagged at the step that shows it
(docs/findings.md defines every kind, its parameters and what it does not claim).

They are read from a replay's facts only, so they hold at either level and under any policy
(ours, ``cxx:``, vLLM). One adapter (``replay_steps``) turns the engine's callbacks
(its observer, its records, its reasons) into one ``StepFacts`` a step; the detectors
(``Detectors``) read nothing else, so the adapter alone changes when the driver does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from ..formats.dump import slice_position
from ..model.errors import Option, UsageError
from ..model.records import Left, discard
from ..model.steps import Emitted, Step
from ..model.task import Id, Task, id_key
from .levels import OpenReplay
from .replay import Emit, Observer
from .run import open_replay

PRIORITY_INVERSION: Final = "priority_inversion"
STARVATION: Final = "starvation"
HOL_BLOCKING: Final = "hol_blocking"
PREEMPTION_THRASH: Final = "preemption_thrash"
SKIPPED_RUNNING: Final = "skipped_running"
DECODE_GAP: Final = "decode_gap"
KINDS: Final = (
    PRIORITY_INVERSION,
    STARVATION,
    HOL_BLOCKING,
    PREEMPTION_THRASH,
    SKIPPED_RUNNING,
    DECODE_GAP,
)

# A policy's reason codes (docs/policies.md) that say a task or request was left for want
# of room (tokens, KV blocks), and those that say it was left only for its place in order.
RESOURCE_CODES: Final = frozenset({"no_room", "token_budget", "kv_blocks", "long_prefill"})
ORDER_CODES: Final = frozenset({"head_of_line", "queue"})


class Thresholds(NamedTuple):
    """The bounds that make an observation a finding (each an option of ``findings``)."""

    starve_after: int = 16  # steps left out while newer work ran
    hol_unused: float = 25.0  # percent of the budget left unused
    thrash_after: int = 3  # preemptions of one request
    gap_after: int = 8  # steps between two tokens of one session or request


DEFAULTS: Final = Thresholds()


class Finding(NamedTuple):
    """One finding: its kind, its step, who waited (queued and left out at ``step``), who
    ran (in ``step``'s batch), and the numbers that make it one."""

    kind: str
    step: int
    waiting: tuple[Id, ...]
    ran: tuple[Id, ...]
    numbers: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "waiting": list(self.waiting),
            "ran": list(self.ran),
            **self.numbers,
        }


class Item:
    """A queued task, or a held request, as the adapter follows it."""

    __slots__ = (
        "arrived",
        "computed",
        "flags",
        "known",
        "need",
        "order",
        "passes",
        "preemptions",
        "priority",
        "running",
        "sid",
        "since",
        "who",
    )

    def __init__(self, task: Task, step: int, order: int, need: int) -> None:
        self.who: Id = task.tid
        self.sid: Id = task.sid
        self.priority = task.priority
        self.arrived = step  # the step it was first queued for
        # The step its present wait began: its first step left out as first of its session
        # (a request's again when preempted).
        self.since = step
        self.order = order  # arrival order: a larger one is newer work
        self.need = need  # the least a step can run of it: a task whole, a request one token
        self.known = task.size  # a request's tokens known (prompt, then outputs)
        self.computed = 0  # a request's tokens computed since it last started
        self.running = False  # a request that ran and was not preempted since
        self.passes = 0  # steps left out in its present wait
        self.preemptions: list[int] = []  # tokens computed at each preemption
        # The open finding of each kind about it, and the last step it held at.
        self.flags: dict[str, tuple[Finding, int]] = {}


class StepFacts(NamedTuple):
    """One step as the detectors read it."""

    step: int
    budget: int | None
    tokens: int
    queue: list[Item]  # waiting or running when the step began, in arrival order
    ran: list[tuple[Item, int]]  # its batch: each item with the tokens it ran, in order
    left: dict[int, str] | None  # id(item) -> the policy's reason code; None: none given
    preempted: list[Item]
    sampled: list[Item]  # items a token came out of at this step


# A step being built: its queue, what ran, what it preempted, sampled and finished.
_Building = tuple[list[Item], list[tuple[Item, int]], list[Item], list[Item], list[Any]]


class StepHooks(NamedTuple):
    """What a replayer is given to hand its steps to the adapter (``step_hooks``)."""

    emit: Emit
    observer: Observer
    on_left: Callable[[int, Left], None]
    on_accepted: Callable[[list[Task], int], None]


def replay_steps(opened: OpenReplay, on_step: Callable[[StepFacts], None]) -> None:
    """The adapter: ``opened`` replayed, each step handed to ``on_step`` as facts."""
    hooks = step_hooks(opened, on_step)
    opened.replayer(
        hooks.emit,
        observer=hooks.observer,
        on_left=hooks.on_left,
        on_accepted=hooks.on_accepted,
    ).replay()


def step_hooks(
    opened: OpenReplay,
    on_step: Callable[[StepFacts], None],
    *,
    also: Observer | None = None,
    emit_also: Emit | None = None,
) -> StepHooks:
    """The adapter's hooks for a replayer of ``opened``, each step handed to ``on_step``
    as facts. ``also`` hears what the observer hears and ``emit_also`` every record, so a
    command that replays for its own ends (stats, report) finds in the same replay.

    A level whose steps preempt (requests) holds its items until they finish or are
    aborted, reading each step's record (its slices, preemptions and finishes); the task
    level's items are its queued tasks, gone once dispatched or dropped."""
    held = opened.level.preempts
    budget = opened.token_budget
    queued: dict[Any, Item] = {}  # by id(task), or by a request's id_key
    counter = [0]
    current: list[Any] = [None]  # the step being built: (queue, ran, preempted, sampled, done)

    def key_of(task: Task) -> Any:
        return id_key(task.sid) if held else id(task)

    def accepted(tasks: list[Task], step: int) -> None:
        for t in tasks:
            counter[0] += 1
            queued[key_of(t)] = Item(t, step, counter[0], 1 if held else t.size)

    def begin() -> _Building:
        state: _Building = (list(queued.values()), [], [], [], [])
        current[0] = state
        return state

    def dispatched(batch: list[Task], step: int) -> None:
        if held:
            return  # the step's record says more: its slices' positions
        _, ran, _, sampled, _ = begin()
        for t in batch:
            item = queued.pop(id(t), None)
            if item is None:
                continue
            ran.append((item, t.size))
            output = t.produce_output
            if output or (output is None and t.is_decode):
                sampled.append(item)

    def emit(record: Emitted) -> None:
        if isinstance(record, Step):
            _, ran, preempted, sampled, done = begin()
            for entry in record.batch:
                item = queued.get(id_key(entry["sid"]))
                if item is None:
                    continue
                size = entry["size"]
                position = slice_position(entry)
                ran.append((item, size))
                item.computed = max(item.computed, position + size)
                if position + size >= item.known:
                    sampled.append(item)
            for rid in record.preempted or ():
                item = queued.get(id_key(rid))
                if item is not None:
                    preempted.append(item)
            done.extend(record.finished or ())
        elif record.get("op") == "abort":
            queued.pop(id_key(record["rid"]), None)
        elif record.get("op") == "update":
            for rid in record["finished"]:
                queued.pop(id_key(rid), None)

    def dropped(tasks: list[Task], step: int) -> None:
        for t in tasks:
            queued.pop(key_of(t), None)

    def left(step: int, reasons: Left) -> None:
        state = current[0]
        if state is None:
            return
        current[0] = None
        queue, ran, preempted, sampled, done = state
        codes: dict[int, str] | None = None
        if reasons is not None:
            codes = {}
            for t, code, _ in reasons:
                item = queued.get(key_of(t))
                if item is not None:
                    codes[id(item)] = code
        tokens = sum(n for _, n in ran)
        on_step(StepFacts(step, budget, tokens, queue, ran, codes, preempted, sampled))
        # After the detectors: a request that ran runs on, one preempted waits again
        # (from scratch), one finished is gone; a sampled request knows one more token.
        for item in sampled:
            item.known += 1
        for item, _ in ran:
            item.running = True
        for item in preempted:
            item.preemptions.append(item.computed)
            item.running = False
            item.computed = 0
            item.since = step + 1
            item.passes = 0
        for rid in done:
            queued.pop(id_key(rid), None)

    def emitted(record: Emitted) -> None:
        emit(record)
        emit_also(record)  # type: ignore[misc]

    # A task level's records are not read: none are built unless another reads them.
    chosen = emitted if held and emit_also is not None else emit if held else emit_also
    return StepHooks(chosen or discard, _Observer(dispatched, dropped, also), left, accepted)


class _Observer:
    def __init__(
        self,
        dispatched: Callable[[list[Task], int], None],
        dropped: Callable[[list[Task], int], None],
        also: Observer | None,
    ) -> None:
        self._dispatched, self._dropped, self.also = dispatched, dropped, also

    # The other observer hears first: it is told as it would be alone.
    def accepted(self, tasks: list[Task], step: int) -> None:
        if self.also is not None:  # the adapter is told through on_accepted, at both levels
            self.also.accepted(tasks, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        if self.also is not None:
            self.also.dispatched(batch, step)
        self._dispatched(batch, step)

    def dropped(self, tasks: list[Task], step: int) -> None:
        if self.also is not None:
            self.also.dropped(tasks, step)
        self._dropped(tasks, step)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        if self.also is not None:
            self.also.rejected(tasks, step, reason)


class Detectors:
    """Every kind's rule, over the steps in order (``step``), then ``finish``."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds
        self.found: list[Finding] = []
        self.last_token: dict[tuple[type, Id], int] = {}
        # A session's (or request's) longest gap: (gap, from step, step, who)
        self.gaps: dict[tuple[type, Id], tuple[int, int, int, Id]] = {}

    def step(self, facts: StepFacts) -> None:
        ran_ids = {id(item) for item, _ in facts.ran}
        waiting = [i for i in facts.queue if id(i) not in ran_ids and not i.running]
        firsts = _firsts(facts.queue)
        self._inversions(facts, waiting, firsts)
        self._starvation(facts, waiting, firsts)
        self._hol(facts, waiting, firsts)
        self._thrash(facts)
        self._skipped(facts, ran_ids)
        self._gaps(facts)

    def finish(self) -> list[Finding]:
        for gap, start, step, who in self.gaps.values():
            if gap > self.t.gap_after:
                numbers = {"gap": gap, "from_step": start, "bound": self.t.gap_after}
                self.found.append(Finding(DECODE_GAP, step, (), (who,), numbers))
        order = {kind: n for n, kind in enumerate(KINDS)}
        return sorted(self.found, key=lambda f: (f.step, order[f.kind]))

    def _run(self, item: Item, kind: str, step: int, finding: Finding | None) -> None:
        """A finding about ``item`` that holds over steps in a row: the one open since the
        step before counts one step more; else ``finding`` (if any) opens."""
        before = item.flags.get(kind)
        if before is not None and before[1] == step - 1 and finding is not None:
            before[0].numbers["steps"] += 1
            item.flags[kind] = (before[0], step)
            return
        item.flags.pop(kind, None)
        if finding is not None:
            finding.numbers["steps"] = 1
            item.flags[kind] = (finding, step)
            self.found.append(finding)

    def _inversions(self, facts: StepFacts, waiting: list[Item], firsts: set[int]) -> None:
        if not facts.ran:
            return
        room = None if facts.budget is None else facts.budget - facts.tokens
        ran_sids = {id_key(item.sid) for item, _ in facts.ran}
        for w in waiting:
            if id(w) not in firsts or id_key(w.sid) in ran_sids:
                continue  # its session's order or output rule kept it out, not priorities
            best: tuple[Item, int] | None = None
            for r, n in facts.ran:
                if r.priority <= w.priority or (room is not None and w.need > room + n):
                    continue
                if best is None or r.priority > best[0].priority:
                    best = (r, n)
            if best is None:
                continue
            open_ = w.flags.get(PRIORITY_INVERSION)
            if open_ is not None:  # one finding a wait: its steps counted
                open_[0].numbers["steps"] += 1
                continue
            r, n = best
            numbers: dict[str, Any] = {
                "waiting_priority": w.priority,
                "ran_priority": r.priority,
                "need": w.need,
                "room": None if room is None else room + n,
            }
            finding = Finding(PRIORITY_INVERSION, facts.step, (w.who,), (r.who,), numbers)
            numbers["steps"] = 1
            w.flags[PRIORITY_INVERSION] = (finding, facts.step)
            self.found.append(finding)

    def _starvation(self, facts: StepFacts, waiting: list[Item], firsts: set[int]) -> None:
        orders = sorted(item.order for item, _ in facts.ran)
        for w in waiting:
            if id(w) not in firsts:
                continue  # behind its own session's work: its wait is its session's
            if w.passes == 0:
                w.since = facts.step  # its own wait begins: first of its session, left out
            w.passes += 1  # every step from since on, so waited == step - since + 1
            if w.passes <= self.t.starve_after or STARVATION in w.flags:
                continue
            if not orders or orders[-1] <= w.order:
                continue
            newer = tuple(r.who for r, _ in facts.ran if r.order > w.order)
            numbers = {"waited": w.passes, "since": w.since, "bound": self.t.starve_after}
            finding = Finding(STARVATION, facts.step, (w.who,), newer, numbers)
            w.flags[STARVATION] = (finding, facts.step)
            self.found.append(finding)
        for item, _ in facts.ran:  # its wait is over (a request's next starts if preempted)
            item.passes = 0
            item.flags.pop(STARVATION, None)
            item.flags.pop(PRIORITY_INVERSION, None)

    def _hol(self, facts: StepFacts, waiting: list[Item], firsts: set[int]) -> None:
        budget = facts.budget
        if budget is None or budget <= 0 or not waiting:
            return
        unused = budget - facts.tokens
        if unused * 100 < self.t.hol_unused * budget:
            return
        codes = facts.left
        # The head is the oldest waiting item first of its session: one behind its own
        # session's work waits for that work, whatever the policy says of it.
        candidates = [w for w in waiting if id(w) in firsts]
        if not candidates:
            return
        head = candidates[0]
        head_code = None if codes is None else codes.get(id(head))
        # It did not fit the budget: the policy's reason says so (a cap such as seq_cap or
        # decode_cap, or any other reason, is not a misfit); with no reason, its need does.
        if not (head_code in RESOURCE_CODES if head_code is not None else head.need > unused):
            return
        # Blocked: would have fit, and left for its place behind the head (an order reason,
        # or none given), not for a cap, its session or a rule of its own.
        blocked = [
            w
            for w in candidates[1:]
            if w.need <= unused
            and (codes is None or codes.get(id(w)) in ORDER_CODES or id(w) not in codes)
        ]
        if not blocked:
            return
        numbers = {
            "budget": budget,
            "used": facts.tokens,
            "unused_pct": round(unused * 100 / budget, 2),
            "head_need": head.need,
            "head_reason": head_code,
        }
        waiting_ids = (head.who, *(w.who for w in blocked))
        ran = tuple(item.who for item, _ in facts.ran)
        found = Finding(HOL_BLOCKING, facts.step, waiting_ids, ran, numbers)
        self._run(head, HOL_BLOCKING, facts.step, found)

    def _thrash(self, facts: StepFacts) -> None:
        for item in facts.preempted:
            count = len(item.preemptions) + 1  # this step's is added after the detectors
            open_ = item.flags.get(PREEMPTION_THRASH)
            computed = [*item.preemptions, item.computed]
            if open_ is not None:
                open_[0].numbers.update(preemptions=count, computed=computed)
            elif count >= self.t.thrash_after:
                numbers = {"preemptions": count, "computed": computed, "bound": self.t.thrash_after}
                finding = Finding(PREEMPTION_THRASH, facts.step, (item.who,), (), numbers)
                item.flags[PREEMPTION_THRASH] = (finding, facts.step)
                self.found.append(finding)

    def _skipped(self, facts: StepFacts, ran_ids: set[int]) -> None:
        room = facts.budget is None or facts.tokens < facts.budget
        short = bool(facts.preempted) or (
            facts.left is not None and "kv_blocks" in facts.left.values()
        )
        preempted = {id(item) for item in facts.preempted}
        for item in facts.queue:
            if not item.running:
                continue
            skipped = (
                room
                and not short
                and id(item) not in ran_ids
                and id(item) not in preempted
                and item.computed < item.known
            )
            found = None
            if skipped:
                numbers = {"budget": facts.budget, "used": facts.tokens}
                ran = tuple(r.who for r, _ in facts.ran)
                found = Finding(SKIPPED_RUNNING, facts.step, (item.who,), ran, numbers)
            self._run(item, SKIPPED_RUNNING, facts.step, found)

    def _gaps(self, facts: StepFacts) -> None:
        for item in facts.sampled:
            key = id_key(item.sid)
            last = self.last_token.get(key)
            self.last_token[key] = facts.step
            if last is None or last >= facts.step:
                continue  # a first token, or two at one step (a plugin's batch)
            # Counted from the first step the token could have come at: the one after the
            # earlier token, or the later task's own submission step (explain's "submitted
            # at step"), when later: a client's pause is not a gap. Tokens at steps in a
            # row are no gap (0).
            start = max(last + 1, item.arrived)
            gap = facts.step - start
            best = self.gaps.get(key)
            if best is None or gap > best[0]:
                self.gaps[key] = (gap, start, facts.step, item.who)


def _firsts(queue: Iterable[Item]) -> set[int]:
    """The items first of their session in ``queue`` (a session's order keeps the rest)."""
    seen: set[tuple[type, Id]] = set()
    firsts: set[int] = set()
    for item in queue:
        key = id_key(item.sid)
        if key not in seen:
            seen.add(key)
            firsts.add(id(item))
    return firsts


def find(
    path: str,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    thresholds: Thresholds = DEFAULTS,
    *,
    allow_incomplete: bool = False,
) -> tuple[list[Finding], str]:
    """The findings of the trace at ``path`` (either level) replayed under ``policy``, in
    step order; and a title: the trace and the policy it ran under."""
    with open_replay(
        path, policy=policy, params=params or {}, allow_incomplete=allow_incomplete
    ) as opened:
        detectors = Detectors(thresholds)
        replay_steps(opened, detectors.step)
        return detectors.finish(), f"{opened.name} under {opened.policy_name}"


def kinds_of(text: str) -> list[str]:
    """The kinds named in ``text`` (comma-separated); bad usage naming the option for one
    that is not a kind, or for no kind at all (empty, or only commas)."""
    named = [k.strip() for k in text.split(",") if k.strip()]
    if not named:
        raise UsageError(Option("fail_on", ""), ": no kind given; kinds: ", ", ".join(KINDS))
    unknown = [k for k in named if k not in KINDS]
    if unknown:
        said = ", ".join(repr(k) for k in unknown)
        verb = "is not a kind" if len(unknown) == 1 else "are not kinds"
        raise UsageError(
            Option("fail_on", text),
            f": {said} {verb} of finding (kinds: ",
            ", ".join(KINDS),
            ")",
        )
    return named


class CountingFindings:
    """``replay_metrics``' watch: the findings of the replay it measures, counted by kind
    (``stats``: the trace read once)."""

    def __init__(self, thresholds: Thresholds = DEFAULTS) -> None:
        self.detectors = Detectors(thresholds)

    def hooks(self, opened: OpenReplay, also: Observer) -> StepHooks:
        return step_hooks(opened, self.detectors.step, also=also)

    def summary(self) -> dict[str, Any]:
        return {"findings": counts(self.detectors.finish())}


def counts(found: Iterable[Finding]) -> dict[str, int]:
    """How many findings of each kind, every kind named (``stats``)."""
    tally = dict.fromkeys(KINDS, 0)
    for f in found:
        tally[f.kind] += 1
    return tally
