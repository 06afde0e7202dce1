"""schedcli's own request-level traces (a vLLM recording, ``simulate -p vllm -o``): the
traffic they carry, as a workload any policy runs.

A request's output is the tokens it sampled before it finished (counted from the steps:
``sampled`` where recorded, else each slice that reached its last known token); a client
abort becomes ``cancel_after``; a request still held at the end keeps its ``max_tokens``.
Rows leave in arrival order, each once its request has ended: memory follows the requests
in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..requests import UNANSWERED, decode_request_event
from ..requests.schema import Abort, Arrive, Schedule, Step, Update
from ..trace import LineError
from ._common import Converter, ConvertOptions, ConvertReport, Lines, Row, bad


@dataclass
class _Request:
    line: int
    arrival: float
    prompt: int
    max_tokens: int
    priority: int
    rid: object
    computed: int = 0
    produced: int = 0
    ended: bool = False
    cancel_after: float | None = None
    pending: list[None] = field(default_factory=list)  # tokens scheduled, not yet output


def _key(rid: object) -> tuple[type, object]:
    return (type(rid), rid)


def read(lines: Lines, name: str, options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    held: dict[tuple[type, object], _Request] = {}  # in arrival order
    inflight: deque[set[Any]] = deque()  # split steps' samplers, awaiting their update
    for lineno, raw, complete in lines:
        if lineno == 1 or b'"schedcli"' in raw[:32]:
            continue  # the header
        try:
            event = decode_request_event(raw, complete)
        except LineError as e:
            if b'"partial"' in raw:
                break  # a writer's stop marker: what came before is whole
            yield bad(lineno, str(e))
            continue
        if type(event) is Arrive:
            if event.t is None:
                yield bad(lineno, "arrive has no t: the traffic's arrival times are unknown")
                continue
            prompt = len(event.tokens) if event.tokens is not None else event.prompt_tokens
            assert prompt is not None
            held[_key(event.rid)] = _Request(
                lineno, event.t, prompt, event.max_tokens, event.priority, event.rid
            )
        elif type(event) is Abort:
            req = held.get(_key(event.rid))
            if req is not None and not req.ended:
                if event.t is None:
                    yield bad(lineno, "abort has no t: when the client gave up is unknown")
                    continue
                if event.t < req.arrival:
                    yield bad(
                        lineno,
                        f"abort at t={event.t} is before the request arrived "
                        f"(t={req.arrival}, line {req.line})",
                    )
                    continue
                req.ended = True
                req.cancel_after = event.t - req.arrival
        elif type(event) is Schedule:
            inflight.append(_planned(event.expect, held))
        elif type(event) is Update:
            if not inflight:
                yield bad(lineno, UNANSWERED)
                continue
            samplers = inflight.popleft()
            finished = event.expect.finished if event.expect is not None else ()
            _outputs(samplers, event.sampled, finished, held)
        elif type(event) is Step and event.expect is not None:
            samplers = _planned(event.expect, held)
            _outputs(samplers, event.sampled, event.expect.finished, held)
        yield from _ready(held)
    for req in held.values():
        req.ended = True
    yield from _ready(held)


def _planned(expect: object, held: dict[tuple[type, object], _Request]) -> set[Any]:
    """A step's slices applied: the requests whose slice reached their last known token."""
    samplers: set[Any] = set()
    for s in getattr(expect, "batch", ()):
        req = held.get(_key(s.rid))
        if req is None:
            continue
        req.computed += s.tokens
        if req.computed >= req.prompt + req.produced + len(req.pending):
            req.pending.append(None)  # a token on its way (async: before the last is known)
            samplers.add(_key(s.rid))
    for rid in getattr(expect, "preempted", ()):
        req = held.get(_key(rid))
        if req is not None:
            req.computed = 0  # recomputed from the start when it resumes
            req.pending.clear()
    return samplers


def _outputs(
    samplers: set[Any], sampled: Any, finished: Any, held: dict[tuple[type, object], _Request]
) -> None:
    """A step's outputs: a token for each sampler (``sampled`` when recorded), ends."""
    given = {_key(p.rid) for p in sampled} if sampled is not None else samplers
    for key in given:
        req = held.get(key)
        if req is not None:
            req.produced += 1
            if req.pending:
                req.pending.pop()
    for rid in finished:
        req = held.get(_key(rid))
        if req is not None:
            req.ended = True


def _ready(held: dict[tuple[type, object], _Request]) -> Iterator[Row]:
    """The ended requests at the head of the arrival order, as rows."""
    while held:
        key, req = next(iter(held.items()))
        if not req.ended:
            return
        del held[key]
        output = max(req.produced, 1) if req.cancel_after is None else req.max_tokens
        meta: dict[str, object] = {"rid": req.rid}
        yield Row(
            req.line,
            req.arrival,
            req.prompt,
            output,
            meta,
            priority=req.priority,
            cancel_after=req.cancel_after,
        )


def detect(first: bytes) -> bool:
    if b'"level"' not in first:
        return False
    try:
        header = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return type(header) is dict and "schedcli" in header and header.get("level") == "request"


CONVERTER = Converter(
    "requests",
    detect=detect,
    read=read,
    quirks="schedcli's request-level traces (a vLLM recording): outputs as sampled, "
    "aborts as cancel_after",
)
