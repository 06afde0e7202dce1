"""Stalls and cycles: a policy that can make no more progress, found as soon as it shows,
and said to be stuck for good only where that is proven.

A policy's state counts only where the policy declares it: its own class defines
``fingerprint()`` (schedcli's built-ins do, each returning exactly what its next answers
depend on; a plugin may). An inherited one does not count (a subclass may keep state its
parent's fingerprint cannot know), and no state is ever walked. The engine samples a
declared fingerprint after each step that did no work (nothing scheduled; at the request
level, also a step that preempted) and forgets what it saw whenever something comes from
outside (a submit, an arrival, a cancel). A deterministic policy whose state repeats with
nothing from outside in between repeats forever: after an empty step, the same state is a
stall; after several, a cycle (Brent's method: one remembered state, found within about
three times the cycle's reach). Those two are the only findings that say "never".

Any other policy is opaque, for the rest of the watch once seen so (no fingerprint of its
own, a fingerprint of None, or one too large to compare at every step): what is reported
is only what was seen, no batch for N steps in a row with work queued (``--stall-steps``).
The cost of a step is bounded whatever the policy holds: an opaque policy is never looked
into, a plugin's fingerprint is compared up to ``PARTS`` parts (``model/state.py``), and
its fingerprints up to ``BUDGET`` parts between two outside events (past either, it is
opaque from then on).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..model.errors import Option, Said, UsageError
from ..model.limits import OPTIONS, BoundError
from ..model.state import NotAValue, TooLarge, plain
from ..model.task import Id, show_id

SHOWN = 8  # stuck tasks or requests named in the message, the rest counted
STALL_STEPS = 1000
"""Steps in a row without progress after which a policy not proven stuck is reported
(``--stall-steps N``, which sets ``$SCHEDCLI_STALL_STEPS`` for the run and the processes
it starts)."""
STALL_STEPS_ENV = "SCHEDCLI_STALL_STEPS"
PARTS = 100_000  # parts of one plugin fingerprint compared at most
BUDGET = 2_000_000  # parts of a plugin's fingerprints compared between outside events


def stall_steps() -> int:
    """N: ``$SCHEDCLI_STALL_STEPS`` if set (``--stall-steps``), else STALL_STEPS."""
    text = os.environ.get(STALL_STEPS_ENV)
    if text is None:
        return STALL_STEPS
    try:
        steps: int = OPTIONS["stall_steps"].parse("stall_steps", text.strip())
    except BoundError as e:
        raise UsageError(f"${STALL_STEPS_ENV}: ", Option("stall_steps"), " ", e.why) from None
    return steps


class FingerprintFailed(UsageError):
    """A policy's own ``fingerprint()`` raised, or returned what cannot be compared: the
    policy's error, said naming ``fingerprint`` (exit 2)."""


class Repeat:
    """The state at ``step`` is the state at ``since``; ``stalled``: the step between did
    nothing, so each step from here does nothing again; ``moved``: simulated time passed
    between the two. (A plain class: a named tuple costs every replay's start-up.)"""

    __slots__ = ("moved", "since", "stalled", "step")

    def __init__(self, step: int, since: int, stalled: bool, moved: bool = False) -> None:
        self.step, self.since, self.stalled, self.moved = step, since, stalled, moved


def declared(policy: object) -> tuple[Callable[[], object] | None, bool, str]:
    """The fingerprint the policy's own class declares, as a call; whether it is one of
    schedcli's own (a plain value by construction, not checked); else None and why."""
    cls = type(policy)
    owner = next((c for c in cls.__mro__ if "fingerprint" in vars(c)), None)
    name = cls.__qualname__
    if owner is cls:
        method = vars(cls)["fingerprint"]
        own = cls.__module__.startswith("schedcli.")
        return (lambda: method(policy)), own, ""
    if owner is None or owner.__module__ == "schedcli.model.scheduler":
        return None, False, f"{name} declares no fingerprint()"
    return (
        None,
        False,
        f"{name} declares no fingerprint() of its own (the one it inherits, "
        f"{owner.__qualname__}'s, cannot know the state {name} adds)",
    )


class Watch:
    """The states of one policy at its quiet steps since the last outside event."""

    def __init__(self, policy: object, forget_on_work: bool = True, name: str = "") -> None:
        """``forget_on_work``: a step that did work forgets what was seen (the task level,
        where a batch is progress and its caller may submit after it). ``name``: the
        policy as messages name it."""
        self._forget = forget_on_work
        self._name = name or f"{type(policy).__module__}:{type(policy).__qualname__}"
        self.bound = stall_steps()
        self._read, self._own, self.why = declared(policy)
        self.opaque = self._read is None  # remembered: an opaque policy is not asked again
        self.empty_run = 0  # empty steps in a row
        self.quiet_run = 0  # quiet steps in a row (empty, or at the request level preempting)
        self.reset()

    def reset(self) -> None:
        """Something came from outside: no state seen so far can repeat."""
        self._seen = False  # _last holds a state
        self._last: object = None
        self._last_step = -2
        self._last_empty = False
        self._last_t = self._mark_t = 0.0
        self._marked = False  # _mark holds a state
        self._mark: object = None
        self._mark_step = -1
        self._power = 1
        self._length = 0
        self._stale = False
        self._spent = 0  # parts of a plugin's fingerprints compared since (BUDGET)

    def busy(self) -> None:
        """A step that did work (its state needs no look: a cycle shows at quiet ones).
        Where work is progress, what was seen is forgotten, at the next quiet step."""
        self.empty_run = self.quiet_run = 0
        self._stale = self._forget

    def quiet(self, step: int, empty: bool, t: float = 0.0) -> Repeat | None:
        """After ``step``, which did nothing (``empty``) or preempted: where its state was
        seen before with nothing from outside since, or None."""
        self.empty_run = self.empty_run + 1 if empty else 0
        self.quiet_run += 1
        if self._stale:
            self.reset()
        if self._read is None:
            return None
        state = self._state(step)
        if state is None:
            return None
        if self._seen and state == self._last:
            adjacent = self._last_empty and empty and self._last_step == step - 1
            return Repeat(step, self._last_step, adjacent, t > self._last_t)
        if self._marked and state == self._mark:
            return Repeat(step, self._mark_step, False, t > self._mark_t)
        self._last, self._last_step, self._last_empty, self._last_t = state, step, empty, t
        self._seen = True
        self._length += 1
        if not self._marked or self._length >= self._power:
            self._mark, self._mark_step, self._mark_t = state, step, t
            self._marked = True
            self._power *= 2
            self._length = 0
        return None

    def _state(self, step: int) -> object | None:
        """The declared state now, comparable; None (and opaque from now on) where the
        policy cannot say or it is too large to compare."""
        assert self._read is not None
        try:
            found = self._read()
        except Exception as e:
            raise FingerprintFailed(
                f"policy {self._name!r} raised in fingerprint() at step {step}: "
                f"{type(e).__name__}: {e}"
            ) from e
        if found is None:
            self._opaque("its fingerprint() is None")
            return None
        if self._own:
            return found  # schedcli's own: plain values, each exactly what it decides from
        try:
            value, parts = plain(found, PARTS)
        except TooLarge:
            self._opaque(f"its fingerprint() has more than {PARTS:,} parts to compare")
            return None
        except NotAValue as e:
            where = f" at {e.where}" if e.where else ""
            raise FingerprintFailed(
                f"policy {self._name!r}: fingerprint() returned {e.what}{where} at step "
                f"{step}; a fingerprint is built of None, bool, int, float, str, bytes, enum "
                "members, and tuples, lists, dicts and sets of them (docs/plugins.md)"
            ) from None
        self._spent += parts
        if self._spent > BUDGET:
            self._opaque(f"its fingerprints kept changing past {BUDGET:,} parts compared")
            return None
        return value

    def _opaque(self, why: str) -> None:
        """Opaque from now on, for ``why``: the policy is not asked again."""
        self._read, self.opaque, self.why = None, True, why

    def given_up(self) -> bool:
        """The run without progress reached the bound (an opaque policy: quiet steps in a
        row; one whose state is compared: empty steps in a row, its state still changing)."""
        return (self.quiet_run if self.opaque else self.empty_run) >= self.bound

    def start_over(self) -> None:
        """The bound was said and time moves on (simulate): count again."""
        self.empty_run = self.quiet_run = 0

    def observed(self) -> str:
        """What was seen, as the report says it (never more than was seen)."""
        if self.opaque and self.quiet_run > self.empty_run:
            return (
                f"no progress for {self.quiet_run} steps with work queued (each scheduled "
                "nothing or preempted)"
            )
        return f"no batch for {max(self.empty_run, self.quiet_run)} steps with work queued"

    def reason(self) -> str:
        """Why the watch could not say more than it saw."""
        if self.opaque:
            return f"schedcli cannot see its state: {self.why}"
        return "its state (fingerprint()) kept changing"


Reasons = Sequence[tuple[Id, str, str]]


def stuck_text(stuck: Sequence[Id], reasons: Reasons, noun: str) -> str:
    """``noun 'a' (code: detail), ...``: what is stuck, and why, each as the policy says."""
    why: dict[Id, str] = {}
    for item, code, detail in reasons:
        why.setdefault(item, f"{code}: {detail}")
    shown = []
    for item in stuck[:SHOWN]:
        text = f"{noun} {show_id(item)}"
        if item in why:
            text += f" ({why[item]})"
        shown.append(text)
    more = len(stuck) - SHOWN
    if more > 0:
        shown.append(f"and {more} more")
    text = ", ".join(shown)
    return f"{text} (the policy gives no reasons)" if stuck and not reasons else text


def repeat_text(found: Repeat, stuck: str, events_left: bool = False) -> str:
    """The finding, for the contract-break message."""
    if found.stalled:
        head = (
            f"stalled since step {found.since}: nothing scheduled, and the policy's state no "
            "longer changes"
        )
        tail = "it will never schedule again"
    else:
        head = (
            f"cycles without progress: the policy's state at step {found.step} is its state "
            f"at step {found.since}"
        )
        tail = "it would repeat those steps forever"
    if events_left:
        tail += " (and time cannot reach what is still to come)"
    else:
        tail = "with nothing left to arrive or cancel, " + tail
    return f"{head}; {tail}. Stuck: {stuck}"


def opaque_said(watch: Watch, stuck: str) -> tuple[Said, ...]:
    """A policy stopped at the bound: what was seen, and why nothing more is said; the
    option that sets the bound is a fact the app words (``model.errors.Option``)."""
    return (
        f"{watch.observed()}, and {watch.reason()}; whether it would ever schedule again "
        "is not known (",
        Option("stall_steps"),
        f" sets how long to wait). Stuck: {stuck}",
    )


def tasks_stuck(policy: Any, queued: Sequence[Id]) -> str:
    """A task-level policy's stuck tasks, each with the reason it gives when asked again."""
    return stuck_text(queued, explained(policy, policy.get_work), "task")


def explained(policy: object, again: Callable[[], object]) -> Reasons:
    """A stalled task-level policy's reasons: asked once more with ``explaining`` on (the
    same empty batch; a stalled policy answers alike), as the policy gives them."""
    explaining = getattr(policy, "explaining", None)
    if explaining is None:
        return []
    try:
        policy.explaining = True  # type: ignore[attr-defined]
        again()
        left = policy.left_behind()  # type: ignore[attr-defined]
    finally:
        policy.explaining = explaining  # type: ignore[attr-defined]
    return [(t.tid, code, detail) for t, code, detail in left or ()]


if TYPE_CHECKING:  # a Protocol class costs a replay's start-up a millisecond to make

    class Idler(Protocol):
        """A simulation's runner, as far as what it does with a policy that idles."""

        policy_name: str
        step: int

        def idle_until(self, when: float, cost: Any, stalled: bool) -> bool: ...
        def stuck(self) -> str: ...
        def broken(self, *message: Said) -> Exception: ...


def idle_or_stop(
    runner: Idler, cost: Any, watch: Watch, found: Repeat | None, next_event: float | None
) -> None:
    """A policy that repeats itself, or is given up on: time passes to the next event if
    one is still to come and can be reached; else the stall is the policy's fault."""
    if next_event is not None:
        if found is None:  # the bound: said, then time moves on
            print(
                f"warning: step {runner.step}: policy {runner.policy_name!r}: "
                f"{watch.observed()}, and {watch.reason()}; the simulation moves on to the "
                f"next arrival or cancel (t={next_event:.6f} s)",
                file=sys.stderr,
            )
            watch.start_over()
        if found is not None and found.moved:
            return  # a cycle whose steps take time: the next event will come
        if runner.idle_until(next_event, cost, found is not None and found.stalled):
            return
    stuck = runner.stuck()
    if found is None:
        raise runner.broken(*opaque_said(watch, stuck))
    raise runner.broken(repeat_text(found, stuck, events_left=next_event is not None))
