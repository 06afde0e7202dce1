"""Azure LLM inference traces (AzurePublicDataset, ``AzureLLMInferenceTrace_{code,conv}.csv``):
CRLF lines, TIMESTAMP with 7-digit fractions, rebased to the first request exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._common import (
    Converter,
    ConvertOptions,
    ConvertReport,
    Lines,
    Row,
    RowError,
    csv_header,
    int_field,
    read_csv,
)


def _ticks(stamp: str) -> int:
    """'2023-11-16 18:15:46.6805900' as 100 ns ticks since an arbitrary epoch (exact)."""
    try:
        date, clock = stamp.strip().split(" ")
        y, mo, d = (int(x) for x in date.split("-"))
        hms, _, frac = clock.partition(".")
        h, mi, s = (int(x) for x in hms.split(":"))
    except ValueError:
        raise RowError(
            f"TIMESTAMP is not 'YYYY-MM-DD HH:MM:SS.fffffff': {stamp.strip()!r}"
        ) from None
    if not frac.isdigit() and frac:
        raise RowError(f"TIMESTAMP fraction is not digits: {stamp.strip()!r}")
    if not (1 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        raise RowError(f"TIMESTAMP is not a real date and time: {stamp.strip()!r}")
    days = _days_from_civil(y, mo, d)
    ticks = int((frac + "0000000")[:7]) if frac else 0
    return ((days * 24 + h) * 60 + mi) * 60 * 10_000_000 + s * 10_000_000 + ticks


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def read(lines: Lines, name: str, options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    origin: list[int] = []  # the first request's ticks: rebasing in integers stays exact

    def make(f: dict[str, str]) -> tuple[float, int, int, dict[str, Any]]:
        ticks = _ticks(f["t"])
        if not origin:
            origin.append(ticks)
        return (
            (ticks - origin[0]) / 10_000_000,
            int_field(f["p"], "ContextTokens", 1),
            int_field(f["o"], "GeneratedTokens", 1),
            {"timestamp": f["t"].strip()},
        )

    columns = {"t": "TIMESTAMP", "p": "ContextTokens", "o": "GeneratedTokens"}
    return read_csv(lines, name, columns, make)


COLUMNS = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
CONVERTER = Converter(
    "azure",
    detect=lambda first: csv_header(first) >= COLUMNS,
    read=read,
    quirks="CRLF, 7-digit fractions; rebased to the first request",
)
