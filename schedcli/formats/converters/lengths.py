"""Length statistics without arrivals (vidur's arXiv stats, sarathi-serve's ShareGPT stats):
arrivals are generated, Poisson at ``--rate`` or gamma with ``--cv``, seeded by ``--seed``."""

from __future__ import annotations

from collections.abc import Iterator

from ._common import (
    Converter,
    ConvertOptions,
    ConvertReport,
    Lines,
    Row,
    csv_header,
    int_field,
    read_csv,
)


def read(lines: Lines, name: str, options: ConvertOptions, report: ConvertReport) -> Iterator[Row]:
    def make(f: dict[str, str]) -> tuple[None, int, int, None]:
        return (
            None,
            int_field(f["p"], "num_prefill_tokens", 1),
            int_field(f["o"], "num_decode_tokens", 1),
            None,
        )

    columns = {"p": "num_prefill_tokens", "o": "num_decode_tokens"}
    return read_csv(lines, name, columns, make)


COLUMNS = {"num_prefill_tokens", "num_decode_tokens"}


def detect(first: bytes) -> bool:
    columns = csv_header(first)
    return columns >= COLUMNS and "arrived_at" not in columns  # that one is vidur's


CONVERTER = Converter(
    "lengths",
    detect=detect,
    read=read,
    options=frozenset({"rate", "cv"}),
    quirks="no arrivals: --rate (Poisson) or --cv (gamma), --seed",
)
