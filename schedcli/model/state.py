"""A policy's state as a value: what a plugin's ``fingerprint()`` returns, made comparable.

The stall watch (engine/stall.py) compares fingerprints with ``==``, and a verdict of "it
will never schedule again" rests on that comparison. So a plugin's fingerprint is first
turned into a plain value here, whose equality means what it says: built of ``None``,
``int``, ``str``, ``bytes`` (each of exactly that type), ``bool``, ``float``, members of an
``enum.Enum``, and ``tuple``, ``list``, ``dict``, ``set`` and ``frozenset`` of those, in
their iteration order. Types are kept apart (``1``, ``1.0`` and ``True`` differ), a float by
its bits (``-0.0`` is not ``0.0``), a container by its kind. Anything else (a subclass of a
plain type, which may carry state of its own; a numpy array, whose ``==`` is no answer; any
other object) is the plugin's error, named with where it sits in the value.

The walk is bounded: a value of more than ``limit`` parts (a string or bytes counts one
part per 64) is not compared at all.

``attributes`` names what a person is shown of a policy (the debugger's state pane); it is
never the ground of a verdict.
"""

from __future__ import annotations

import enum
import struct
import types

from .limits import MAX_DEPTH


class NotAValue(Exception):
    """The fingerprint holds something that is not a plain value; says what, and where."""

    def __init__(self, what: str, where: str = "") -> None:
        self.what, self.where = what, where
        super().__init__(f"{what} at {where}" if where else what)


class TooLarge(Exception):
    """The fingerprint has more than the limit's parts."""


_FLOAT = struct.Struct("<d")
_ATOMS = (type(None), int, str, bytes)
_CONTAINERS: dict[type, str] = {tuple: "tuple", list: "list", set: "set", frozenset: "frozenset"}


class _Count:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def plain(value: object, limit: int) -> tuple[object, int]:
    """``value`` as a plain value that compares equal exactly when the two values are the
    same (kinds included), and how many parts it has. NotAValue for anything else; TooLarge
    past ``limit`` parts (found within ``limit`` steps, whatever the value's size)."""
    count = _Count(limit)
    out = _plain(value, count, 0)
    return out, limit - count.left


def _plain(value: object, count: _Count, depth: int) -> object:
    count.left -= 1
    if count.left < 0:
        raise TooLarge
    kind = type(value)
    if kind in _ATOMS:
        if isinstance(value, str | bytes):  # a long one costs as many parts of 64
            count.left -= len(value) >> 6
            if count.left < 0:
                raise TooLarge
        return value
    if kind is bool:
        return ("bool", value is True)
    if isinstance(value, float) and kind is float:
        return ("float", _FLOAT.pack(value))
    if isinstance(value, enum.Enum):  # a singleton, named by its class and name
        return ("enum", f"{kind.__module__}.{kind.__qualname__}", value.name)
    if depth >= MAX_DEPTH:
        raise NotAValue(f"a value nested deeper than {MAX_DEPTH} levels (does it hold itself?)")
    tag = _CONTAINERS.get(kind)  # exactly these kinds: a subclass may hold more
    if tag is not None and isinstance(value, tuple | list | set | frozenset):
        ordered = tag in ("tuple", "list")
        out: list[object] = [tag]
        for i, item in enumerate(value):
            out.append(_within(item, count, depth, i if ordered else None))
        return tuple(out)
    if isinstance(value, dict) and kind is dict:
        out = ["dict"]
        for key, item in value.items():
            out.append(_within(key, count, depth, None))
            out.append(_within(item, count, depth, key))
        return tuple(out)
    raise NotAValue(f"a {kind.__module__}.{kind.__qualname__}")


def _within(item: object, count: _Count, depth: int, where: object) -> object:
    try:
        return _plain(item, count, depth + 1)
    except NotAValue as e:
        step = f"[{where!r}]" if where is not None else "[...]"
        raise NotAValue(e.what, step + e.where) from None


# --- shown, never compared -----------------------------------------------------------
# What a person reads of a policy's state (the debugger's pane, engine/travel/state.py):
# its attributes by name. Never a verdict's ground: a walk cannot see all a policy keeps.


def attributes(value: object) -> list[str] | None:
    """The names of ``value``'s own state, in a fixed order; None for a kind the walk
    cannot see into (a function, a generator, an iterator, a C object)."""
    kind = type(value)
    if isinstance(value, types.BuiltinFunctionType | types.GeneratorType):
        return None
    names: list[str] = []
    found = False
    for cls in kind.__mro__:
        declared = getattr(cls, "__mypyc_attrs__", None)
        if declared is None:
            declared = cls.__dict__.get("__slots__", ())
            if isinstance(declared, str):
                declared = (declared,)
        else:
            found = True
        for name in declared:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
        if "__slots__" in cls.__dict__:
            found = True
    instance = getattr(value, "__dict__", None)
    if isinstance(instance, dict):
        found = True
        names.extend(n for n in instance if n not in names)
    if not found or _iterator(value):
        return None
    return names


def _iterator(value: object) -> bool:
    """Iterators and generators hold a position the walk cannot read."""
    return hasattr(value, "__next__") or type(value).__name__.endswith("iterator")
