"""A policy's state as a person reads it: each attribute the policy holds, its tasks shown
as ``tid/sid kind size``, its containers in their order (decode-first's decode queue, its
prefill chunks by session and the rotation of sessions; the like of every built-in and of a
plugin, found by the same walk as ``model.state``), cut short where long."""

from __future__ import annotations

import enum
from collections import deque
from typing import Final

from ...model.state import attributes
from ...model.task import Task, show_id
from ...policies._queues import FitIndex, OrderedQueue
from ...policies._rotation import Decodes, Rotation

ITEMS: Final = 12  # of a container, shown before "… N more"
DEPTH: Final = 3
HIDDEN: Final = frozenset({"_left", "_left_later", "_explaining", "_why", "_lock", "_locking"})


def policy_state(policy: object) -> list[tuple[str, str]]:
    """(attribute, value) for each attribute of ``policy``, in declaration order."""
    names = attributes(policy) or []
    rows = []
    for name in names:
        if name in HIDDEN:
            continue
        try:
            value = object.__getattribute__(policy, name)
        except AttributeError:
            continue
        rows.append((name, shown(value, DEPTH)))
    return rows


def shown(value: object, depth: int) -> str:
    if isinstance(value, Task):
        return f"{show_id(value.tid)}/{show_id(value.sid)} {value.kind.value} {value.size}"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value) if isinstance(value, str | bytes) else str(value)
    if depth == 0:
        return "…"
    # The built-ins' queues, as the queues they stand for (not their indexes): decode-first's
    # rotation of sessions in order and every queued decode in arrival order; fcfs's,
    # priority's and prefill-first's tasks in the order a batch meets them; fair's and
    # sjf's sessions in turn order.
    if isinstance(value, Rotation):
        value = value.order()
    elif isinstance(value, Decodes | OrderedQueue | FitIndex):
        value = value.ordered()
    if isinstance(value, list | tuple | deque | set | frozenset):
        items = list(value)
        return _bracketed("[]", [shown(v, depth - 1) for v in items[:ITEMS]], len(items))
    if isinstance(value, dict):
        pairs = list(value.items())[:ITEMS]
        return _bracketed(
            "{}", [f"{shown(k, 1)}: {shown(v, depth - 1)}" for k, v in pairs], len(value)
        )
    names = attributes(value)
    if names is None or type(value).__module__ in ("builtins", "_thread", "threading"):
        return type(value).__name__
    parts = []
    for name in names:
        if name in HIDDEN:
            continue
        try:
            parts.append(f"{name}={shown(object.__getattribute__(value, name), depth - 1)}")
        except AttributeError:
            continue
    return f"{type(value).__name__}({', '.join(parts)})"


def _bracketed(brackets: str, items: list[str], total: int) -> str:
    more = f", … {total - len(items)} more" if total > len(items) else ""
    return f"{brackets[0]}{', '.join(items)}{more}{brackets[1]}"
