"""Policies that idle, for the stall watch (engine/stall.py): state kept where no walk of
the object could see it, fingerprints that break, and state too large to walk.

``OddState`` keeps a counter in one of ``PLACES`` and dispatches its whole queue once the
counter reaches ``resume`` (0: never); the counter counts calls modulo ``period``, so a
``resume`` at or past ``period`` never comes (it cycles). It declares no fingerprint:
the engine cannot see its state and must never say it will not schedule again.
``OddStateDeclared`` is the same policy with an honest fingerprint of its own.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable
from typing import Any

from schedcli import Scheduler, Task
from schedcli.model.scheduler import Param
from schedcli.model.task import Id
from tests.doubles.requests import Thrashes

PLACES = (
    "attribute",  # a plain attribute: any walk sees it (the control)
    "int_subclass",  # the value of an int subclass
    "str_subclass",  # the value of a str subclass
    "dict_subclass",  # an attribute of a dict subclass
    "list_subclass",  # an attribute of a list subclass
    "partial",  # the argument of a functools.partial
    "set_pop",  # where set.pop() takes from next (the set's contents never change)
    "signed_zeros",  # the signs of zeros (-0.0 == 0.0)
    "class_attribute",
    "module_global",
    "function_attribute",
    "mutable_default",  # a method's mutable default argument
    "random_subclass",  # an attribute of a random.Random subclass
    "random_module",  # the random module's own generator
    "_left",  # attributes named as QueueScheduler's caches
    "_left_later",
    "_explaining",
)
ODD = PLACES[1:]  # every place but the control

_SEED = 20240517
_DRAWS: list[object] = []  # the random module's state after k draws from _SEED
_GLOBAL = 0


class _Int(int):
    pass


class _Names:
    """Where the names of QueueScheduler's caches hold a counter."""


class _Str(str):
    pass


class _Dict(dict[str, int]):
    calls = 0


class _List(list[int]):
    calls = 0


class _Random(random.Random):
    calls = 0


def _hook() -> None:
    """A function whose attribute holds the count."""


_hook.calls = 0  # type: ignore[attr-defined]


class OddState(Scheduler):
    """Idles until its hidden counter reaches ``resume``, then dispatches everything queued."""

    name = "odd-state"
    PARAMS = (
        Param("place", str, "int_subclass", "where the counter is kept", choices=PLACES),
        Param("resume", int, 5, "the call that dispatches (0: none)", minimum=0),
        Param("period", int, 64, "the counter counts calls modulo this", minimum=2, maximum=64),
    )
    calls = 0  # the class_attribute place

    def __init__(self, place: str = "int_subclass", resume: int = 5, period: int = 64) -> None:
        self.place, self.resume, self.period = place, resume, period
        self._queue: list[Task] = []
        self._store(0)

    def params(self) -> dict[str, Any]:
        return {"place": self.place, "resume": self.resume, "period": self.period}

    # --- the counter, wherever it is ----------------------------------------------------

    def _tick(self) -> int:
        """One call more: the counter's new value."""
        place = self.place
        if place == "set_pop":
            taken = self._set.pop()
            self._set.add(taken)
            count = taken + 1
            if count == self.period:
                self._store(0)
                count = 0
            return count
        if place == "random_module":
            random.random()
            count = _DRAWS.index(random.getstate())
            if count == self.period:
                self._store(0)
                count = 0
            return count
        count = (self._load() + 1) % self.period
        self._store(count)
        return count

    def _load(self) -> int:
        place = self.place
        if place == "attribute":
            return int(self._count)
        if place in ("int_subclass", "str_subclass"):
            return int(self._value) if place == "int_subclass" else len(self._value)
        if place in ("dict_subclass", "list_subclass"):
            return int(self._box.calls)
        if place == "partial":
            return int(self._partial())
        if place == "signed_zeros":
            return sum(1 << i for i, z in enumerate(self._zeros) if math.copysign(1, z) < 0)
        if place == "class_attribute":
            return type(self).calls
        if place == "module_global":
            return _GLOBAL
        if place == "function_attribute":
            return int(_hook.calls)  # type: ignore[attr-defined]
        if place == "mutable_default":
            return self._box_default()[0]
        if place == "random_subclass":
            return self._rng.calls
        # _left, _left_later, _explaining: on an object of its own (a compiled Scheduler
        # declares _explaining a bool), as the walk skipped these names in every object.
        return int(getattr(self._names, place))

    def _store(self, count: int) -> None:
        global _GLOBAL
        place = self.place
        if place == "attribute":
            self._count = count
        elif place == "int_subclass":
            self._value: Any = _Int(count)
        elif place == "str_subclass":
            self._value = _Str("x" * count)
        elif place in ("dict_subclass", "list_subclass"):
            if not hasattr(self, "_box"):
                self._box: Any = _Dict() if place == "dict_subclass" else _List()
            self._box.calls = count
        elif place == "partial":
            self._partial = functools.partial(int, count)
        elif place == "set_pop":  # a new set takes from its start
            self._set = set(range(64))
        elif place == "signed_zeros":
            if not hasattr(self, "_zeros"):
                self._zeros = [0.0] * 6
            for i in range(6):
                self._zeros[i] = -0.0 if count >> i & 1 else 0.0
        elif place == "class_attribute":
            type(self).calls = count
        elif place == "module_global":
            _GLOBAL = count
        elif place == "function_attribute":
            _hook.calls = count  # type: ignore[attr-defined]
        elif place == "mutable_default":
            self._box_default()[0] = count
        elif place == "random_subclass":
            if not hasattr(self, "_rng"):
                self._rng = _Random(1)
            self._rng.calls = count
        elif place == "random_module":
            random.seed(_SEED)
            if not _DRAWS:
                _DRAWS.extend(_draws())
        else:
            if not hasattr(self, "_names"):
                self._names: Any = _Names()
            setattr(self._names, place, count)

    def _box_default(self, box: list[int] = [0]) -> list[int]:  # noqa: B006 (the point)
        return box

    # --- the interface ------------------------------------------------------------------

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = list(tasks)
        tids = {t.tid for t in self._queue}
        for t in group:
            if t.tid in tids or (t.is_decode and t.size != 1) or t.size <= 0:
                return f"task {t.tid} refused"
            tids.add(t.tid)
        for t in group:
            if t.produce_output is None:
                t.produce_output = True
            self._queue.append(t)
        return None

    def has_work(self) -> bool:
        return bool(self._queue)

    def get_work(self) -> list[Task]:
        count = self._tick()
        if self.resume and count >= self.resume:
            batch, self._queue = self._queue, []
            return batch
        return []

    def cancel(self, sid: Id) -> list[Task]:
        dropped = [t for t in self._queue if t.sid == sid]
        self._queue = [t for t in self._queue if t.sid != sid]
        for t in dropped:
            t.cancelled = True
        return dropped

    def clear(self) -> list[Task]:
        dropped, self._queue = self._queue, []
        for t in dropped:
            t.cancelled = True
        return dropped


def _draws() -> list[object]:
    generator = random.Random(_SEED)
    states = [generator.getstate()]
    for _ in range(64):
        generator.random()
        states.append(generator.getstate())
    return states


class OddStateDeclared(OddState):
    """OddState with an honest fingerprint: the counter (kept plainly beside the odd place,
    which holds the same count), the queue, and the parameters."""

    name = "odd-state-declared"

    def __init__(self, place: str = "int_subclass", resume: int = 5, period: int = 64) -> None:
        super().__init__(place, resume, period)
        self._shown = 0

    def get_work(self) -> list[Task]:
        batch = super().get_work()
        self._shown = (self._shown + 1) % self.period
        return batch

    def fingerprint(self) -> object | None:
        return (self._shown, self.resume, self.period, tuple(t.tid for t in self._queue))


class Idles(OddState):
    """Never dispatches, and says its state is unchanged: a stall, proven."""

    name = "idles"
    PARAMS = ()

    def __init__(self) -> None:
        super().__init__("attribute", 0, 64)

    def get_work(self) -> list[Task]:
        return []

    def fingerprint(self) -> object | None:
        return (tuple(t.tid for t in self._queue),)


class FingerprintRaises(Idles):
    """Its fingerprint() raises."""

    name = "fingerprint-raises"

    def fingerprint(self) -> object | None:
        raise ValueError("no state here")


class FingerprintMisses(Idles):
    """A ``__getattr__`` that raises for every name it is asked, and a fingerprint() that
    reads an attribute it never set."""

    name = "fingerprint-misses"

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name!r}, and no AttributeError either")

    def fingerprint(self) -> object | None:
        return (self.never_set,)


class GetattrRaises(OddState):
    """OddState (no fingerprint) whose ``__getattr__`` raises for every name it is asked."""

    name = "getattr-raises"

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name!r}, and no AttributeError either")


class ArrayFingerprint(Idles):
    """Its fingerprint() is a numpy array (whose ``==`` is an array, not an answer)."""

    name = "array-fingerprint"

    def fingerprint(self) -> object | None:
        import numpy

        return numpy.zeros(4)


class Touched:
    """A value that counts every look at its attributes (``Touched.looks``)."""

    looks = 0

    def __getattribute__(self, name: str) -> Any:
        Touched.looks += 1
        return object.__getattribute__(self, name)


class HugeState(OddState):
    """Never dispatches, holds ``size`` values (``Touched`` ones if ``touched``), and
    declares no fingerprint."""

    name = "huge-state"
    PARAMS = (Param("size", int, 100_000, "values held", minimum=0),)

    def __init__(self, size: int = 100_000, touched: bool = False) -> None:
        super().__init__("attribute", 0, 64)
        self.size = size
        self.held: list[object] = [Touched() for _ in range(size)] if touched else [0] * size

    def params(self) -> dict[str, Any]:
        return {"size": self.size}


class HugeFingerprint(HugeState):
    """Never dispatches, and declares a fingerprint of all ``size`` values it holds, made
    anew at each call (counted in ``HugeFingerprint.calls``)."""

    name = "huge-fingerprint"
    calls = 0

    def fingerprint(self) -> object | None:
        HugeFingerprint.calls += 1
        return tuple(self.held)


class ChangingFingerprint(HugeState):
    """Never dispatches; its declared fingerprint has ``size`` parts and changes at every
    call (counted in ``ChangingFingerprint.calls``)."""

    name = "changing-fingerprint"
    calls = 0

    def fingerprint(self) -> object | None:
        ChangingFingerprint.calls += 1
        return (ChangingFingerprint.calls, *self.held)


class ThrashesUnseen(Thrashes):
    """tests.doubles:Thrashes without a fingerprint of its own: opaque."""

    name = "thrashes-unseen"
