"""``schedcli convert``: its own options and its call (app/commands/converting.py)."""

from enum import StrEnum
from typing import Annotated

import typer

from ...formats.converters import NAMES as CONVERTER_NAMES

# FORMAT: auto, or a name from the converter table (one line adds a format).
ConvertFormat = StrEnum(  # type: ignore[misc]
    "ConvertFormat", [(name, name) for name in ("auto", *CONVERTER_NAMES)]
)

ConvertFmtOption = Annotated[
    ConvertFormat,
    typer.Argument(metavar="FORMAT", help="Source format, or auto to recognise it."),
]

SrcOption = Annotated[
    str, typer.Argument(metavar="SOURCE", help="Source file (.gz ok), or - for stdin.")
]

ConvertOutputOption = Annotated[
    str,
    typer.Option("--output", "-o", metavar="FILE", help="Workload file to write (- for stdout)."),
]

LimitOption = Annotated[
    int | None, typer.Option("--limit", metavar="N", help="Keep the first N requests.")
]

StartOption = Annotated[
    float,
    typer.Option(
        "--start", metavar="SECONDS", help="Window start, seconds after the first request."
    ),
]

DurationOption = Annotated[
    float | None,
    typer.Option("--duration", metavar="SECONDS", help="Window length in seconds."),
]

TimeScaleOption = Annotated[
    float,
    typer.Option(
        "--time-scale", metavar="FACTOR", help="Multiply arrival times (0.5 = twice the rate)."
    ),
]

SeedOption = Annotated[
    int, typer.Option("--seed", metavar="N", help="Seed for generated arrivals.")
]

RateOption = Annotated[
    float | None,
    typer.Option("--rate", metavar="PER_SECOND", help="lengths: requests per second (Poisson)."),
]

CvOption = Annotated[
    float | None,
    typer.Option(
        "--cv",
        metavar="CV",
        help="lengths: coefficient of variation of gaps (gamma; 1 = Poisson).",
    ),
]

SkipBadOption = Annotated[
    bool, typer.Option("--skip-bad", help="Skip and count bad rows instead of stopping.")
]

KeepFailedOption = Annotated[
    bool,
    typer.Option("--keep-failed", help="burstgpt: keep failed requests (1 token, meta.failed)."),
]


def convert(
    fmt: ConvertFmtOption,
    src: SrcOption,
    output: ConvertOutputOption = "-",
    limit: LimitOption = None,
    start: StartOption = 0.0,
    duration: DurationOption = None,
    time_scale: TimeScaleOption = 1.0,
    seed: SeedOption = 0,
    rate: RateOption = None,
    cv: CvOption = None,
    skip_bad: SkipBadOption = False,
    keep_failed: KeepFailedOption = False,
) -> None:
    """Turn a public request trace into a workload (arrival, prompt and output tokens).

    Exit codes: 0 ok; 2 bad input (FILE:LINE: message) or usage.
    """
    from ...formats.convert import ConvertOptions
    from ..commands.converting import convert_to

    options = ConvertOptions(
        limit=limit,
        start=start,
        duration=duration,
        time_scale=time_scale,
        seed=seed,
        rate=rate,
        cv=cv,
        skip_bad=skip_bad,
        keep_failed=keep_failed,
    )
    convert_to(fmt.value, src, output, options)
