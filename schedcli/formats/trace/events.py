"""A trace's lines as the reader hands them on: the header, events, and the commonest
line (a plain one-task submit) as only its task."""

from __future__ import annotations

from typing import Any, Final

from msgspec.structs import astuple

from ...model.task import DECODE, KINDS, PREFILL, Id, Task
from .. import schema
from ..schema import Cancel, GetWork, Submit, TaskFields

FORMAT_VERSION = schema.FORMAT_VERSION


class LineError(Exception):
    """A problem with one line; the reader adds the file and line number."""


class Header:
    """The trace's header line, read. (A plain class: making a dataclass costs 0.5-2 ms of
    start-up; docs/architecture.md, "Start-up".)"""

    def __init__(
        self, line: int, policy: str | None, params: dict[str, Any], meta: Any, level: str
    ) -> None:
        self.line = line
        self.policy = policy
        self.params = params
        self.meta = meta
        self.level = level


class StateLine:
    """A trace's state line, read (docs/trace-format.md): the step its first batch is
    (``step``), the policy's state to restore (``state``, checked by the policy), and
    the ledger's counts up to it (``ledger``: accepted, dispatched, cancelled, rejected,
    rejected_tasks, tokens). A plain class, as ``Header``."""

    def __init__(self, line: int, step: int, state: dict[str, Any], ledger: dict[str, int]) -> None:
        self.line = line
        self.step = step
        self.state = state
        self.ledger = ledger


class Event:
    """One scheduler call from the trace."""

    __slots__ = ("expect", "line", "meta", "op", "sid", "step", "t", "tasks")

    def __init__(
        self,
        op: str,
        line: int,
        step: int | None,
        t: float | None = None,
        *,
        tasks: list[Task] | None = None,
        sid: Id | None = None,
        expect: list[Id] | None = None,
        meta: Any = None,
    ) -> None:
        self.meta = meta
        self.op = op
        self.line = line
        self.step = step
        self.t = t
        self.tasks = tasks
        self.sid = sid
        self.expect = expect


Line = Event | list[Task]
"""A trace line as the reader hands it on: its event, or for the commonest line (a submit
of one task with no step, t or meta) only the group to submit, which is all a replay needs."""

Run = tuple[int, list[Line]]
"""Lines in a row: the first's number and the lines, item ``i`` being line ``first + i``."""


def as_event(item: Line, line: int) -> Event:
    """The line as an event, whichever way the reader handed it on."""
    if isinstance(item, list):
        return Event("submit", line, None, None, tasks=item)
    return item


# --- from structs to events -------------------------------------------------------------


def _task(f: Submit | TaskFields, what: str) -> Task:
    """A task from validated fields; only the size/tokens/prepared rules are left to check."""
    size = f.size
    tokens = f.tokens
    if tokens is not None:
        if size is None:
            size = len(tokens)
        elif size != len(tokens):
            raise LineError(f"size {size} does not match the {len(tokens)} tokens given")
    elif size is None:
        raise LineError(f"{what} has no size (and no tokens)")
    p = f.prepared
    prepared: tuple[int, int] | None = None
    if p is not None:
        # A payload is tokens or an opaque prepared input, never both; the slice lies
        # inside its backing (the C++ side builds a stand-in of that size).
        if tokens is not None:
            raise LineError(f"{what} has both tokens and prepared: a payload is one or the other")
        if p.offset + size > p.size:
            raise LineError(
                f"{what}'s slice runs past its prepared input: prepared.offset {p.offset} "
                f"+ size {size} > prepared.size {p.size}"
            )
        prepared = (p.size, p.offset)
    t = Task(
        f.tid,  # type: ignore[arg-type]  # checked by the caller for inline tasks
        f.sid,  # type: ignore[arg-type]
        KINDS[f.kind],  # type: ignore[index]
        size,
        position=f.position,
        produce_output=f.produce_output,
        priority=f.priority,
        meta=f.meta,
    )
    if tokens is not None:
        t.tokens = tokens
    t.prepared = prepared
    return t


def _submit_tasks(s: Submit) -> list[Task]:
    if s.tasks is not None:
        inline = [name for name in schema.TASK_FIELDS if _given(s, name)]
        if inline:
            raise LineError(
                f"submit has both a tasks array and task fields ({', '.join(inline)}); "
                "use one or the other"
            )
        return [_task(f, f"task {i}") for i, f in enumerate(s.tasks)]
    for name in ("tid", "sid", "kind"):
        if getattr(s, name) is None:
            raise LineError(f"submit has no {name}")
    return [_task(s, "submit")]


def _given(s: Submit, name: str) -> bool:
    value = getattr(s, name)
    return value != 0 if name == "priority" else value is not None


def to_event(s: schema.EventStruct, line: int) -> Event:
    if type(s) is Submit:
        plain = _plain_submit(astuple(s), line)
        if plain is not None:
            return plain
        meta = s.meta if s.tasks is not None else None  # inline, meta is the task's
        return Event("submit", line, s.step, s.t, tasks=_submit_tasks(s), meta=meta)
    if type(s) is GetWork:
        return Event("get_work", line, s.step, s.t, expect=s.expect, meta=s.meta)
    if type(s) is Cancel:
        return Event("cancel", line, s.step, s.t, sid=s.sid, meta=s.meta)
    return Event("clear", line, s.step, s.t, meta=s.meta)


# Positions in ``astuple(Submit)``: one C call instead of a lookup per field. Literals, so
# that compiled code indexes the tuple directly; checked against the struct below.
_TASKS: Final = 0
_TID: Final = 1
_SID: Final = 2
_KIND: Final = 3
_SIZE: Final = 4
_TOKENS: Final = 5
_PREPARED: Final = 6
_POSITION: Final = 7
_OUTPUT: Final = 8
_PRIORITY: Final = 9
_STEP: Final = 10
_T: Final = 11
_META: Final = 12
if Submit.__struct_fields__ != (
    "tasks", "tid", "sid", "kind", "size", "tokens", "prepared", "position", "produce_output",
    "priority", "step", "t", "meta",
):  # fmt: skip
    raise ImportError("schema.Submit's fields moved: update the positions in trace/events.py")


def _plain_task(v: tuple[Any, ...]) -> Task | None:
    """The task of the common line, one task written inline with no tokens, prepared input
    or meta; None for any other line."""
    if (
        v[_TASKS] is not None
        or v[_TOKENS] is not None
        or v[_PREPARED] is not None
        or v[_META] is not None
        or v[_SIZE] is None
        or v[_KIND] is None
        or v[_TID] is None
        or v[_SID] is None
    ):
        return None
    kind: str = v[_KIND]  # "prefill" or "decode": the decoder checked
    return Task(
        v[_TID],
        v[_SID],
        DECODE if kind == "decode" else PREFILL,
        v[_SIZE],
        position=v[_POSITION],
        produce_output=v[_OUTPUT],
        priority=v[_PRIORITY],
    )


def _plain_submit(v: tuple[Any, ...], line: int) -> Event | None:
    task = _plain_task(v)
    if task is None:
        return None
    return Event("submit", line, v[_STEP], v[_T], tasks=[task])


def _plain_keys(v: tuple[Any, ...]) -> int:
    """What _expected_keys counts for a plain submit: op, tid, sid, kind, size, and each
    optional field given (a priority of 0 counts as not given, as there)."""
    priority: int = v[_PRIORITY]
    return (
        5
        + (v[_POSITION] is not None)
        + (v[_OUTPUT] is not None)
        + (priority != 0)
        + (v[_STEP] is not None)
        + (v[_T] is not None)
    )
