"""Stalls and cycles: a policy that can make no more progress, found as soon as it shows.

The engine samples the policy's state (``Policy.fingerprint``) after each step that did
no work (nothing scheduled; at the request level, also a step that preempted) and
forgets what it saw whenever something comes from outside (a submit, an arrival, a
cancel). A deterministic policy whose state repeats with nothing from outside in between
repeats forever: after an empty step, the same state is a stall; after several, a cycle
(Brent's method: one remembered state, found within about three times the cycle's
reach).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..model.task import Id, show_id

SHOWN = 8  # stuck tasks or requests named in the message, the rest counted
# A policy whose state cannot be compared: empty steps in a row before it is given up on.
STUCK_AFTER = 1000


class Repeat:
    """The state at ``step`` is the state at ``since``; ``stalled``: the step between did
    nothing, so each step from here does nothing again; ``moved``: simulated time passed
    between the two. (A plain class: a named tuple costs every replay's start-up.)"""

    __slots__ = ("moved", "since", "stalled", "step")

    def __init__(self, step: int, since: int, stalled: bool, moved: bool = False) -> None:
        self.step, self.since, self.stalled, self.moved = step, since, stalled, moved


class Watch:
    """The states of one policy at its quiet steps since the last outside event."""

    def __init__(self, policy: object, forget_on_work: bool = True) -> None:
        """``forget_on_work``: a step that did work forgets what was seen (the task level,
        where a batch is progress and its caller may submit after it)."""
        self._policy = policy
        self._forget = forget_on_work
        self.opaque = False  # the policy's state cannot be compared
        self.empty_run = 0  # empty steps in a row (what bounds an opaque policy)
        self.reset()

    def reset(self) -> None:
        """Something came from outside: no state seen so far can repeat."""
        self._last: tuple[object, ...] | None = None
        self._last_step = -2
        self._last_empty = False
        self._last_t = self._mark_t = 0.0
        self._mark: tuple[object, ...] | None = None
        self._mark_step = -1
        self._power = 1
        self._length = 0
        self._stale = False

    def busy(self) -> None:
        """A step that did work (its state needs no look: a cycle shows at quiet ones).
        Where work is progress, what was seen is forgotten, at the next quiet step."""
        self.empty_run = 0
        self._stale = self._forget

    def quiet(self, step: int, empty: bool, t: float = 0.0) -> Repeat | None:
        """After ``step``, which did nothing (``empty``) or preempted: where its state was
        seen before with nothing from outside since, or None."""
        self.empty_run = self.empty_run + 1 if empty else 0
        if self._stale:
            self.reset()
        state = fingerprint_of(self._policy)
        if state is None:
            self.opaque = True
            return None
        if state == self._last:
            adjacent = self._last_empty and empty and self._last_step == step - 1
            return Repeat(step, self._last_step, adjacent, t > self._last_t)
        if state == self._mark:
            return Repeat(step, self._mark_step, False, t > self._mark_t)
        self._last, self._last_step, self._last_empty, self._last_t = state, step, empty, t
        self._length += 1
        if self._mark is None or self._length >= self._power:
            self._mark, self._mark_step, self._mark_t = state, step, t
            self._power *= 2
            self._length = 0
        return None

    def given_up(self) -> bool:
        """The run of empty steps reached the bound: the policy's state cannot be compared,
        or keeps changing without it scheduling anything."""
        return self.empty_run >= STUCK_AFTER


def fingerprint_of(policy: Any) -> tuple[object, ...] | None:
    """``policy.fingerprint()``, kept to what the engine compares: a tuple or None."""
    found = policy.fingerprint()
    return found if isinstance(found, tuple) else (None if found is None else (found,))


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


def opaque_text(watch: Watch, stuck: str) -> str:
    """A policy given up on at the bound, and why it took that long."""
    why = (
        "its state cannot be compared (fingerprint() is None)"
        if watch.opaque
        else "its state keeps changing without it scheduling anything"
    )
    return (
        f"{watch.empty_run} empty steps in a row, and {why}: schedcli gave up on it. Stuck: {stuck}"
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
        def broken(self, message: str) -> Exception: ...


def idle_or_stop(
    runner: Idler, cost: Any, watch: Watch, found: Repeat | None, next_event: float | None
) -> None:
    """A policy that repeats itself, or is given up on: time passes to the next event if
    one is still to come and can be reached; else the stall is the policy's fault."""
    if next_event is not None:
        if found is None:  # the bound: said, then time moves on
            why = "cannot be compared" if watch.opaque else "keeps changing"
            print(
                f"warning: step {runner.step}: policy {runner.policy_name!r} did nothing "
                f"for {STUCK_AFTER} steps, and its state {why}; the simulation moves on "
                f"to the next arrival or cancel (t={next_event:.6f} s)",
                file=sys.stderr,
            )
            watch.empty_run = 0
        if found is not None and found.moved:
            return  # a cycle whose steps take time: the next event will come
        if runner.idle_until(next_event, cost, found is not None and found.stalled):
            return
    stuck = runner.stuck()
    if found is None:
        raise runner.broken(opaque_text(watch, stuck))
    raise runner.broken(repeat_text(found, stuck, events_left=next_event is not None))
