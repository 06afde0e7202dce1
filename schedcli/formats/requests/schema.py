"""Request-level trace format, declared once (docs/trace-format.md, "Request-level
traces"): the request-level reader decodes with it; a replay of a call trace never loads it.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta, Struct

from ...model.limits import MAX_REQUEST_TOKENS
from ..schema import I64, Count, Id, Seconds

# A request's sizes, bounded as every format's (model/limits.py).
RequestTokens = Annotated[int, Meta(ge=1, le=MAX_REQUEST_TOKENS)]
_PROMPT = {"noun": "an array of integers", "item": "each token"}
Prompt = Annotated[list[I64], Meta(max_length=MAX_REQUEST_TOKENS, extra=_PROMPT)]
Ids = Annotated[list[Id], Meta(extra={"noun": "an array of request ids", "item": "each rid"})]


class Arrive(Struct, tag_field="op", tag="arrive", forbid_unknown_fields=True, gc=False):
    """A request reaches the scheduler: its prompt's length (or ids), its output limit."""

    rid: Id
    max_tokens: RequestTokens
    prompt_tokens: RequestTokens | None = None
    tokens: Prompt | None = None
    priority: I64 = 0
    t: Seconds | None = None
    meta: Any = None


class Abort(Struct, tag_field="op", tag="abort", forbid_unknown_fields=True, gc=False):
    rid: Id
    t: Seconds | None = None
    meta: Any = None


class Scheduled(Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """``[rid, n]``: one request's tokens in a recorded step (``expect.batch``), or the
    token id it sampled (``sampled``)."""

    rid: Id
    tokens: Count


class StepExpect(Struct, forbid_unknown_fields=True, gc=False):
    batch: list[Scheduled]
    preempted: Ids = []
    finished: Ids = []


class Step(Struct, tag_field="op", tag="step", forbid_unknown_fields=True, gc=False):
    """One scheduler step: planned, run, and its outputs handed back."""

    expect: StepExpect | None = None
    stop: Ids | None = None
    sampled: list[Scheduled] | None = None
    wall: Annotated[float, Meta(ge=0)] | None = None
    t: Seconds | None = None
    meta: Any = None


class ScheduleExpect(Struct, forbid_unknown_fields=True, gc=False):
    batch: list[Scheduled]
    preempted: Ids = []


class Schedule(Struct, tag_field="op", tag="schedule", forbid_unknown_fields=True, gc=False):
    """A split step's plan (vLLM's async scheduling): its outputs come with an update."""

    expect: ScheduleExpect | None = None
    t: Seconds | None = None
    meta: Any = None


class UpdateExpect(Struct, forbid_unknown_fields=True, gc=False):
    finished: Ids = []


class Update(Struct, tag_field="op", tag="update", forbid_unknown_fields=True, gc=False):
    """The outputs of the oldest split step not yet updated."""

    expect: UpdateExpect | None = None
    stop: Ids | None = None
    sampled: list[Scheduled] | None = None
    wall: Annotated[float, Meta(ge=0)] | None = None
    t: Seconds | None = None
    meta: Any = None


RequestEventStruct = Arrive | Abort | Step | Schedule | Update
REQUEST_EVENTS: dict[str, type[Struct]] = {
    "arrive": Arrive,
    "abort": Abort,
    "step": Step,
    "schedule": Schedule,
    "update": Update,
}
request_decoder: Final = msgspec.json.Decoder(RequestEventStruct)
