"""What a trace is made of, as shrinking cuts it: sessions, steps and calls, each a set of
lines dropped together."""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...model.task import id_key
from .candidates import STEP_OPS, Candidate, Lines, Ranges

# Task level: what names a session; request level: what names a request.
_SESSION_OPS = {"submit": "sid", "cancel": "sid", "arrive": "rid", "abort": "rid"}


@dataclass
class Units:
    """A candidate's kept lines by what they are. ``sessions``: each session's (its
    one-session submits and its cancels; a request's arrive and abort); ``steps``: each
    get_work (or request-level step) line; ``windows``: each step's line with the lines
    since the step before (a whole step); ``clears``: each clear line; ``pinned``: the
    lines no candidate failing the same way can lack (the one submit of a task the failing
    batch expects, the one arrival of a request the failing step expects)."""

    sessions: dict[Any, array[int]] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    windows: dict[int, list[int]] = field(default_factory=dict)  # by the step's line
    clears: list[int] = field(default_factory=list)
    pinned: set[int] = field(default_factory=set)


def units_of(candidate: Candidate, lines: Lines, needs: frozenset[Any] = frozenset()) -> Units:
    found = Units()
    needed: dict[Any, list[int]] = {}  # a needed tid or rid -> the lines that submit it
    window: list[int] = []
    for i, raw in candidate.lines(lines):
        e = candidate.event(raw, i)
        op = e.get("op")
        window.append(i)
        if op in STEP_OPS:
            found.steps.append(i)
            found.windows[i], window = window, []
        elif op == "clear":
            found.clears.append(i)
        elif op in _SESSION_OPS:
            name = _SESSION_OPS[op]
            named = e.get("tasks", [e])
            keys = {id_key(x[name]) for x in named if name in x}
            if len(keys) == 1:
                found.sessions.setdefault(keys.pop(), array("q")).append(i)
            if needs and op in ("submit", "arrive"):
                ident = "tid" if op == "submit" else "rid"
                for x in named:
                    if ident in x and id_key(x[ident]) in needs:
                        needed.setdefault(id_key(x[ident]), []).append(i)
    found.pinned = {at[0] for at in needed.values() if len(at) == 1}
    return found


_KEPT = re.compile(b"\x01+")


def free(units: Mapping[Any, Sequence[int]], pinned: set[int]) -> dict[Any, Sequence[int]]:
    """The units with no pinned line (the others stay, as lines outside every unit)."""
    return {k: unit for k, unit in units.items() if not any(i in pinned for i in unit)}


class Keeping:
    """Candidates that keep some of a set of units and every line outside them. Costs
    follow the candidate's length, not the trace's."""

    def __init__(
        self, candidate: Candidate, lines: Lines, units: Mapping[Any, Sequence[int]]
    ) -> None:
        self.candidate = candidate
        self._lines = array("q", candidate.kept)  # position -> line
        # Each unit as positions in the candidate: each of its lines is kept there.
        self.units = {
            key: [bisect.bisect_left(self._lines, i) for i in unit] for key, unit in units.items()
        }
        self._mask = bytearray(b"\x01") * len(self._lines)  # 1: kept outside the units
        for unit in self.units.values():
            for p in unit:
                self._mask[p] = 0

    def __call__(self, keys: Iterable[Any]) -> Candidate:
        mask = bytearray(self._mask)
        for key in keys:
            for p in self.units[key]:
                mask[p] = 1
        at = self._lines
        kept = Ranges.of(at[p] for m in _KEPT.finditer(mask) for p in range(*m.span()))
        return Candidate(kept, self.candidate.stripped, self.candidate.tasks)
