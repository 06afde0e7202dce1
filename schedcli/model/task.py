"""The unit a scheduler queues: one slice of work for one session."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final

import orjson

Id = int | str
"""Task and session ids. ``1`` and ``"1"`` are different ids."""


class TaskKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


PREFILL: Final = TaskKind.PREFILL
DECODE: Final = TaskKind.DECODE

KINDS: Final[dict[str, TaskKind]] = {"prefill": PREFILL, "decode": DECODE}
"""Kind names as traces spell them."""


def id_key(value: Id) -> tuple[type, Id]:
    """A set or dict key that keeps ``1`` and ``"1"`` apart."""
    return (type(value), value)


def same_id(a: object, b: object) -> bool:
    return a == b and type(a) is type(b)


def ids_only_in(a: Sequence[Id], b: Sequence[Id]) -> tuple[list[Id], list[Id]]:
    """The ids of ``a`` missing from ``b``, and of ``b`` missing from ``a``, in order."""
    a_keys = {id_key(x) for x in a}
    b_keys = {id_key(x) for x in b}
    return [x for x in a if id_key(x) not in b_keys], [x for x in b if id_key(x) not in a_keys]


def show_id(value: Id) -> str:
    """An id as JSON spells it, so ``1`` and ``"1"`` read differently in messages."""
    return orjson.dumps(value).decode()


class Task:
    """One decode token or one prompt chunk of session ``sid``.

    Identity matters: a scheduler tracks the object it was given, so a tid reused
    after dispatch or cancel names a new task. ``produce_output=None`` means "the
    default", settled when the task is submitted (see :func:`settle_outputs`).
    ``prepared``: ``(backing size, offset)`` when the payload is an opaque prepared prompt
    (ExecuTorch's ``PreparedInput``) rather than tokens; carried, never read by a policy.
    """

    __slots__ = (
        "cancelled",
        "kind",
        "meta",
        "position",
        "prepared",
        "priority",
        "produce_output",
        "sid",
        "size",
        "tid",
        "tokens",
    )

    tid: Id
    sid: Id
    kind: TaskKind
    size: int
    position: int | None
    produce_output: bool | None
    tokens: list[int] | None
    prepared: tuple[int, int] | None
    priority: int
    meta: Any
    cancelled: bool

    def __init__(
        self,
        tid: Id,
        sid: Id,
        kind: TaskKind | str,
        size: int | None = None,
        *,
        position: int | None = None,
        produce_output: bool | None = None,
        tokens: Sequence[int] | None = None,
        # Any object: checked below, so the compiled core refuses what pure Python refuses,
        # in the same words (a typed parameter would refuse it first, as a TypeError).
        prepared: object = None,
        priority: int = 0,
        meta: Any = None,
    ) -> None:
        # Compiled, the signature refuses other types already; pure Python, this does. A
        # tuple, not int | str: that builds a union object at every call (5% of a replay).
        if not isinstance(tid, (int, str)) or not isinstance(sid, (int, str)):
            raise TypeError(f"a task's tid and sid are integers or strings, not {tid!r}, {sid!r}")
        # A kind given as the enum is taken as it is: a lookup by a str subclass is slow.
        k = kind if isinstance(kind, TaskKind) else KINDS.get(kind)
        if k is None:
            raise ValueError(f"kind must be 'prefill' or 'decode', not {kind!r}")
        if tokens is not None:
            tokens = list(tokens)
            if size is None:
                size = len(tokens)
            elif size != len(tokens):
                raise ValueError(f"size {size} does not match the {len(tokens)} tokens given")
        elif size is None:
            raise ValueError("size is required unless tokens are given")
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        kept = None if prepared is None else _prepared(prepared, size, tokens is not None)
        self.tid = tid
        self.sid = sid
        self.kind = k
        self.size = size
        self.position = position
        self.produce_output = produce_output
        self.tokens = tokens
        self.prepared = kept
        self.priority = priority
        self.meta = meta
        self.cancelled = False

    def copy(self) -> Task:
        """A new task with the same fields, not cancelled (a second policy's own)."""
        t = Task(
            self.tid,
            self.sid,
            self.kind,
            self.size,
            position=self.position,
            produce_output=self.produce_output,
            priority=self.priority,
            meta=self.meta,
        )
        t.tokens = self.tokens
        t.prepared = self.prepared
        return t

    @property
    def is_decode(self) -> bool:
        return self.kind is DECODE

    def __repr__(self) -> str:
        extra = " cancelled" if self.cancelled else ""
        return (
            f"Task(tid={self.tid!r}, sid={self.sid!r}, {self.kind.value}, size={self.size}{extra})"
        )


def _prepared(prepared: object, size: int, has_tokens: bool) -> tuple[int, int]:
    """``prepared`` as the plain ``(backing size, offset)`` tuple a task keeps (the C++ shim
    reads exactly that type), or ValueError saying which rule it breaks."""
    if has_tokens:
        raise ValueError("a task's payload is tokens or prepared, not both")
    if not isinstance(prepared, tuple) or len(prepared) != 2:
        raise ValueError(f"prepared is (backing size, offset), not {prepared!r}")
    backing: object = prepared[0]
    offset: object = prepared[1]
    if type(backing) is not int or type(offset) is not int:
        raise ValueError(f"prepared's backing size and offset are integers, not {prepared!r}")
    if backing < 1 or offset < 0:
        raise ValueError(f"prepared needs a backing size >= 1 and an offset >= 0, not {prepared!r}")
    if offset + size > backing:
        raise ValueError(
            f"the slice (offset {offset}, size {size}) runs past its prepared input's "
            f"{backing} positions"
        )
    return (backing, offset)


def settle_outputs(tasks: Sequence[Task]) -> None:
    """Fill in ``produce_output`` where the caller left it to the default.

    A decode produces output; of a group's prefill chunks, the last chunk of each
    session does (a group is normally one prompt's chunks, so that is the last chunk).
    """
    # Typed as a list of Task, so that compiled code reads the fields natively (narrowing a
    # Sequence[Task] by isinstance alone gives list[Any], read by name).
    group: list[Task] = tasks if isinstance(tasks, list) else list(tasks)
    if len(group) == 1:  # the common group: a decode, or a prompt in one chunk
        if group[0].produce_output is None:
            group[0].produce_output = True
        return
    last_prefill: dict[Id, Task] = {}
    for t in group:
        if t.kind is PREFILL:
            last_prefill[t.sid] = t
    for t in group:
        if t.produce_output is None:
            t.produce_output = t.kind is DECODE or last_prefill.get(t.sid) is t
