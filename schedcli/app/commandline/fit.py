"""``schedcli fit``: its own options and its call (app/commands/fitting.py)."""

from typing import Annotated

import typer

from .. import options as o

RecordingsOption = Annotated[
    list[str],
    typer.Argument(metavar="RECORDING...", help="Clocked recordings (clock=True; .gz ok)."),
]

FitOutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write the cost model as JSON."),
]


def fit(
    recordings: RecordingsOption,
    output: FitOutputOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Fit simulate's step-time model to the time between get_work calls of recordings.

    step_seconds = a + b * batch_tokens + c * decodes (+ d * context_tokens where every
    task recorded its position). Every fifth step is held out to measure the fit (MAPE,
    R²); idle gaps are reported as outliers, not fitted. simulate --cost FILE uses it.
    """
    from ..commands.fitting import fit_command

    fit_command(recordings, output, fmt)
