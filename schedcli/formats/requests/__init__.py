"""Request-level traces: reading their events, and writing them (``simulate -o``, recorders).

A request-level trace (header ``"level": "request"``) logs what a request-level scheduler
was given: arrivals, aborts and steps, each step with what it scheduled as its ``expect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import msgspec
import orjson

from ...model.errors import InputError
from ...model.requests import Arrival, StepPlan
from ...model.task import Id
from ..kinds import LEVEL

# By name: once imported, this package's own submodule takes the name ``schema`` here.
from ..schema import explain as explain_fields
from ..trace import (
    LineError,
    TraceReader,
    check_duplicate_keys,
    decode_object,
    partial_marker,
)
from .schema import (
    REQUEST_EVENTS,
    Abort,
    Arrive,
    Schedule,
    Step,
    StepExpect,
    Update,
    request_decoder,
)

RequestEvent = Arrive | Abort | Step | Schedule | Update
OPS = ", ".join(f'"{op}"' for op in REQUEST_EVENTS)
# A split step's outputs answer the oldest plan not yet answered: there must be one.
UNANSWERED = "update with no schedule before it to answer"


def _explain(raw: bytes, complete: bool) -> str:
    obj = decode_object(raw, complete)
    op = obj.get("op")
    if op is None:
        return f"a request-level event needs an op: {OPS}"
    cls = REQUEST_EVENTS.get(op) if isinstance(op, str) else None
    if cls is None:
        shown = orjson.dumps(op).decode()
        return f"unknown op {shown} in a request-level trace (ops: {OPS})"
    problem = explain_fields(obj, cls, f"{op}", skip=("op",))
    expect = obj.get("expect")
    if problem is None and cls in (Step, Schedule) and isinstance(expect, dict):
        problem = _explain_expect(obj["expect"])
    return problem or "not a valid request-level event"


def _explain_expect(expect: dict[str, Any]) -> str | None:
    batch = expect.get("batch")
    if not isinstance(batch, list):
        return "expect.batch must be an array of [rid, tokens] pairs"
    for entry in batch:
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int | str)
            and not isinstance(entry[0], bool)
            and type(entry[1]) is int
            and entry[1] >= 0
        ):
            return f"expect.batch entry {orjson.dumps(entry).decode()} is not [rid, tokens >= 0]"
    return explain_fields(
        {k: v for k, v in expect.items() if k != "batch"}, StepExpect, "expect", ("batch",)
    )


def decode_request_event(raw: bytes, complete: bool) -> RequestEvent:
    try:
        event = request_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        raise LineError(_explain(raw, complete)) from None
    check_duplicate_keys(raw, _keys(event))
    if type(event) is Arrive:
        _check_arrival(event)
    return event


def _keys(event: RequestEvent) -> int:
    keys = 1 + sum(1 for f in event.__struct_fields__ if getattr(event, f) is not None)
    if type(event) is Step and event.expect is not None:
        keys += 3
    return keys + _meta_keys(getattr(event, "meta", None))


def _meta_keys(meta: object) -> int:
    if type(meta) is dict:
        return len(meta) + sum(_meta_keys(v) for v in meta.values())
    if type(meta) is list:
        return sum(_meta_keys(v) for v in meta)
    return 0


def _check_arrival(a: Arrive) -> None:
    if a.tokens is None and a.prompt_tokens is None:
        raise LineError("arrive needs prompt_tokens (or the prompt's tokens)")
    if a.tokens is not None:
        if not a.tokens:
            raise LineError("tokens must hold at least one token")
        if a.prompt_tokens is not None and a.prompt_tokens != len(a.tokens):
            raise LineError(
                f"prompt_tokens {a.prompt_tokens} disagrees with the {len(a.tokens)} tokens given"
            )


def arrival(a: Arrive) -> Arrival:
    """The scheduler's view of an arrive event."""
    tokens = tuple(a.tokens) if a.tokens is not None else None
    prompt = len(tokens) if tokens is not None else a.prompt_tokens
    assert prompt is not None
    return Arrival(a.rid, prompt, a.max_tokens, a.priority, tokens, a.t or 0.0)


class RequestReader:
    """A request-level trace's events after its header, lazily, with their line numbers.

    ``partial`` is the writer's stop marker when the trace ends with one.
    """

    def __init__(
        self, reader: TraceReader, on_error: Callable[[InputError], None] | None = None
    ) -> None:
        self.reader = reader
        self.name = reader.name
        self.header = reader.header
        self.partial: tuple[int, dict[str, Any]] | None = None
        self._on_error = on_error
        self._unanswered = 0  # schedule events whose update has not come yet

    def __iter__(self) -> Iterator[tuple[int, RequestEvent]]:
        for line, raw, complete in self.reader.raw_lines():
            if self.partial is not None:
                self._fail(line, "a line after the partial marker (the writer had stopped)")
                continue
            try:
                event = decode_request_event(raw, complete)
                if type(event) is Schedule:
                    self._unanswered += 1
                elif type(event) is Update:
                    if not self._unanswered:
                        raise LineError(UNANSWERED)
                    self._unanswered -= 1
                yield line, event
            except LineError as e:
                marker = partial_marker(raw)
                if marker is not None:
                    self.partial = (line, marker)
                    continue
                self._fail(line, str(e))

    def _fail(self, line: int, message: str) -> None:
        err = InputError(self.name, line, message)
        if self._on_error is None:
            raise err
        self._on_error(err)


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class RequestTraceWriter:
    """Writes a request-level trace: the header, then arrivals, aborts and steps."""

    def __init__(self, out: Sink, policy: str, params: dict[str, Any], meta: Any) -> None:
        self._out = out
        header: dict[str, Any] = {"schedcli": 1, "level": LEVEL, "policy": policy}
        header["params"] = params
        if meta is not None:
            header["meta"] = meta
        self._line(header)

    def _line(self, obj: dict[str, Any]) -> None:
        self._out.write(orjson.dumps(obj) + b"\n")

    def arrive(self, a: Arrival, *, t: float | None = None, meta: Any = None) -> None:
        obj: dict[str, Any] = {"op": "arrive", "rid": a.rid}
        if a.tokens is not None:
            obj["tokens"] = list(a.tokens)
        else:
            obj["prompt_tokens"] = a.prompt_tokens
        obj["max_tokens"] = a.max_tokens
        if a.priority:
            obj["priority"] = a.priority
        if t is not None:
            obj["t"] = t
        if meta is not None:
            obj["meta"] = meta
        self._line(obj)

    def abort(self, rid: Id, *, t: float | None = None) -> None:
        obj: dict[str, Any] = {"op": "abort", "rid": rid}
        if t is not None:
            obj["t"] = t
        self._line(obj)

    def schedule(self, plan: StepPlan, *, t: float | None = None) -> None:
        """A split step's plan (async scheduling); ``update`` gives its outputs."""
        obj: dict[str, Any] = {"op": "schedule"}
        if t is not None:
            obj["t"] = t
        obj["expect"] = {
            "batch": [[s.rid, s.tokens] for s in plan.batch],
            "preempted": list(plan.preempted),
        }
        self._line(obj)

    def update(
        self,
        finished: list[Id],
        *,
        stop: list[Id] | None = None,
        sampled: list[list[Any]] | None = None,
        wall: float | None = None,
        t: float | None = None,
    ) -> None:
        obj = _outputs("update", stop, sampled, wall, t)
        obj["expect"] = {"finished": list(finished)}
        self._line(obj)

    def step(
        self,
        plan: StepPlan,
        *,
        stop: list[Id] | None = None,
        sampled: list[list[Any]] | None = None,
        wall: float | None = None,
        t: float | None = None,
    ) -> None:
        obj = _outputs("step", stop, sampled, wall, t)
        obj["expect"] = expect_of(plan)
        self._line(obj)

    def partial(self, reason: str) -> None:
        self._line({"partial": {"reason": reason}})


def _outputs(
    op: str,
    stop: list[Id] | None,
    sampled: list[list[Any]] | None,
    wall: float | None,
    t: float | None,
) -> dict[str, Any]:
    """The fields a step's outputs give (``step`` and ``update`` events), those given."""
    obj: dict[str, Any] = {"op": op}
    if stop:
        obj["stop"] = stop
    if sampled:
        obj["sampled"] = sampled
    if wall is not None:
        obj["wall"] = wall
    if t is not None:
        obj["t"] = t
    return obj


def expect_of(plan: StepPlan) -> dict[str, Any]:
    """A step's ``expect``, as recorded and as compared."""
    return {
        "batch": [[s.rid, s.tokens] for s in plan.batch],
        "preempted": list(plan.preempted),
        "finished": list(plan.finished),
    }
