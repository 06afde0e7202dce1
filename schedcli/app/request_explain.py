"""``explain`` of a request-level trace: a step's queue and reasons, or a request's life."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from ..engine.request_replay import RequestReplayer, policy_for_request_trace
from ..formats.request_schema import Abort, Arrive
from ..formats.requests import RequestReader
from ..formats.trace import open_trace
from ..model.errors import InputError
from ..model.records import Left, Record
from ..model.task import DECODE, PREFILL, Id, Task, id_key
from .explanation import Life, Queued, StepView


class _Reached(Exception):
    pass


class _Follow:
    """What the replay did, step by step, to the requests followed."""

    def __init__(self, step: int | None, rid: Id | None) -> None:
        self.step = step
        self.key = id_key(rid) if rid is not None else None
        self.arrived: dict[tuple[type, Id], tuple[int, int]] = {}  # rid -> (line, step)
        self.record: Record | None = None
        self.left: Left = None
        self.held: list[Id] = []
        self.life: Life | None = None

    def emit(self, record: Record) -> None:
        if "batch" in record:
            self.record = record
            life = self.life
            if life is not None:
                mine = [e for e in record["batch"] if id_key(e["sid"]) == self.key]
                if mine:
                    life.outcome, life.outcome_step = (
                        f"ran {mine[0]['size']} tokens",
                        record["step"],
                    )
                if any(id_key(r) == self.key for r in record["finished"]):
                    life.outcome, life.outcome_step = "finished", record["step"]

    def on_left(self, step: int, left: Left) -> None:
        self.left = left
        if self.life is not None:
            for t, code, detail in left or ():
                if id_key(t.sid) == self.key:
                    self.life.passed_over.append((step, code, detail))


def _replay(path: str, policy: str | None, params: Mapping[str, Any], follow: _Follow) -> str:
    with ExitStack() as stack:
        reader = stack.enter_context(open_trace(path))
        assert reader.header is not None
        built, label = policy_for_request_trace(
            reader.header, reader.name, policy, {k: str(v) for k, v in params.items()}
        )
        stack.callback(built.close)
        engine = RequestReplayer(built, follow.emit, policy_name=label, on_left=follow.on_left)
        try:
            for line, event in RequestReader(reader):
                engine.current_line = line
                if type(event) is Arrive:
                    follow.arrived[id_key(event.rid)] = (line, engine.totals.steps)
                    if id_key(event.rid) == follow.key:
                        task = Task(event.rid, event.rid, PREFILL, event.prompt_tokens or 0)
                        follow.life = Life(task, line, engine.totals.steps)
                elif type(event) is not Abort and engine.totals.steps == follow.step:
                    follow.held = built.held()
                    engine.feed(line, event)
                    raise _Reached
                elif type(event) is Abort and follow.life and id_key(event.rid) == follow.key:
                    follow.life.outcome = "aborted"
                    follow.life.outcome_step = engine.totals.steps
                engine.feed(line, event)
        except _Reached:
            pass
        return label


def explain_request_step(
    path: str, step: int, policy: str | None, params: Mapping[str, Any]
) -> StepView:
    """The requests held when ``step`` began, what it ran of them, and why it left the rest."""
    follow = _Follow(step, None)
    label = _replay(path, policy, params, follow)
    record = follow.record
    if record is None or record["step"] != step:
        raise InputError(path, None, f"there is no step {step} among the trace's step events")
    ran = {id_key(e["sid"]): e for e in record["batch"]}
    queue: list[Queued] = []
    batch: list[Task] = []
    by_rid: dict[tuple[type, Id], Task] = {}
    for rid in follow.held:
        entry = ran.get(id_key(rid))
        kind = DECODE if entry is not None and entry["kind"] == "decode" else PREFILL
        task = Task(rid, rid, kind, entry["size"] if entry is not None else 0)
        line, at = follow.arrived.get(id_key(rid), (0, 0))
        queue.append(Queued(task, line, at))
        by_rid[id_key(rid)] = task
        if entry is not None:
            batch.append(task)
    left = [
        (by_rid[id_key(t.sid)], code, detail)
        for t, code, detail in follow.left or ()
        if id_key(t.sid) in by_rid
    ]
    return StepView(step, None, batch, queue, left, label)


def explain_request_life(
    path: str, rid: Id, policy: str | None, params: Mapping[str, Any]
) -> list[Life]:
    """A request from its arrival to its end: each step it was passed over, and why."""
    follow = _Follow(None, rid)
    _replay(path, policy, params, follow)
    if follow.life is None:
        raise InputError(path, None, f"no arrive in this trace holds request {rid!r}")
    return [follow.life]
