"""The request level's side of a debugging session (``travel/sides.py``): a replay fed
one event at a time, under ``--check`` a differing step marked rather than fatal, and the
requests held at the step a worker asks about with the policy's reasons there."""

from __future__ import annotations

from typing import Any

from ....formats.requests.schema import Arrive, Schedule, Step
from ....model.steps import Emitted
from ....model.steps import Step as StepRecord
from ....model.task import Id, id_key
from ...travel.state import shown
from .. import Entry, Follow, Sink
from .base import RequestReplay
from .replay import RequestReplayer


class RequestSide:
    def __init__(self, opened: RequestReplay, index: int, sink: Sink, check: bool) -> None:
        self.opened = opened
        self.index, self.sink = index, sink
        self.name = opened.policy_name
        self.policy = opened.policy
        # Under ``--check``, a step that differs from its expect is marked, not fatal; and at
        # the step the side wants, the requests held are kept as the step begins (a step
        # event's or a drain's alike).
        engine = RequestReplayer(
            opened.policy,
            self._emit,
            policy_name=opened.policy_name,
            check=check,
            trace_name=opened.name,
            on_arrived=self._arrived,
        )
        engine.step_starts = self._step_starts
        engine.diverged = self._diverged
        self.engine = engine
        self.arrived: dict[tuple[type, Id], tuple[int, int]] = {}  # held: (line, step)
        self.unstarted: dict[tuple[type, Id], int] = {}  # never scheduled yet: arrival step
        self.expect: Any = None  # the expect of the step being fed
        self._want = -1
        self.seen: list[tuple[Id, int, int]] = []
        self.last_step = -1
        self.view: list[Entry] | None = None
        self.follow: Follow | None = None

    def _step_starts(self, step: int) -> None:
        if step == self._want:
            held = self.policy.held()
            self.seen = [(r, *self.arrived.get(id_key(r), (0, 0))) for r in held]

    def _diverged(self, step: int, want: dict[str, Any]) -> None:
        self.sink.diverged(self.index, step, want)

    def want(self, step: int) -> None:
        self._want = step

    def expect_batch(self) -> list[tuple[Id, int | None]] | None:
        """The expect being fed: each request it schedules, with its tokens."""
        return None if self.expect is None else [(r, n) for r, n in self.expect["batch"]]

    def explain_from(self, step: int) -> None:
        """A request-level policy gives its reasons after every step."""

    def feed(self, line: int, event: Any) -> None:
        kind = type(event)
        if kind is Step or kind is Schedule:
            self.expect = _expected(event)
        self.engine.current_line = line
        try:
            self.engine.feed(line, event)
        finally:
            self.expect = None

    def feed_all(self) -> None:
        for line, event in self.opened.events:
            self.feed(line, event)

    def _arrived(self, event: Arrive, line: int, step: int) -> None:
        """An arrival the policy accepted: a rejected one (an id still held among them)
        is never recorded, so the held request keeps its own line and step."""
        key = id_key(event.rid)
        self.arrived[key] = (line, step)
        self.unstarted[key] = step
        if self.follow is not None:
            self.follow([(event.rid, event.rid)], line, step)

    def close(self) -> None:
        self.engine.close()

    def _emit(self, record: Emitted) -> None:
        if isinstance(record, StepRecord):
            step = self.last_step = record.step
            if step == self._want:
                self.view = self._view(record)
            for e in record.batch:
                self.unstarted.pop(id_key(e["sid"]), None)
            self._forget(record.finished or ())
            self.sink.stepped(self.index, record)
            return
        op = record.get("op")
        if op == "update":
            self._forget(record["finished"])
        elif op == "abort":  # a rejected arrival's record leaves what is held alone
            self.arrived.pop(id_key(record["rid"]), None)
            self.unstarted.pop(id_key(record["rid"]), None)
        if "end" not in record:
            self.sink.event(self.index, record, self.engine.totals.steps)
        else:
            self.sink.ended(self.index, record)

    def _forget(self, finished: Any) -> None:
        for rid in finished:
            self.arrived.pop(id_key(rid), None)
            self.unstarted.pop(id_key(rid), None)

    def _view(self, record: StepRecord) -> list[Entry]:
        ran = {id_key(e["sid"]): e for e in record.batch}
        why = {id_key(rid): (code, detail) for rid, code, detail in self.policy.reasons()}
        entries = []
        for rid, line, since in self.seen:
            entry = ran.get(id_key(rid))
            code, detail = why.get(id_key(rid), (None, None))
            entries.append(
                {
                    "tid": rid,
                    "sid": rid,
                    "kind": entry["kind"] if entry else "waiting",
                    "size": entry["size"] if entry else 0,
                    "line": line,
                    "since": since,
                    "ran": entry is not None,
                    "reason": code,
                    "detail": detail,
                }
            )
        return entries

    def oldest(self) -> int | None:
        for since in self.unstarted.values():
            return since
        return None

    def reasons(self) -> list[tuple[Id, Id, str, str]]:
        return [(rid, rid, code, detail) for rid, code, detail in self.policy.reasons()]

    def queued_now(self) -> list[tuple[Id, Id, int, int]]:
        return [(key[1], key[1], line, since) for key, (line, since) in self.arrived.items()]

    def state(self) -> list[tuple[str, str]]:
        """Request states: how many run and wait, and every request held."""
        running, waiting = self.policy.counts()
        held = self.policy.held()
        return [("running", str(running)), ("waiting", str(waiting)), ("held", shown(held, 1))]


def _expected(event: Any) -> dict[str, Any] | None:
    """A step event's recorded plan, as ``--check`` compares it."""
    expect = event.expect
    if expect is None:
        return None
    want: dict[str, Any] = {
        "batch": [[s.rid, s.tokens] for s in expect.batch],
        "preempted": list(expect.preempted),
    }
    if type(event) is Step:
        want["finished"] = list(expect.finished)
    return want
