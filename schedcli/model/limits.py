"""What every format accepts, bounded in one place (docs/trace-format.md, "Bounds").

Traces, dumps, workloads, CSV importers and policy parameters all check against these,
so no value that one reader takes can crash another command later.
"""

from __future__ import annotations

from typing import Any

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""Ids, sizes, positions, steps, priorities and integer parameters: signed 64-bit."""

MAX_DEPTH = 200
"""Nesting of free-form JSON (``meta``): orjson writes at most 255 levels, and the dump's
own records wrap a task's meta a few levels deeper."""

MAX_REQUEST_TOKENS = 2**21
"""A request's prompt or output tokens (2,097,152): beyond any model's context today, and
small enough that simulating one request is a bounded run."""


MAX_SECONDS = 10.0**9
"""A duration or a point in time given in seconds (an option, a time stamp, an SLO): about
31 years, so that any sum of a few of them stays finite and exact enough to compare."""


class BoundError(ValueError):
    """A value outside what the formats accept; the message names the bound."""


def within_int64(value: int, name: str) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise BoundError(f"{name} is beyond the 64-bit integer range")
    return value


def request_tokens(value: int, name: str) -> int:
    if not 1 <= value <= MAX_REQUEST_TOKENS:
        raise BoundError(f"{name} must be between 1 and {MAX_REQUEST_TOKENS:,}, not {value}")
    return value


def depth_within(value: Any, name: str = "meta") -> None:
    """Refuse nesting deeper than MAX_DEPTH (iteratively: the value may be very deep)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BoundError(f"{name} is nested deeper than {MAX_DEPTH} levels")
        inner = item.values() if type(item) is dict else item
        stack.extend((v, depth + 1) for v in inner if type(v) is dict or type(v) is list)
