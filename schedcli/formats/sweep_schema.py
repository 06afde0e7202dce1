"""The sweep spec (``sweep --spec FILE.toml``) and the sweep results (one JSON line per
point), declared once: readers validate against these structs, and their refusals are
derived from the declaration, as the trace format's are (docs/sweeps.md lists them)."""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

import msgspec
from msgspec import Struct

Scalar = int | float | str


class CostSpec(Struct, forbid_unknown_fields=True):
    """``[cost]``: simulate's step-time model (seconds); a term not given keeps its value."""

    a: float | None = None
    b: float | None = None
    c: float | None = None


class CapacitySpec(Struct, forbid_unknown_fields=True):
    """``[capacity]``: as --capacity --slo-ttft S --slo-tpot S [--goodput F]."""

    slo_ttft: float
    slo_tpot: float
    goodput: float = 0.9


class SweepSpec(Struct, forbid_unknown_fields=True):
    workloads: list[str] = []
    policies: list[str] = []
    grid: dict[str, list[Scalar] | Scalar] = {}
    backend: Literal["local", "ray"] | None = None
    jobs: int | None = None
    address: str | None = None
    cost: CostSpec | None = None
    capacity: CapacitySpec | None = None


class Percentiles(Struct):
    p99: float | None = None


class CapacityResult(Struct):
    rate_multiplier: float | None = None


class PointMetrics(Struct):
    """What the report reads of a point's metrics (a record carries more)."""

    throughput_output_tokens_per_s: float | None = None
    ttft: Percentiles | None = None
    tpot: Percentiles | None = None
    requests: int | None = None
    finished: int | None = None
    rejected: int | None = None
    rejected_by_reason: dict[str, int] | None = None
    chunk_size: int | None = None


class SweepRecord(Struct):
    """One point of ``sweep -o``: the fields the report reads, typed."""

    workload: str
    policy: str
    params: dict[str, Any]
    metrics: PointMetrics
    cost_model: dict[str, float] | None = None
    time_scale: float | None = None
    capacity: CapacityResult | None = None
    schedule_sha256: str | None = None  # the batches it dispatched, digested
    changed_nothing: list[str] | None = None  # grid keys whose every value gave one schedule


_AT = re.compile(r" - at `\$((?:\.[A-Za-z0-9_]+|\[[^\]]*\])*)`$")
_ENUM = re.compile(r"Invalid enum value (.*)")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")
_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_EXPECTED = re.compile(r"Expected `([^`]*)`, got `([^`]*)`")
_NOUNS = {"array": "an array", "object": "a table", "str": "a string", "int": "an integer"}
_NOUNS |= {"float": "a number", "bool": "a boolean", "null": "null"}


def refusal(
    error: msgspec.ValidationError, struct: type[Struct], top: str = "key", json: bool = False
) -> str:
    """A validation error of ``struct`` in a person's words, naming the key: ``key
    capacity.slo_tpot is missing``, ``unknown key 'iteration' in [capacity] (did you
    mean ...)``."""
    text = str(error)
    found = _AT.search(text)
    where = found.group(1).lstrip(".") if found else ""
    message = text[: found.start()] if found else text
    unknown = _UNKNOWN.match(message)
    if unknown is not None:
        name = unknown.group(1)
        table = f" in [{where}]" if where else ""
        known = _fields_at(struct, where)
        hint = difflib.get_close_matches(name, known, n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"unknown {top} {name!r}{table}{did_you_mean}; expected {', '.join(known)}"
    missing = _MISSING.match(message)
    if missing is not None:
        key = f"{where}.{missing.group(1)}" if where else missing.group(1)
        return f"{top} {key} is missing"
    where = where.replace("[...]", ".KEY")
    enum = _ENUM.match(message)
    if enum is not None:
        allowed = _choices(struct, where)
        return f"{top} {where} must be one of {', '.join(allowed)}, not {enum.group(1)}"
    expected = _EXPECTED.match(message)
    if expected is not None:
        kinds = [w.strip() for w in expected.group(1).split("|") if w.strip() != "null"]
        nouns = {**_NOUNS, "object": "an object"} if json else _NOUNS
        want = " or ".join(nouns.get(w, w) for w in kinds)
        got = nouns.get(expected.group(2), expected.group(2))
        return f"{top} {where or '(the top level)'} must be {want}, not {got}"
    return f"{top} {where}: {message}" if where else message


def _fields_at(struct: type[Struct], where: str) -> list[str]:
    cls: Any = struct
    for part in [p for p in where.split(".") if p]:
        hints = msgspec.structs.fields(cls)
        field = next((f for f in hints if f.encode_name == part), None)
        if field is None:
            return []
        inner = field.type
        candidates = getattr(inner, "__args__", (inner,))
        cls = next((c for c in candidates if isinstance(c, type) and issubclass(c, Struct)), None)
        if cls is None:
            return []
    return [f.encode_name for f in msgspec.structs.fields(cls)]


def _choices(struct: type[Struct], where: str) -> list[str]:
    """The allowed values of a Literal field (``backend``)."""
    for f in msgspec.structs.fields(struct):
        if f.encode_name == where:
            for option in getattr(f.type, "__args__", ()):
                values = getattr(option, "__args__", None)
                if values and all(isinstance(v, str) for v in values):
                    return list(values)
    return []
