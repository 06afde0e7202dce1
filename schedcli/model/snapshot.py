"""A policy's state as JSON (``snapshot()``), and the checked reading of one (``restore``).

A state is plain JSON: dicts, lists, strings, integers, floats, booleans and null. It
comes from a trace, so it is untrusted input: every field is type-checked and every
number bounded here, and whatever is wrong is a ``BadSnapshot`` naming the field
(``queued[2][0].size``), never a traceback. docs/policies.md ("Snapshots") lists each
built-in's fields.

Every state has ``version`` (``VERSION``), ``policy`` (the name it was taken under) and
``queued``: the tasks still queued, in submit order, as the groups they were submitted in
(what is left of each). A policy adds the fields its decisions depend on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

from .errors import BadSnapshot
from .limits import INT_MAX, INT_MIN
from .task import DECODE, KINDS, Id, Task, id_key, show_id

VERSION: Final = 1
MAX_ID_CHARS: Final = 4096
"""A string id's length in a state (a trace's line bounds it already; this keeps a state
handed over in code as bounded)."""
MAX_COUNTER: Final = 1e300
"""A float in a state (fair's counters): finite, with room to add to it."""


def task_fields(t: Task) -> dict[str, object]:
    """A queued task as a state holds it: what a built-in decides from. ``priority`` only
    when it is not 0 (the default)."""
    out: dict[str, object] = {
        "tid": t.tid,
        "sid": t.sid,
        "kind": t.kind.value,
        "size": t.size,
        "produce_output": bool(t.produce_output),
    }
    if t.priority:
        out["priority"] = t.priority
    return out


def grouped(tasks: Iterable[Task], group_of: Mapping[Id, tuple[int, Task]]) -> list[object]:
    """``tasks`` (queued, in submit order) as lists of ``task_fields``, one per group.
    ``group_of`` maps a tid submitted in a group of two or more to (the group's number, the
    task): a group's tasks are consecutive in submit order, and a task not found there (or
    found as another task of its tid) was submitted alone."""
    out: list[object] = []
    current: list[object] = []
    last = -1
    for t in tasks:
        entry = group_of.get(t.tid)
        number = entry[0] if entry is not None and entry[1] is t else -1
        if number < 0 or number != last:
            current = []
            out.append(current)
        current.append(task_fields(t))
        last = number
    return out


def refuse(field: str, why: str) -> BadSnapshot:
    return BadSnapshot(field, why)


def _what(value: object) -> str:
    """A JSON value's type, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def a_dict(
    value: object, field: str, keys: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, object]:
    """``value`` as an object holding exactly ``keys`` (and any of ``optional``)."""
    if not isinstance(value, dict):
        raise refuse(field, f"must be an object, not {_what(value)}")
    need = list(keys)
    allowed = set(need) | set(optional)
    for k in value:
        if not isinstance(k, str) or k not in allowed:
            expected = ", ".join(sorted(allowed))
            raise refuse(field, f"has an unknown field {k!r} (its fields: {expected})")
    for k in need:
        if k not in value:
            raise refuse(field, f"has no field {k!r}")
    return value


def a_list(value: object, field: str) -> list[object]:
    if not isinstance(value, list):
        raise refuse(field, f"must be a list, not {_what(value)}")
    return value


def an_int(value: object, field: str, low: int = INT_MIN, high: int = INT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(field, f"must be an integer, not {_what(value)}")
    if not low <= value <= high:
        raise refuse(field, f"must be an integer from {low} to {high}, not {value}")
    return value


def a_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise refuse(field, f"must be true or false, not {_what(value)}")
    return value


def a_counter(value: object, field: str) -> float:
    """A number >= 0 and finite (an integer is taken as a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise refuse(field, f"must be a number, not {_what(value)}")
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        raise refuse(field, f"must be a number from 0 to {MAX_COUNTER:g}, not {value}")
    number = float(value)
    if not math.isfinite(number) or not 0 <= number <= MAX_COUNTER:
        raise refuse(field, f"must be a number from 0 to {MAX_COUNTER:g}, not {value!r}")
    return number + 0.0  # -0.0 is 0.0


def an_id(value: object, field: str) -> Id:
    """A task or session id: an integer (64-bit) or a string."""
    if isinstance(value, str):
        if len(value) > MAX_ID_CHARS:
            raise refuse(field, f"is a string id longer than {MAX_ID_CHARS} characters")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(field, f"must be an integer or a string id, not {_what(value)}")
    return an_int(value, field)


TASK_KEYS: Final = ("tid", "sid", "kind", "size", "produce_output")


def a_task(value: object, field: str, extra: Iterable[str] = ()) -> tuple[Task, dict[str, object]]:
    """A task as ``task_fields`` writes it (and the fields ``extra`` allows besides), and
    the object it was read from."""
    fields = a_dict(value, field, TASK_KEYS, ("priority", *extra))
    tid = an_id(fields["tid"], f"{field}.tid")
    sid = an_id(fields["sid"], f"{field}.sid")
    kind = fields["kind"]
    if not isinstance(kind, str) or kind not in KINDS:
        raise refuse(f"{field}.kind", f"must be 'prefill' or 'decode', not {kind!r}")
    size = an_int(fields["size"], f"{field}.size", 1, INT_MAX)
    if KINDS[kind] is DECODE and size != 1:
        raise refuse(f"{field}.size", f"a decode is 1 token, not {size}")
    output = a_bool(fields["produce_output"], f"{field}.produce_output")
    priority = an_int(fields.get("priority", 0), f"{field}.priority")
    t = Task(tid, sid, KINDS[kind], size, produce_output=output, priority=priority)
    return t, fields


def read_state(
    state: Mapping[str, object], policy: str, fields: Iterable[str], optional: Iterable[str] = ()
) -> tuple[list[list[Task]], dict[str, object]]:
    """The groups of ``queued`` as tasks, and the whole state checked to hold exactly the
    common fields, ``fields`` and any of ``optional``. The version is checked first, so a
    state of another version is refused as that, whatever its fields."""
    if not isinstance(state, Mapping):
        raise refuse("", f"a state must be an object, not {_what(state)}")
    version = state.get("version")
    if version is None:
        raise refuse("version", "is missing: a state says which version of the format it is")
    if isinstance(version, bool) or not isinstance(version, int) or version != VERSION:
        raise refuse("version", f"is {version!r}: this schedcli reads version {VERSION} only")
    checked = a_dict(dict(state), "state", ("version", "policy", "queued", *fields), optional)
    name = checked["policy"]
    if not isinstance(name, str):
        raise refuse("policy", f"must be a string, not {_what(name)}")
    if name != policy:
        raise refuse("policy", f"is {name!r}: this is policy {policy}'s state to restore")
    groups: list[list[Task]] = []
    for i, g in enumerate(a_list(checked["queued"], "queued")):
        items = a_list(g, f"queued[{i}]")
        if not items:
            raise refuse(f"queued[{i}]", "is an empty group")
        groups.append([a_task(v, f"queued[{i}][{j}]")[0] for j, v in enumerate(items)])
    return groups, checked


def sessions(value: object, field: str) -> list[Id]:
    """A list of session ids, each once."""
    out: list[Id] = []
    seen: set[tuple[type, Id]] = set()
    for i, v in enumerate(a_list(value, field)):
        sid = an_id(v, f"{field}[{i}]")
        if id_key(sid) in seen:
            raise refuse(f"{field}[{i}]", f"session {show_id(sid)} is listed twice")
        seen.add(id_key(sid))
        out.append(sid)
    return out


class Placed:
    """Which queued tasks a policy's fields have placed: each exactly once, by tid."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self.left: dict[tuple[type, Id], Task] = {id_key(t.tid): t for t in tasks}

    def take(self, tid: Id, field: str) -> Task:
        t = self.left.pop(id_key(tid), None)
        if t is None:
            raise refuse(field, f"tid {show_id(tid)} is not a queued task, or is listed twice")
        return t

    def done(self, field: str, what: str) -> None:
        """Every queued task placed, or refuse naming the first one ``field`` left out."""
        for t in self.left.values():
            raise refuse(field, f"task {show_id(t.tid)} is queued but {what}")
