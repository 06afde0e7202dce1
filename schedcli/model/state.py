"""A policy's state as a value: what the engine compares to tell a stalled policy from one
that is still changing (``Policy.fingerprint``).

Two snapshots are equal only when everything the policy object reaches is equal: its
attributes (``__dict__``, ``__slots__``, a compiled class's native attributes), containers
in their iteration order, and the objects they hold, shared or cyclic references as where
they were first seen. A deterministic policy whose answers depend only on what it reaches
answers the same calls the same way from equal snapshots. Anything the walk cannot see
into (an iterator, a C object, a closure's code) makes the policy opaque: ``None``.
"""

from __future__ import annotations

import enum
import sys
import threading
import types
from collections import deque

_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_ATOMS = (type(None), bool, int, float, complex, str, bytes)
# Attributes that are explanations or caches, never decisions: skipped so that asking for
# reasons does not make a policy look busy (QueueScheduler's, by name).
_NOT_STATE = frozenset({"_left", "_left_later", "_explaining"})
_LIMIT = 1_000_000  # values walked at most: a policy past it is treated as opaque


class Opaque(Exception):
    """The walk met something whose state it cannot see."""


def snapshot(policy: object) -> tuple[object, ...] | None:
    """``policy``'s state as a flat tuple, or None when some of it cannot be seen."""
    out: list[object] = []
    try:
        _walk(policy, out, {})
    except (Opaque, RecursionError):
        return None
    return tuple(out)


def _walk(value: object, out: list[object], seen: dict[int, int]) -> None:
    if len(out) > _LIMIT:
        raise Opaque("too large")
    kind = type(value)
    if kind in _ATOMS or isinstance(value, enum.Enum):
        out.append(kind)
        out.append(value)
        return
    key = id(value)
    if key in seen:  # shared or cyclic: where it was first seen
        out.append("ref")
        out.append(seen[key])
        return
    seen[key] = len(out)
    if kind in _LOCKS:
        out.append("lock")
        return
    out.append(kind)
    if isinstance(value, type):  # a class: itself, by where it is defined
        out.append(f"{value.__module__}.{value.__qualname__}")
        return
    if isinstance(value, types.FunctionType):  # its code, and what its closure holds
        out.append(value.__code__)
        _walk(value.__defaults__, out, seen)
        _walk([_contents(c) for c in value.__closure__ or ()], out, seen)
        return
    if isinstance(value, types.MethodType):
        _walk(value.__func__, out, seen)
        _walk(value.__self__, out, seen)
        return
    random = sys.modules.get("random")  # loaded wherever a Random can exist
    if random is not None and isinstance(value, random.Random):
        _walk(value.getstate(), out, seen)
        return
    if isinstance(value, list | tuple | deque | set | frozenset):
        out.append(len(value))
        for item in value:
            _walk(item, out, seen)
        return
    if isinstance(value, dict):
        out.append(len(value))
        for k, v in value.items():
            _walk(k, out, seen)
            _walk(v, out, seen)
        return
    names = attributes(value)
    if names is None:
        raise Opaque(kind.__qualname__)
    for name in names:
        if name in _NOT_STATE:
            continue
        try:
            attr = object.__getattribute__(value, name)
        except AttributeError:
            attr = _UNSET
        out.append(name)
        _walk(attr, out, seen)


def _contents(cell: types.CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return _UNSET


class _Unset:
    """An attribute declared and never set."""


_UNSET = _Unset()


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
