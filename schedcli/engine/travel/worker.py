"""What a worker does: forked from a checkpoint, it goes on with the replay from there and
answers one question about the steps ahead of it, then ends.

- ``view``: step t as each side saw it: its record, the queue its policy saw, every
  waiting task's reason, and what the step is compared with;
- ``scan``: the first (or last) step in [a, b] where a condition holds (a task waiting
  more than K steps, a session dispatched, a reason given, a task or session found);
- ``life``: what happened in [a, b] to one task (by tid) or session (by sid): submitted,
  passed over and why, dispatched, cancelled (a request: arrived, ran, preempted, finished).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...model.errors import Said
from ...model.records import Record
from ...model.steps import Step
from ...model.task import Id, id_key, same_id
from .session import Session

Reply = Callable[[dict[str, Any]], None]


class Done(Exception):
    """The question is answered: the worker ends (a checkpoint-less server goes on)."""


def worker_for(task: dict[str, Any], session: Session, bound: int, reply: Reply) -> Any:
    """The hooks that answer ``task``, installed in ``session`` at a checkpoint whose
    sides have run every step up to ``bound``."""
    op = task["op"]
    if op == "view":
        return _View(task, session, bound, reply)
    if op == "scan":
        return _Scan(task, session, bound, reply)
    return _Life(task, session, bound, reply)


class _Worker:
    def __init__(self, task: dict[str, Any], session: Session, bound: int, reply: Reply) -> None:
        self.task, self.session, self.reply = task, session, reply
        session.hooks = self

    def explain_from(self, step: int) -> None:
        """Reasons at every step from ``step`` on, on every side: each turns them on
        before the first get_work it runs numbered ``step`` or more (not after step - 1,
        which may never run)."""
        for side in self.session.sides:
            side.explain_from(step)

    def side_step(self, side: int, step: int, record: Step) -> None:
        pass

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None:
        pass

    def mark(self, step: int, kind: str, *text: Said) -> None:
        pass

    def event(self, record: Record, step: int) -> None:
        pass

    def answer(self, body: dict[str, Any]) -> None:
        self.reply({"id": self.task["id"], **body})
        raise Done

    def ended(self, ending: dict[str, Any] | None) -> None:
        """The replay ended (or stopped: ``ending``) before the question was answered."""
        self.reply({"id": self.task["id"], "ended": ending or {"steps": self.session.steps}})


class _View(_Worker):
    def __init__(self, task: dict[str, Any], session: Session, bound: int, reply: Reply) -> None:
        super().__init__(task, session, bound, reply)
        self.step = task["step"]
        for side in session.sides:
            side.want(self.step)
        self.explain_from(self.step)

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None:
        if step < self.step:
            return
        sides = self.session.sides
        self.answer(
            {
                "view": {
                    "step": step,
                    "records": records,
                    "queues": [side.view if side.last_step >= step else None for side in sides],
                    "states": [side.state() for side in sides],
                    "other": other,
                }
            }
        )


def _matches(key: dict[str, Any]) -> Callable[[Id, Id], bool]:
    if "tid" in key:
        wanted = id_key(key["tid"])
        return lambda tid, sid: id_key(tid) == wanted
    sid = key["sid"]
    return lambda tid, s: same_id(s, sid)


class _Scan(_Worker):
    """Conditions on side 0, evaluated as each of its steps in [a, b] is emitted."""

    def __init__(self, task: dict[str, Any], session: Session, bound: int, reply: Reply) -> None:
        super().__init__(task, session, bound, reply)
        self.a, self.b, self.first = task["from"], task["to"], task["want"] == "first"
        self.conds = task["conds"]
        if any(c["kind"] == "reason" for c in self.conds):
            self.explain_from(self.a)
        self.found: dict[str, Any] | None = None

    def side_step(self, side: int, step: int, record: Step) -> None:
        super().side_step(side, step, record)
        if side != 0 or step < self.a:
            return
        if step > self.b:
            self.answer({"found": self.found})
        for cond in self.conds:
            why = self._holds(cond, step, record)
            if why is not None:
                self.found = {"step": step, "cond": cond, "why": why}
                if self.first:
                    self.answer({"found": self.found})
                break
        if step == self.b:
            self.answer({"found": self.found})

    def _holds(self, cond: dict[str, Any], step: int, record: Step) -> str | None:
        side = self.session.sides[0]
        kind = cond["kind"]
        if kind == "wait":
            oldest = side.oldest()
            if oldest is not None and step - oldest > cond["k"]:
                return f"a task has waited {step - oldest} steps (since step {oldest})"
        elif kind == "session":
            if any(same_id(e["sid"], cond["sid"]) for e in record.batch):
                return "the session is dispatched"
        elif kind == "reason":
            for tid, _, code, _ in side.reasons():
                if code == cond["code"]:
                    return f"{code} given for {tid}"
        elif kind == "find":
            match = _matches(cond)
            if any(match(e["tid"], e["sid"]) for e in record.batch):
                return "in the batch"
            if any(match(tid, sid) for tid, sid, _, _ in side.queued_now()):
                return "queued"
        return None

    def ended(self, ending: dict[str, Any] | None) -> None:
        self.reply({"id": self.task["id"], "found": self.found, "ended": ending or {}})


class _Life(_Worker):
    """Every event of the followed task or session on side 0, in [a, b]."""

    def __init__(self, task: dict[str, Any], session: Session, bound: int, reply: Reply) -> None:
        super().__init__(task, session, bound, reply)
        self.a, self.b = task["from"], task["to"]
        self.match = _matches(task["key"])
        self.events: list[list[Any]] = []
        self.live: dict[tuple[type, Id], bool] = {}  # followed tasks queued now
        side = session.sides[0]
        if bound < self.a:  # a segment after the first knows its tasks from the first
            for tid, sid, line, since in side.queued_now() if self.a == 0 else ():
                if self.match(tid, sid):
                    self.events.append([since, "submitted", tid, f"line {line}"])
                    self.live[id_key(tid)] = True
        side.follow = self._accepted
        self.explain_from(self.a)

    def _accepted(self, who: list[tuple[Id, Id]], line: int, step: int) -> None:
        if self.a <= step <= self.b:
            for tid, sid in who:
                if self.match(tid, sid):
                    self.events.append([step, "submitted", tid, f"line {line}"])
                    self.live[id_key(tid)] = True

    def side_step(self, side: int, step: int, record: Step) -> None:
        super().side_step(side, step, record)
        if side != 0 or step < self.a:
            return
        if step > self.b:
            self.answer({"life": self.events, "to": self.b})
        for e in record.batch:
            if self.match(e["tid"], e["sid"]):
                self.events.append([step, "dispatched", e["tid"], f"{e['kind']} {e['size']}"])
                self.live.pop(id_key(e["tid"]), None)
        for tid, sid, code, detail in self.session.sides[0].reasons():
            if self.match(tid, sid):
                self.events.append([step, "passed over", tid, f"{code}: {detail}"])
        for rid in record.preempted or ():
            if self.match(rid, rid):
                self.events.append([step, "preempted", rid, ""])
        for rid in record.finished or ():
            if self.match(rid, rid):
                self.events.append([step, "finished", rid, ""])
        if step == self.b:
            self.answer({"life": self.events, "to": self.b})

    def event(self, record: Record, step: int) -> None:
        """A cancel, clear, abort or rejection on side 0, at ``step``."""
        if not self.a <= step <= self.b:
            return
        if record.get("accepted") is False:
            for tid in record.get("tids", [record.get("rid")]):
                sids = record.get("sids", [record.get("rid")])
                if any(self.match(tid, sid) for sid in sids):
                    self.events.append([step, "rejected", tid, record["reason"]])
        for tid in record.get("dropped", ()):
            if self.live.pop(id_key(tid), None) is not None:
                self.events.append([step, "cancelled", tid, record.get("op", "")])
        if record.get("op") == "abort" and self.match(record["rid"], record["rid"]):
            self.events.append([step, "aborted", record["rid"], str(record.get("was"))])

    def ended(self, ending: dict[str, Any] | None) -> None:
        self.reply({"id": self.task["id"], "life": self.events, "ended": ending or {}})
