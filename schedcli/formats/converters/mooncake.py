"""Mooncake's traces (``FAST25-release/traces/*.jsonl``): JSON lines, millisecond
timestamps; ``hash_ids`` kept in ``meta``."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from ...model.limits import INT_MAX, MAX_REQUEST_TOKENS, BoundError, depth_within
from ._common import Converter, ConvertOptions, ConvertReport, Lines, Row, RowError, bad


def read(lines: Lines, name: str, options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    for lineno, raw, _ in lines:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            yield bad(lineno, f"not valid JSON: {e}")
            continue
        if type(obj) is not dict:
            yield bad(lineno, "each line must be a JSON object")
            continue
        try:
            ts = obj.get("timestamp")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts <= INT_MAX:
                raise RowError(f"timestamp must be a number of milliseconds >= 0, not {ts!r}")
            p = obj.get("input_length")
            o = obj.get("output_length")
            if type(p) is not int or not 1 <= p <= MAX_REQUEST_TOKENS:
                raise RowError(
                    f"input_length must be an integer from 1 to {MAX_REQUEST_TOKENS:,}, not {p!r}"
                )
            if type(o) is not int or not 1 <= o <= MAX_REQUEST_TOKENS:
                raise RowError(
                    f"output_length must be an integer from 1 to {MAX_REQUEST_TOKENS:,}, not {o!r}"
                )
            meta = {"hash_ids": obj["hash_ids"]} if "hash_ids" in obj else None
            if meta is not None:
                try:
                    depth_within(meta, "hash_ids")
                except BoundError as e:
                    raise RowError(str(e)) from None
            yield Row(lineno, ts / 1000.0, p, o, meta)
        except RowError as e:
            yield bad(lineno, str(e))


def detect(first: bytes) -> bool:
    if not first.strip().startswith(b"{"):
        return False
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and {"timestamp", "input_length", "output_length"} <= obj.keys()


CONVERTER = Converter(
    "mooncake", detect=detect, read=read, quirks="ms timestamps; hash_ids kept in meta"
)
