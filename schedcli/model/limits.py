"""What every format accepts, bounded in one place (docs/trace-format.md, "Bounds").

Traces, dumps, workloads, CSV importers and policy parameters all check against these,
so no value that one reader takes can crash another command later.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""Ids, sizes, positions, steps, priorities and integer parameters: signed 64-bit."""

MAX_DEPTH = 200
"""Nesting of free-form JSON (``meta``): orjson writes at most 255 levels, and the dump's
own records wrap a task's meta a few levels deeper."""

MAX_REQUEST_TOKENS = 2**21
"""A request's prompt or output tokens (2,097,152): beyond any model's context today, and
small enough that simulating one request is a bounded run."""


# A request-level policy's sizes (vLLM's parameters): each large enough for any real
# deployment, and small enough that building the scheduler and holding its KV cache is
# bounded (twenty million blocks took 2.5 GB and half a minute to build).
MAX_MODEL_LEN = 2 * MAX_REQUEST_TOKENS
"""A request's prompt and output together."""
MAX_KV_BLOCKS = 2**20
"""KV-cache blocks (16M tokens at 16 a block)."""
MAX_BLOCK_SIZE = 2**12
"""Tokens in one KV-cache block."""
MAX_RUNNING_SEQS = 2**16
"""Requests running at once."""


MAX_SECONDS = 10.0**9
"""A duration or a point in time given in seconds (an option, a time stamp, an SLO): about
31 years, so that any sum of a few of them stays finite and exact enough to compare."""


class BoundError(ValueError):
    """A value outside what the formats accept; the message names the bound: ``name``
    (what was given) then ``why`` (what it must be)."""

    def __init__(self, message: str, name: str = "", why: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.why = why or message


def _refused(name: str, why: str) -> BoundError:
    return BoundError(f"{name} {why}", name, why)


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


# A number given as text (``-P KEY=VALUE``, a sweep's grid value, an environment setting):
# ASCII digits, an optional sign, decimal point and exponent. No digit separator (``1_000``),
# other script's digits, hex, ``inf`` or ``nan``, which Python's int() and float() take.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def number_text(text: str, integer: bool) -> int | float | None:
    """``text`` (spaces around it aside) as a number, or None if it is not one by the grammar
    above. An integer may be written with an exponent when its value is whole (``1e6``); a
    number too large for a float comes back infinite, which every bound refuses."""
    text = text.strip()
    if _INTEGER.fullmatch(text):
        return int(text)
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    if integer:
        if "e" not in text.lower() or not value.is_integer():
            return None  # 1.0 is not an integer's spelling; 1.5e3 is
        return int(value)
    return value


class Bound(NamedTuple):
    """What one numeric setting accepts: a finite number (an integer if ``integer``) from
    ``low`` (excluded if ``low_open``) to ``high``."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low, high = _show(self.low), _show(self.high)
        if self.low_open:
            return f"{kind} > {low} and <= {high}"
        return f"{kind} from {low} to {high}"

    def check(self, name: str, value: object) -> Any:
        """``value`` if it is within the bound; BoundError naming ``name`` and the bound."""
        ok_type = isinstance(value, int) if self.integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type:
            raise _refused(name, f"must be {self.describe()}, not {value!r}")
        assert isinstance(value, int | float)
        if not math.isfinite(value):
            raise _refused(name, f"must be {self.describe()}, not {value!r}")
        below = value <= self.low if self.low_open else value < self.low
        if below or value > self.high:
            raise _refused(name, f"must be {self.describe()}, not {_given(value)}")
        return value

    def parse(self, name: str, text: str) -> Any:
        """A value given as text (a grid value): parsed as the bound's type, then checked."""
        value = number_text(text, self.integer)
        if value is None or not math.isfinite(value):
            raise _refused(name, f"must be {self.describe()}, not {text!r}")
        return self.check(name, value)


def _show(x: float) -> str:
    """A bound as the messages write it: an integer exactly (9223372036854775807, not
    9.22337e+18), a float whole and short as one (100), else short (1e-06)."""
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e16 else f"{x:g}"


def _given(x: float) -> str:
    """A finite value refused, as it was likely written: a whole float as an integer, its
    sign kept (``-0``, ``101``; a command line's ``-0`` reaches us as -0.0), else exactly."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return ("-" if math.copysign(1.0, x) < 0 else "") + str(abs(int(x)))
    return repr(x)


_POSITIVE_SECONDS = Bound(0, MAX_SECONDS, low_open=True)
_SECONDS = Bound(0, MAX_SECONDS)

OPTIONS: dict[str, Bound] = {
    "max_line_bytes": Bound(1, 2**31, integer=True),
    "max_errors": Bound(1, 10**6, integer=True),
    "cost_a": _SECONDS,
    "cost_b": _SECONDS,
    "cost_c": _SECONDS,
    "limit": Bound(1, INT_MAX, integer=True),
    "start": _SECONDS,
    "duration": _POSITIVE_SECONDS,
    "time_scale": Bound(1e-6, 1e6),
    "seed": Bound(0, INT_MAX, integer=True),
    "rate": Bound(1e-6, 1e9),
    "cv": Bound(0.01, 100),
    "chunk_size": Bound(1, MAX_REQUEST_TOKENS, integer=True),
    "slo_ttft": _POSITIVE_SECONDS,
    "slo_tpot": _POSITIVE_SECONDS,
    "goodput": Bound(0, 1, low_open=True),
    "step": Bound(0, INT_MAX, integer=True),
    "max_time": _POSITIVE_SECONDS,
    "jobs": Bound(1, 1024, integer=True),
    "checkpoint_every": Bound(1, 10**6, integer=True),
    "stall_steps": Bound(1, 10**9, integer=True),
    # findings' thresholds (docs/findings.md): the two "more than N steps" from 0, the
    # "at least" ones from the least that is a finding (one preemption, over 0%).
    "starve_after": Bound(0, INT_MAX, integer=True),
    "hol_unused": Bound(0, 100, low_open=True),
    "thrash_after": Bound(1, INT_MAX, integer=True),
    "gap_after": Bound(0, INT_MAX, integer=True),
}
"""Every numeric command-line option, and the sweep settings named like them (a spec's
``jobs``, ``[cost] a``, ``[capacity] slo_ttft``, a grid's ``time_scale``), by the
name of the command's parameter: one table, so no
number reaches a simulation unchecked (a test fails for an option missing from it)."""
