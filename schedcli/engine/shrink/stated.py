"""Windows that begin from the policy's state, and the state itself reduced.

A window from step S (``focus.py``) replays only what was queued at S, so a policy whose
choice depends on its whole history (fair's counters, decode-first's rotation) needs a
window far back, or none. Where the policy has snapshots, a *stated* window from S is the
header, the state line at S (docs/trace-format.md, "Traces that begin from a state") and
the lines from S's get_work to the failing one: it replays the failing step exactly,
whatever came before. Then the state itself is reduced: its queued tasks and its other
entries (fair's counters, say) dropped by delta debugging while the failure keeps its
signature, the ledger's counts and the counters' values made as plain as still fails.
A state edit the policy refuses (a session its rotation names with nothing queued) is a
candidate that does not fail the same way: it is simply not kept.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ...model.task import id_key
from ..levels.task.states import Taken, states_at
from .candidates import Candidate, Lines, Ranges

__all__ = [
    "State",
    "encode",
    "ids_named",
    "keeping",
    "plainer",
    "reduce_state",
    "states_at",
    "units_of_state",
    "window_from",
    "with_state",
]

State = dict[str, Any]  # a state line: op, step, state, ledger


# A state's lists that hold the tids of queued tasks, and those that hold sessions with
# something queued (decode-first's rotation and sjf's sessions: with a prefill queued, or
# emptied by a cancel), as the built-ins write them (docs/policies.md, "Snapshots").
_TID_LISTS = ("decodes", "queue")
_PREFILL_SESSIONS = ("rotation", "sessions")
_ANY_SESSIONS = ("backlog",)


def units_of_state(line: State) -> list[tuple[str, Any]]:
    """What a state can lose: each queued task (by tid), and each entry of its other list
    fields that no task names (fair's counters, decode-first's emptied)."""
    state = line["state"]
    units: list[tuple[str, Any]] = [
        ("task", id_key(t["tid"])) for group in state.get("queued", []) for t in group
    ]
    for name, value in state.items():
        if name in ("queued", *_TID_LISTS, *_PREFILL_SESSIONS, *_ANY_SESSIONS):
            continue
        if isinstance(value, list):
            units.extend((name, k) for k in range(len(value)))
    return units


def keeping(line: State, kept: list[tuple[str, Any]]) -> State:
    """``line`` with only the ``kept`` units (``units_of_state``); what names a dropped
    task goes with it, and the ledger accepts as many fewer tasks."""
    chosen = set(kept)
    state = line["state"]
    before = sum(len(g) for g in state.get("queued", []))
    queued = [
        [t for t in group if ("task", id_key(t["tid"])) in chosen]
        for group in state.get("queued", [])
    ]
    queued = [g for g in queued if g]
    tids = {id_key(t["tid"]) for g in queued for t in g}
    any_kind = {id_key(t["sid"]) for g in queued for t in g}
    prefill = {id_key(t["sid"]) for g in queued for t in g if t["kind"] == "prefill"}
    emptied = {id_key(s) for s in state.get("emptied", []) if not isinstance(s, dict | list)}
    out: dict[str, Any] = {}
    for name, value in state.items():
        if name == "queued":
            out[name] = queued
        elif name in _TID_LISTS and isinstance(value, list):
            out[name] = [v for v in value if id_key(_tid(v)) in tids]
        elif name in _PREFILL_SESSIONS and isinstance(value, list):
            out[name] = [v for v in value if _sid_kept(v, prefill | emptied)]
        elif name in _ANY_SESSIONS and isinstance(value, list):
            out[name] = [v for v in value if _sid_kept(v, any_kind)]
        elif isinstance(value, list) and name not in ("version", "policy"):
            out[name] = [v for k, v in enumerate(value) if (name, k) in chosen]
        else:
            out[name] = value
    gone = before - len(tids)
    ledger = dict(line["ledger"])
    ledger["accepted"] -= gone
    return {**line, "state": out, "ledger": ledger}


def _tid(entry: Any) -> Any:
    return entry["tid"] if isinstance(entry, dict) and "tid" in entry else entry


def _sid_kept(entry: Any, sessions: set[Any]) -> bool:
    if isinstance(entry, dict):  # compat=reference's rotation: {"sid", "chunks"}
        return "sid" in entry and id_key(entry["sid"]) in sessions
    if isinstance(entry, list | bool) or entry is None:
        return True
    return id_key(entry) in sessions


def plainer(line: State) -> list[State]:
    """Plainer versions of ``line``, each tried in turn (the first that still fails the
    same way is kept): the ledger with nothing before but what is queued; every counter
    less the least; every counter 0; each counter 0, then whole."""
    out: list[State] = []
    queued = sum(len(g) for g in line["state"].get("queued", []))
    bare = {"accepted": queued, "dispatched": 0, "cancelled": 0, "rejected": 0,
            "rejected_tasks": 0, "tokens": 0}  # fmt: skip
    if line["ledger"] != bare:
        out.append({**line, "ledger": bare})
    counters = line["state"].get("counters")
    if isinstance(counters, list) and counters:
        values = [c[1] for c in counters if isinstance(c, list) and len(c) == 2]
        if len(values) == len(counters) and any(values):
            zeros = [[c[0], 0.0] for c in counters]
            out.append({**line, "state": {**line["state"], "counters": zeros}})
        least = min(values, default=0.0)
        if least and len(values) == len(counters):
            shifted = [[c[0], c[1] - least] for c in counters]
            out.append({**line, "state": {**line["state"], "counters": shifted}})
        for k, c in enumerate(counters):
            if not (isinstance(c, list) and len(c) == 2 and isinstance(c[1], int | float)):
                continue
            for value in (0.0, float(math.floor(c[1]))):
                if value != c[1]:
                    changed = [*counters[:k], [c[0], value], *counters[k + 1 :]]
                    out.append({**line, "state": {**line["state"], "counters": changed}})
    return out


def _session_of(unit: tuple[str, Any], line: State, tasks: dict[Any, Any]) -> Any:
    """The session (its id_key) a unit belongs to, if it names one: a task's, or an entry
    that starts with a session id (fair's ``[session, counter]``) or has ``sid``."""
    kind, key = unit
    if kind == "task":
        return id_key(tasks[key]["sid"])
    entry = line["state"][kind][key]
    if isinstance(entry, dict) and "sid" in entry:
        return id_key(entry["sid"])
    first = entry[0] if isinstance(entry, list) and entry else None
    if isinstance(first, int | str) and not isinstance(first, bool):
        return id_key(first)
    return None


def reduce_state(
    line: State,
    fails: Callable[[State], bool],
    ddmin: Callable[[Any, Callable[[Any], State], int], Any],
    needs: frozenset[Any] = frozenset(),
    named: frozenset[Any] = frozenset(),
) -> State:
    """The state line with as few units as still fail the same way, then made plainer
    (``plainer``) while it still does, again until nothing changes: 1-minimal in its units,
    each number as plain as it may be. ``needs``: the tids (id_key) the failure needs
    queued (the failing batch's expect), never tried without; ``named``: the tids its
    signature names (one dispatched but not expected), whose sessions are tried first
    with those of ``needs``.

    Units go by session first (a session's tasks and entries together, as a policy keeps
    them consistent): the sessions of what is needed alone, at once; then the others by
    delta debugging; then what is left one unit at a time."""
    tried: set[bytes] = set()  # each plainer state is tried once
    first = True
    while True:
        smaller = _fewer_units(line, fails, ddmin, needs, named, first)
        plain = _plainest(smaller, fails, tried)
        if plain == line:
            return line
        # Plainer numbers may let another unit go: each tried alone again.
        line, first = plain, False


def _fewer_units(
    line: State,
    fails: Callable[[State], bool],
    ddmin: Callable[[Any, Callable[[Any], State], int], Any],
    needs: frozenset[Any],
    named: frozenset[Any],
    first: bool,
) -> State:
    """The state's units delta-debugged (``first``: by session, then one by one; later
    rounds one by one only)."""
    units = units_of_state(line)
    tasks = {id_key(t["tid"]): t for g in line["state"].get("queued", []) for t in g}
    pinned = [u for u in units if u[0] == "task" and u[1] in needs]
    sessions: dict[Any, list[tuple[str, Any]]] = {}
    loose: list[tuple[str, Any]] = []
    for unit in units:
        if unit in pinned:
            continue
        sid = _session_of(unit, line, tasks)
        if sid is None:
            loose.append(unit)
        else:
            sessions.setdefault(sid, []).append(unit)
    needed = {_session_of(u, line, tasks) for u in pinned}
    needed |= {id_key(tasks[k]["sid"]) for k in named if k in tasks}

    def by_session(kept: Any) -> State:
        return keeping(line, [*pinned, *loose, *(u for sid in kept for u in sessions[sid])])

    names = list(sessions)
    if first and needed and len(needed) < len(names):
        alone = [sid for sid in names if sid in needed]
        if fails(by_session(alone)):
            names = alone
    if first and names:
        names = list(ddmin(names, by_session, 0))
    left = [*loose, *(u for sid in names for u in sessions[sid])]
    if left:
        few = 0 if first else len(left)  # later rounds: each alone
        left = list(ddmin(left, lambda kept: keeping(line, [*pinned, *kept]), few))
    return keeping(line, [*pinned, *left])


def _plainest(line: State, fails: Callable[[State], bool], tried: set[bytes]) -> State:
    changed = True
    while changed:
        changed = False
        for simpler in plainer(line):
            key = encode(simpler)
            if key in tried:
                continue
            tried.add(key)
            if fails(simpler):
                line, changed = simpler, True
                break
    return line


def ids_named(signature: Any) -> frozenset[Any]:
    """The ids (as id_key pairs) a failure's signature names, however nested."""
    found: set[Any] = set()
    stack = [signature]
    while stack:
        value = stack.pop()
        if isinstance(value, tuple):
            if len(value) == 2 and value[0] in (int, str):
                found.add(value)
            else:
                stack.extend(value)
    return frozenset(found)


def encode(line: State) -> bytes:
    return orjson.dumps(line)


def window_from(lines: Lines, taken: Taken, end: int, keep_expects: bool) -> bytes | None:
    """The stated window from ``taken``'s step to line ``end`` of the copy: the header, the
    state line, the lines from the step's get_work on, their expects dropped but ``end``'s
    (unless ``keep_expects``); None where the step's get_work is not before ``end``."""
    first = lines.index(taken.line)
    if not 0 <= first <= end:
        return None
    stripped: Sequence[int] = ()
    if not keep_expects:
        expects = lines.expects
        stripped = expects[bisect.bisect_left(expects, first) : bisect.bisect_left(expects, end)]
    return with_state(
        lines, Candidate(Ranges([(first, end + 1)]), stripped), encode(taken.state_line)
    )


def with_state(lines: Lines, candidate: Candidate, state: bytes) -> bytes:
    """``candidate`` as a trace, the state line ``state`` first after the header."""
    body = candidate.data(lines)
    if lines.header is None:
        return state + b"\n" + body
    cut = len(lines.header) + 1
    return body[:cut] + state + b"\n" + body[cut:]
