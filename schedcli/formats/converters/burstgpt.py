"""BurstGPT (``BurstGPT_*.csv``): a failed request has 0 response tokens; it is dropped and
counted, or kept with ``--keep-failed`` (as 1 token, ``meta.failed``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._common import (
    Converter,
    ConvertOptions,
    ConvertReport,
    Lines,
    Row,
    csv_header,
    float_field,
    int_field,
    read_csv,
)


def read(lines: Lines, name: str, options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    def make(f: dict[str, str]) -> tuple[float, int, int, dict[str, Any]]:
        return (
            float_field(f["t"], "Timestamp"),
            int_field(f["p"], "Request tokens", 1),
            int_field(f["o"], "Response tokens", 0),  # 0: a failed request
            {"model": f["m"].strip(), "log_type": f["k"].strip()},
        )

    columns = {
        "t": "Timestamp",
        "m": "Model",
        "p": "Request tokens",
        "o": "Response tokens",
        "k": "Log Type",
    }
    return _failed(read_csv(lines, name, columns, make), options, report)


def _failed(rows: Iterator[Row], options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    for row in rows:
        if row.output == 0 and not (row.meta and "__error__" in row.meta):
            if not options.keep_failed:
                report.dropped_failed += 1
                continue
            row.output = 1
            row.meta = {**(row.meta or {}), "failed": True}
        yield row


COLUMNS = {"Timestamp", "Request tokens", "Response tokens", "Log Type"}
CONVERTER = Converter(
    "burstgpt",
    detect=lambda first: csv_header(first) >= COLUMNS,
    read=read,
    options=frozenset({"keep_failed"}),
    quirks="failed requests (0 tokens) dropped and counted, or --keep-failed",
)
