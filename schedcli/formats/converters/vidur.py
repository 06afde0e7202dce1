"""Vidur's processed traces (``splitwise_*.csv``): the Azure rows, arrivals in seconds."""

from __future__ import annotations

from collections.abc import Iterator

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
    def make(f: dict[str, str]) -> tuple[float, int, int, None]:
        return (
            float_field(f["t"], "arrived_at"),
            int_field(f["p"], "num_prefill_tokens", 1),
            int_field(f["o"], "num_decode_tokens", 1),
            None,
        )

    columns = {"t": "arrived_at", "p": "num_prefill_tokens", "o": "num_decode_tokens"}
    return read_csv(lines, name, columns, make)


COLUMNS = {"arrived_at", "num_prefill_tokens", "num_decode_tokens"}
CONVERTER = Converter(
    "vidur",
    detect=lambda first: csv_header(first) >= COLUMNS,
    read=read,
    quirks="the Azure rows, rebased",
)
