"""The workload format (request level): a streaming, validating reader."""

from __future__ import annotations

import difflib
import math
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ..model.errors import InputError
from ..model.limits import INT_MAX, INT_MIN, BoundError, depth_within, request_tokens
from ..model.task import Id, show_id
from ..streams.source import display_name, numbered_lines, open_binary
from .kinds import check_kind

FIELDS = frozenset(
    ("sid", "arrival", "prompt_tokens", "output_tokens", "cancel_after", "priority", "meta")
)


@dataclass(slots=True)
class Request:
    sid: Id
    arrival: float
    prompt_tokens: int
    output_tokens: int
    cancel_after: float | None = None
    priority: int = 0
    meta: Any = None
    line: int = 0


def _number(obj: dict[str, Any], key: str, where: tuple[str, int]) -> float:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(*where, f"{key} must be a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise InputError(*where, f"{key} must be a finite number >= 0, not {value}")
    return float(value)


def _count(obj: dict[str, Any], key: str, where: tuple[str, int]) -> int:
    value = obj[key]
    if type(value) is not int:
        raise InputError(*where, f"{key} must be an integer >= 1")
    try:
        return request_tokens(value, key)
    except BoundError as e:
        raise InputError(*where, str(e)) from None


# A string id's number: its last digits, without leading zeros, at most 18 of them.
_NUMBERED = re.compile(r"(0|[1-9][0-9]{0,17})\Z")


class _Runs:
    """A set of integers: runs of consecutive ones (starts, inclusive ends) as they came in
    ascending order, and the ones that came below the last run's end one by one."""

    __slots__ = ("ends", "starts", "stragglers")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.stragglers: set[int] = set()

    def add(self, n: int) -> bool:
        """Whether ``n`` is new (and now in)."""
        ends = self.ends
        if not ends or n > ends[-1]:
            if ends and n == ends[-1] + 1:
                ends[-1] = n
            else:
                self.starts.append(n)
                ends.append(n)
            return True
        i = bisect_right(self.starts, n) - 1
        if (i >= 0 and n <= ends[i]) or n in self.stragglers:
            return False
        self.stragglers.add(n)
        return True


class SeenIds:
    """The request ids a workload has named, exactly, in memory that follows the gaps in
    their numbering rather than their count: ``7``, ``"r7"`` and ``"r007"`` are kept as
    numbers in runs (of ints; of strings with the same text before the number), any other
    string as it is. Ids in ascending order with few gaps (what ``convert`` writes) cost a
    few runs however many there are."""

    def __init__(self) -> None:
        self._runs: dict[tuple[type, str], _Runs] = {}
        self._other: set[str] = set()

    def add(self, sid: Id) -> bool:
        """Whether ``sid`` is new (and now in); ``1`` and ``"1"`` are two ids."""
        key: tuple[type, str]
        if type(sid) is int:
            key, n = (int, ""), sid
        else:
            assert isinstance(sid, str)
            m = _NUMBERED.search(sid)
            if m is None:
                if sid in self._other:
                    return False
                self._other.add(sid)
                return True
            # Unambiguous: the prefix and the number (no leading zero) spell the id back.
            key, n = (str, sid[: m.start()]), int(m.group())
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = _Runs()
        return runs.add(n)


def read_workload(path: str) -> Iterator[Request]:
    """Requests in file order, each checked; arrivals must not decrease, sids not repeat."""
    name = display_name(path)
    seen = SeenIds()
    first = True
    last = 0.0
    with open_binary(path, name) as stream:
        for lineno, raw, complete in numbered_lines(stream, name):
            where = (name, lineno)
            if first:
                check_kind("workload", raw, name, lineno)
                first = False
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                what = "truncated last line" if not complete else "not valid JSON"
                raise InputError(name, lineno, f"{what}: {e}") from None
            if type(obj) is not dict:
                raise InputError(name, lineno, "each line must be a JSON object (a request)")
            if "op" in obj or "schedcli" in obj:
                raise InputError(
                    name, lineno, "this is an event trace, not a workload (use schedcli replay)"
                )
            extra = obj.keys() - FIELDS
            if extra:
                key = min(extra)
                hint = difflib.get_close_matches(key, sorted(FIELDS), n=1)
                mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise InputError(name, lineno, f"unknown field {key!r} in a request{mean}")
            for key in ("sid", "arrival", "prompt_tokens", "output_tokens"):
                if key not in obj:
                    raise InputError(name, lineno, f"request has no {key}")
            sid = obj["sid"]
            if type(sid) not in (int, str) or (type(sid) is int and not INT_MIN <= sid <= INT_MAX):
                raise InputError(name, lineno, "sid must be an integer or a string")
            if not seen.add(sid):
                raise InputError(name, lineno, f"sid {show_id(sid)} appears twice")
            arrival = _number(obj, "arrival", where)
            if arrival < last:
                raise InputError(
                    name, lineno, f"arrival {arrival} goes backwards (lines are sorted by it)"
                )
            last = arrival
            cancel_after = _number(obj, "cancel_after", where) if "cancel_after" in obj else None
            priority = obj.get("priority", 0)
            if type(priority) is not int or not INT_MIN <= priority <= INT_MAX:
                raise InputError(name, lineno, "priority must be an integer")
            meta = obj.get("meta")
            if meta is not None:
                try:
                    depth_within(meta)
                except BoundError as e:
                    raise InputError(name, lineno, str(e)) from None
            yield Request(
                sid,
                arrival,
                _count(obj, "prompt_tokens", where),
                _count(obj, "output_tokens", where),
                cancel_after,
                priority,
                meta,
                lineno,
            )
