"""The converter table: each public request-trace format is one ``Converter`` record in a
module of its own (name, detector, reader, the options it accepts, its quirks). ``convert``,
``auto`` detection and the command line's FORMAT choices all derive from ``NAMES``.

A new format: a module here defining ``CONVERTER``, and its name in ``NAMES``
(docs/architecture.md, "Where to add").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...model.errors import InputError
from ...model.limits import MAX_REQUEST_TOKENS

Lines = Iterator[tuple[int, bytes, bool]]


class RowError(Exception):
    """A bad row; the pipeline adds the file and line."""


@dataclass
class Row:
    line: int
    arrival: float | None  # seconds, source clock; None for length-only sources
    prompt: int
    output: int
    meta: dict[str, Any] | None = None
    priority: int = 0
    cancel_after: float | None = None  # seconds after arrival the client gave up


@dataclass
class ConvertOptions:
    limit: int | None = None
    start: float = 0.0
    duration: float | None = None
    time_scale: float = 1.0
    seed: int = 0
    rate: float | None = None
    cv: float | None = None
    skip_bad: bool = False
    keep_failed: bool = False


@dataclass
class ConvertReport:
    format: str
    written: int = 0
    skipped_bad: int = 0
    dropped_failed: int = 0
    before_window: int = 0  # requests that arrived before --start
    window_end_line: int | None = None  # where reading stopped: the first row past the window
    limit_line: int | None = None  # where reading stopped: --limit reached
    prompt_tokens: int = 0
    output_tokens: int = 0
    first_bad: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Converter:
    """One input format."""

    name: str
    detect: Callable[[bytes], bool]  # does this first line (a CSV header, a JSON object) say it is
    read: Callable[[Lines, str, ConvertOptions, ConvertReport], Iterator[Row]]
    options: frozenset[str] = frozenset()  # format-specific options it accepts (rate, cv, ...)
    quirks: str = ""  # what the docs' table says of it


def bad(lineno: int, message: str) -> Row:
    return Row(lineno, None, 0, 0, {"__error__": message})


def read_csv(
    lines: Iterator[tuple[int, bytes, bool]],
    name: str,
    columns: dict[str, str],
    make: Callable[[dict[str, str]], tuple[float | None, int, int, dict[str, Any] | None]],
) -> Iterator[Row]:
    """Rows of a CSV source whose header names ``columns``; ``make`` reads one row."""
    rows = csv_rows(lines, name)
    first = next(rows, None)
    if first is None:
        return
    cols = columns_of(first[1], columns, name, first[0])
    width = len(first[1])
    for lineno, fields in rows:
        if len(fields) != width:
            yield bad(lineno, f"expected {width} columns, as the header has, got {len(fields)}")
            continue
        try:
            yield Row(lineno, *make({key: fields[i] for key, i in cols.items()}))
        except RowError as e:
            yield bad(lineno, str(e))


def _decimal(value: str, name: str) -> str:
    """A field's text, if it is a plain ASCII decimal (digits, one optional point and
    digits after it): no sign, exponent, digit separator or other script's digits."""
    text = value.strip()
    whole, point, fraction = text.partition(".")
    digits = whole.isascii() and whole.isdigit()
    if not digits or (point and not (fraction.isascii() and fraction.isdigit())):
        try:
            float(text)
        except ValueError:
            raise RowError(f"{name} is not a number: {text!r}") from None
        raise RowError(f"{name} is not a plain decimal number (ASCII digits): {text!r}")
    return text


def int_field(value: str, name: str, minimum: int = 0) -> int:
    text = _decimal(value, name)
    whole, _, fraction = text.partition(".")
    if fraction.strip("0"):
        raise RowError(f"{name} is not a whole number: {text!r}")
    n = int(whole)
    if n < minimum:
        raise RowError(f"{name} must be >= {minimum}, not {n}")
    if n > MAX_REQUEST_TOKENS:
        raise RowError(f"{name} must be at most {MAX_REQUEST_TOKENS:,} tokens, not {n}")
    return n


def float_field(value: str, name: str) -> float:
    f = float(_decimal(value, name))
    if not math.isfinite(f):
        raise RowError(f"{name} must be a finite number >= 0, not {value.strip()}")
    return f


def csv_rows(
    lines: Iterator[tuple[int, bytes, bool]], name: str
) -> Iterator[tuple[int, list[str]]]:
    for lineno, raw, _ in lines:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(name, lineno, f"invalid UTF-8 at byte {e.start}") from None
        yield lineno, text.split(",")


def columns_of(header: list[str], wanted: dict[str, str], name: str, lineno: int) -> dict[str, int]:
    index = {h.strip(): i for i, h in enumerate(header)}
    found = {}
    for key, column in wanted.items():
        if column not in index:
            raise InputError(name, lineno, f"no {column!r} column in the header")
        found[key] = index[column]
    return found


def csv_header(first_line: bytes) -> set[str]:
    """The column names of a CSV header line (empty for a JSON line)."""
    text = first_line.decode("utf-8", errors="replace").strip()
    if text.startswith("{"):
        return set()
    return {c.strip() for c in text.split(",")}
