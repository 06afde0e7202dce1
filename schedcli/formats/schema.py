"""Trace format v1, declared once: the reader decodes with it, the writer and the docs
follow it, and the error messages are derived from it (see ``explain``).

msgspec decodes a line straight into these structs, validating as it goes, for less than
the cost of parsing to dicts. A line it refuses is parsed again, only to say why.
"""

# Annotations are not postponed: msgspec reads the structs' types when it builds the
# decoder, at each start, and a postponed one is a string it must evaluate.
import difflib
from functools import cache
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson
from msgspec import Meta, Struct
from msgspec import inspect as mi

from ..model.limits import INT_MAX, INT_MIN

FORMAT_VERSION = 1

I64 = Annotated[int, Meta(ge=INT_MIN, le=INT_MAX)]
Count = Annotated[int, Meta(ge=0, le=INT_MAX)]
Id = I64 | str
Kind = Annotated[Literal["prefill", "decode"], Meta(extra={"noun": '"prefill" or "decode"'})]
Seconds = Annotated[float, Meta(extra={"noun": "a number of seconds"})]
Tids = Annotated[list[Id], Meta(extra={"noun": "an array of tids", "item": "each expected tid"})]
Tokens = Annotated[list[I64], Meta(extra={"noun": "an array of integers", "item": "each token"})]
Backing = Annotated[int, Meta(ge=1, le=INT_MAX)]


# Events are decoded from JSON, a tree: they can hold no reference cycle, so the collector
# need not track them (gc=False), which makes them cheaper to build and to free.


class Prepared(Struct, forbid_unknown_fields=True, gc=False):
    """A task's opaque payload (ExecuTorch's ``PreparedInput``): the positions of the whole
    prepared prompt (``size``) and where the task's slice starts in it (``offset``)."""

    size: Backing
    offset: Count


PreparedObject = Annotated[
    Prepared, Meta(extra={"noun": 'an object {"size": S, "offset": O}', "prefix": "prepared."})
]


class TaskFields(Struct, forbid_unknown_fields=True, gc=False):
    """One task of a submit's ``tasks`` array."""

    tid: Id
    sid: Id
    kind: Kind
    size: Count | None = None
    tokens: Tokens | None = None
    prepared: PreparedObject | None = None
    position: Count | None = None
    produce_output: bool | None = None
    priority: I64 = 0
    meta: Any = None


TaskList = Annotated[list[TaskFields], Meta(extra={"noun": "an array of task objects"})]
TASK_FIELDS = (
    "tid", "sid", "kind", "size", "tokens", "prepared", "position", "produce_output", "priority"
)  # fmt: skip


class Submit(Struct, tag_field="op", tag="submit", forbid_unknown_fields=True, gc=False):
    """A group (``tasks``), or one task's fields written on the event itself."""

    tasks: TaskList | None = None
    tid: Id | None = None
    sid: Id | None = None
    kind: Kind | None = None
    size: Count | None = None
    tokens: Tokens | None = None
    prepared: PreparedObject | None = None
    position: Count | None = None
    produce_output: bool | None = None
    priority: I64 = 0
    step: Count | None = None
    t: Seconds | None = None
    meta: Any = None


class Cancel(Struct, tag_field="op", tag="cancel", forbid_unknown_fields=True, gc=False):
    sid: Id
    step: Count | None = None
    t: Seconds | None = None
    meta: Any = None


class GetWork(Struct, tag_field="op", tag="get_work", forbid_unknown_fields=True, gc=False):
    expect: Tids | None = None
    step: Count | None = None
    t: Seconds | None = None
    meta: Any = None


class Clear(Struct, tag_field="op", tag="clear", forbid_unknown_fields=True, gc=False):
    step: Count | None = None
    t: Seconds | None = None
    meta: Any = None


# The trace levels a header may name: the two whose events the formats read, and any other
# engine/levels/table.py registers (``accept_level``: the formats cannot see the table
# above them; tests/test_recipes.py holds the two the same).
LEVEL_NAMES: list[str] = ["task", "request"]


def accept_level(name: str) -> None:
    if name not in LEVEL_NAMES:
        LEVEL_NAMES.append(name)


Level = Annotated[str, Meta(extra={"levels": LEVEL_NAMES})]


class HeaderFields(Struct, forbid_unknown_fields=True):
    schedcli: int
    level: Level = "task"
    policy: str | None = None
    params: dict[str, Any] | None = None
    meta: Any = None


class LedgerFields(Struct, forbid_unknown_fields=True):
    """A state line's ledger: the replay's counts up to its step (the end record's)."""

    accepted: Count
    dispatched: Count
    cancelled: Count
    rejected: Count
    rejected_tasks: Count
    tokens: Count


LedgerObject = Annotated[
    LedgerFields, Meta(extra={"noun": "an object of the replay's counts", "prefix": "ledger."})
]


class StateFields(Struct, forbid_unknown_fields=True):
    """A trace that begins from a policy's state: the line right after the header
    (docs/trace-format.md, "Traces that begin from a state"). ``state`` is the policy's
    ``snapshot()``, checked by its ``restore``; the rest is checked here."""

    step: Count
    state: dict[str, Any]
    ledger: LedgerObject
    t: Seconds | None = None
    meta: Any = None


STATE_OP: Final = "state"


EventStruct = Submit | Cancel | GetWork | Clear
EVENTS: dict[str, type[Struct]] = {"submit": Submit, "cancel": Cancel, "get_work": GetWork}
EVENTS["clear"] = Clear
OPS = tuple(EVENTS)

event_decoder: Final = msgspec.json.Decoder(EventStruct)


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        if not value.is_integer():
            return "a number with a fraction"
        if _beyond_int64(value):
            return "an out-of-range number"
        return f"a number written with a decimal point or exponent ({value!r})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _beyond_int64(value: float) -> bool:
    """A whole number read as a float: an integer too large for 64 bits (orjson reads one
    as a float), rather than one written as ``4.0`` or ``4e0``."""
    return abs(value) >= 2**63  # a float this large stands for no exact 64-bit integer


def unknown_field(name: str, allowed: list[str], what: str) -> str:
    hint = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.6)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown field {name!r} in {what}{did_you_mean}"


@cache
def _fields(cls: type[Struct]) -> tuple[mi.Field, ...]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return info.fields


def explain(
    obj: object, cls: type[Struct], what: str, skip: tuple[str, ...] = (), prefix: str = ""
) -> str | None:
    """Why ``obj`` (parsed JSON) is not a ``cls``, in the words of a person; None if it is.

    ``skip`` names keys checked elsewhere (the ``op`` tag); ``prefix`` goes before each
    field's name in a message about its value (``prepared.size``).
    """
    if type(obj) is not dict:
        return f"{what} must be an object, not {json_type(obj)}"
    fields = _fields(cls)
    names = [f.encode_name for f in fields]
    for key in obj:
        if key not in names and key not in skip:
            return unknown_field(key, names, what)
    for f in fields:
        if f.encode_name not in obj:
            if f.required:
                return f"{what} has no {f.encode_name}"
            continue
        problem = _value(obj[f.encode_name], f.type, prefix + f.encode_name)
        if problem is not None:
            return problem
    return None


def _unwrap(t: mi.Type) -> tuple[mi.Type, dict[str, Any]]:
    if isinstance(t, mi.Metadata):
        return t.type, dict(t.extra or {})
    return t, {}


def _value(value: object, t: mi.Type, name: str) -> str | None:
    """Why ``value`` is not of type ``t`` (None if it is); ``name`` names it."""
    t, extra = _unwrap(t)
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(m, mi.NoneType)]
        if value is None and len(members) < len(t.types):
            return None
        problems = [_value(value, m, name) for m in members]
        if any(p is None for p in problems):
            return None
        kinds = {type(_unwrap(m)[0]) for m in members}
        if kinds == {mi.IntType, mi.StrType}:
            if type(value) is int or (isinstance(value, float) and _beyond_int64(value)):
                return f"{name} is beyond the 64-bit integer range"
            return f"{name} must be an integer or a string, not {json_type(value)}"
        return problems[0]
    noun = extra.get("noun")
    if isinstance(t, mi.IntType):
        if type(value) is not int:
            if isinstance(value, float) and _beyond_int64(value):
                return f"{name} is beyond the 64-bit integer range"
            return f"{name} must be an integer, not {json_type(value)}"
        if not INT_MIN <= value <= INT_MAX:
            return f"{name} is beyond the 64-bit integer range"
        if t.ge is not None and value < t.ge:
            return f"{name} must be >= {t.ge}, not {value}"
        if t.le is not None and value > t.le:
            return f"{name} must be <= {t.le:,}, not {value}"
        return None
    if "levels" in extra:  # one of the names registered at the time (LEVEL_NAMES)
        if type(value) is str and value in LEVEL_NAMES:
            return None
        allowed = " or ".join(orjson.dumps(v).decode() for v in LEVEL_NAMES)
        return f"{name} must be {allowed}, not {orjson.dumps(value).decode()}"
    if isinstance(t, mi.LiteralType):
        if value in t.values and type(value) is str:
            return None
        allowed = noun or " or ".join(orjson.dumps(v).decode() for v in sorted(t.values, key=str))
        return f"{name} must be {allowed}, not {orjson.dumps(value).decode()}"
    if isinstance(t, mi.BoolType):
        return (
            None if type(value) is bool else f"{name} must be true or false, not {json_type(value)}"
        )
    if isinstance(t, mi.FloatType):
        if type(value) in (int, float):
            return None
        return f"{name} must be {noun or 'a number'}, not {json_type(value)}"
    if isinstance(t, mi.StrType):
        return None if type(value) is str else f"{name} must be a string, not {json_type(value)}"
    # A nested object that names its fields ("prepared.size"); one that does not (a
    # request-level step's expect) is explained by its own reader, in its own words.
    if isinstance(t, mi.StructType) and "prefix" in extra:
        if type(value) is not dict:
            return f"{name} must be {noun or 'an object'}, not {json_type(value)}"
        return explain(value, t.cls, name, prefix=extra.get("prefix", ""))
    if isinstance(t, mi.DictType):
        return None if type(value) is dict else f"{name} must be an object, not {json_type(value)}"
    if isinstance(t, mi.ListType):
        if type(value) is not list:
            return f"{name} must be {noun or 'an array'}, not {json_type(value)}"
        if t.max_length is not None and len(value) > t.max_length:
            return f"{name} has {len(value):,} entries, more than {t.max_length:,}"
        item_type, _ = _unwrap(t.item_type)
        if isinstance(item_type, mi.StructType):
            for i, item in enumerate(value):
                problem = explain(item, item_type.cls, f"task {i}")
                if problem is not None:
                    return problem
            return None
        item_name = extra.get("item", f"each {name} entry")
        for item in value:
            problem = _value(item, t.item_type, item_name)
            if problem is not None:
                return problem
        return None
    return None  # Any
