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

import math
from collections.abc import Callable
from typing import Any

import orjson

from ...model.task import id_key
from ..levels.task.states import states_at

__all__ = ["State", "encode", "keeping", "plainer", "reduce_state", "states_at", "units_of_state"]

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
    less the least; each counter 0, then whole."""
    out: list[State] = []
    queued = sum(len(g) for g in line["state"].get("queued", []))
    bare = {"accepted": queued, "dispatched": 0, "cancelled": 0, "rejected": 0,
            "rejected_tasks": 0, "tokens": 0}  # fmt: skip
    if line["ledger"] != bare:
        out.append({**line, "ledger": bare})
    counters = line["state"].get("counters")
    if isinstance(counters, list) and counters:
        values = [c[1] for c in counters if isinstance(c, list) and len(c) == 2]
        least = min(values, default=0.0)
        if least:
            shifted = [[c[0], c[1] - least] for c in counters]
            out.append({**line, "state": {**line["state"], "counters": shifted}})
        for k, c in enumerate(counters):
            for value in (0.0, float(math.floor(c[1]))):
                if value != c[1]:
                    changed = [*counters[:k], [c[0], value], *counters[k + 1 :]]
                    out.append({**line, "state": {**line["state"], "counters": changed}})
    return out


def reduce_state(
    line: State,
    fails: Callable[[State], bool],
    ddmin: Callable[[Any, Callable[[Any], State]], Any],
) -> State:
    """The state line with as few units as still fail the same way (``ddmin``), then made
    plainer (``plainer``) while it still does, again until nothing changes: 1-minimal in
    its units, each number as plain as it may be."""
    units = units_of_state(line)
    if units:
        line = keeping(line, ddmin(units, lambda kept: keeping(line, list(kept))))
    changed = True
    while changed:
        changed = False
        for simpler in plainer(line):
            if fails(simpler):
                line, changed = simpler, True
                break
    return line


def encode(line: State) -> bytes:
    return orjson.dumps(line)
