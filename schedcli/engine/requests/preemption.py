"""What preemption costs at the request level: the victim of each preemption, and the
tokens each request computes again after losing its KV cache (preemption by recompute, as
vLLM's), from the step plans a replay or a simulation makes, or a dump's records of them.

A request's computed positions are the union of its slices' ``[position, position +
tokens)``. A scheduled token at a position already in it is *recomputed*: a preempted
request's slices restart below the position it had reached (at 0, or past a prefix-cache
hit), and every token it computes again up to there counts. Tokens past its old reach are
new, and so is a position it never computed itself (a prefix-cache hit before). Each
recomputed token is charged to the request's latest preemption.

Streamed: memory is a few spans per request seen running and not yet finished or aborted
(dropped at its end), plus what the summary lists: one record per preemption and one row
per request preempted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...formats.dump import ends_request_level, slice_position
from ...model.records import Record
from ...model.requests import StepPlan
from ...model.task import Id


@dataclass
class Victim:
    """One preemption: at ``step``, request ``rid``, which had computed ``computed``
    distinct positions, up to position ``reached``; ``recomputed``: the tokens it computed
    again after it (until its next preemption or its end); ``resumed_at``: the position its
    next slice started from (None while it has not run again)."""

    step: int
    rid: Id
    computed: int
    reached: int
    recomputed: int = 0
    resumed_at: int | None = None


@dataclass
class _Row:
    """A request preempted (or that recomputed) at least once: its preemptions in order."""

    rid: Id
    victims: list[Victim] = field(default_factory=list)
    recomputed: int = 0  # all it recomputed: the sum over victims, unless a policy
    # recomputed a position without preempting it first (counted here, in no victim)


class _Live:
    __slots__ = ("row", "spans", "victim")

    def __init__(self) -> None:
        # Invariant: sorted, disjoint, not touching: [start, end) of the positions computed.
        self.spans: list[tuple[int, int]] = []
        self.victim: Victim | None = None  # its latest preemption, charged what follows
        self.row: _Row | None = None


def _compute(spans: list[tuple[int, int]], a: int, b: int) -> tuple[list[tuple[int, int]], int]:
    """``spans`` with ``[a, b)`` added, and how many positions of it they held already."""
    again, lo, hi = 0, a, b
    out: list[tuple[int, int]] = []
    placed = False
    for s, e in spans:
        if e < a or s > b:  # apart: kept as it is, in order
            if s > b and not placed:
                out.append((lo, hi))
                placed = True
            out.append((s, e))
        else:  # overlapping or touching: merged
            again += max(0, min(e, b) - max(s, a))
            lo, hi = min(lo, s), max(hi, e)
    if not placed:
        out.append((lo, hi))
    return out, again


class PreemptionTally:
    """Fed each step's plan (``planned``) and each request's end (``ended``: finished or
    aborted), or a request-level dump's records (``record``); ``summary`` words nothing,
    it gives the figures (docs/policies.md, "What preemption costs")."""

    def __init__(self) -> None:
        # By rid: ids are ints and strings only, so 1 and "1" are two keys.
        self._live: dict[Id, _Live] = {}
        self.victims: list[Victim] = []
        self.rows: list[_Row] = []  # in the order of each request's first preemption
        self.computed = 0  # every token scheduled, recomputed ones included
        self.recomputed = 0
        self.request_level = False  # a dump: whether its records are a request level's

    def planned(self, step: int, plan: StepPlan) -> None:
        """One step: its slices computed, then its preemptions, then its finishes (a
        request scheduled and preempted in one step computed its slice first)."""
        for s in plan.batch:
            self.sliced(s.rid, s.position, s.tokens)
        for rid in plan.preempted:
            self.preempted(step, rid)
        self.ended(plan.finished)

    def sliced(self, rid: Id, position: int, tokens: int) -> None:
        self.computed += tokens
        if tokens <= 0:
            return
        live = self._live.get(rid)
        if live is None:
            live = self._live[rid] = _Live()
        victim = live.victim
        if victim is not None and victim.resumed_at is None:
            victim.resumed_at = position
        live.spans, again = _compute(live.spans, position, position + tokens)
        if again:
            self.recomputed += again
            self._row(live, rid).recomputed += again
            if victim is not None:
                victim.recomputed += again

    def preempted(self, step: int, rid: Id) -> None:
        live = self._live.get(rid)
        if live is None:  # preempted before it ran: it had computed nothing
            live = self._live[rid] = _Live()
        spans = live.spans
        victim = Victim(step, rid, sum(e - s for s, e in spans), spans[-1][1] if spans else 0)
        live.victim = victim
        self.victims.append(victim)
        self._row(live, rid).victims.append(victim)

    def ended(self, rids: Iterable[Id]) -> None:
        """Requests finished or aborted: their state goes (an id that arrives again is a
        new request); their rows and victims stay."""
        for rid in rids:
            self._live.pop(rid, None)

    def _row(self, live: _Live, rid: Id) -> _Row:
        row = live.row
        if row is None:
            row = live.row = _Row(rid)
            self.rows.append(row)
        return row

    def record(self, record: Record) -> None:
        """One record of a dump, as ``read_dump`` checked it: a request level's batch
        record (it has ``preempted``; each entry's tid is ``RID@POSITION``), update,
        abort or end; a task level's records leave ``request_level`` false."""
        if "batch" in record:
            if "preempted" not in record:
                return
            self.request_level = True
            step = record["step"]
            for e in record["batch"]:
                self.sliced(e["sid"], slice_position(e), e["size"])
            for rid in record["preempted"]:
                self.preempted(step, rid)
            self.ended(record.get("finished") or ())
        elif record.get("op") == "update":
            self.request_level = True
            self.ended(record.get("finished") or ())
        elif record.get("op") in ("arrive", "abort"):
            self.request_level = True
            if record.get("was") is not None:
                self.ended([record["rid"]])
        elif ends_request_level(record):
            self.request_level = True

    def summary(self) -> dict[str, Any]:
        """The figures: counts, shares and lists, no words (the app words them)."""
        return {
            "preemptions": len(self.victims),
            "computed_tokens": self.computed,
            "recomputed_tokens": self.recomputed,
            "recompute_share": self.recomputed / self.computed if self.computed else 0.0,
            "preempted_requests": [
                {
                    "rid": row.rid,
                    "preemptions": len(row.victims),
                    "recomputed_tokens": row.recomputed,
                    "recomputed_after": [v.recomputed for v in row.victims],
                }
                for row in self.rows
            ],
            "victims": [
                {
                    "step": v.step,
                    "rid": v.rid,
                    "computed_tokens": v.computed,
                    "reached": v.reached,
                    "recomputed_tokens": v.recomputed,
                    "resumed_at": v.resumed_at,
                }
                for v in self.victims
            ],
        }
