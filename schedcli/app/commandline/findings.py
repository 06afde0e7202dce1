"""``schedcli findings``: its own options and its call (app/commands/findings.py)."""

from typing import Annotated

import typer

from .. import options as o

FindingsTraceOption = Annotated[
    str, typer.Argument(metavar="TRACE", help="A trace, of either level ('-': stdin).")
]

FailOnOption = Annotated[
    str | None,
    typer.Option(
        "--fail-on",
        metavar="KIND[,KIND]",
        help="Exit 1 when a finding of one of these kinds was found (for CI).",
    ),
]

StarveAfterOption = Annotated[
    int,
    typer.Option(
        "--starve-after",
        metavar="K",
        help="starvation: left out of more than K steps while newer work ran.",
    ),
]

HolUnusedOption = Annotated[
    float,
    typer.Option(
        "--hol-unused",
        metavar="PCT",
        help="hol_blocking: at least PCT% of the budget left unused.",
    ),
]

ThrashAfterOption = Annotated[
    int,
    typer.Option(
        "--thrash-after", metavar="N", help="preemption_thrash: preempted at least N times."
    ),
]

# findings reads a trace only (a dump is refused as one), so of the shared option's two
# cases only the partial trace is said.
AllowPartialOption = Annotated[
    bool,
    typer.Option(
        "--allow-incomplete",
        help="Read a trace marked partial anyway: the findings of the steps it holds.",
    ),
]

GapAfterOption = Annotated[
    int,
    typer.Option(
        "--gap-after",
        metavar="STEPS",
        help="decode_gap: more than STEPS steps without a token between two tokens.",
    ),
]


def findings(
    trace: FindingsTraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    fail_on: FailOnOption = None,
    starve_after: StarveAfterOption = 16,
    hol_unused: HolUnusedOption = 25.0,
    thrash_after: ThrashAfterOption = 3,
    gap_after: GapAfterOption = 8,
    allow_incomplete: AllowPartialOption = False,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Anomalies of a replay, each at the step that shows it: priority inversion,
    starvation, head-of-line blocking, preemption thrash, a running request skipped, a
    long gap between tokens (docs/findings.md). Exit 0: findings are observations.
    """
    from ..commands.findings import findings_command

    params = o.parse_params(param)
    if findings_command(
        trace,
        policy=policy,
        params=params,
        fail_on=fail_on,
        thresholds=(starve_after, hol_unused, thrash_after, gap_after),
        allow_incomplete=allow_incomplete,
        fmt=fmt,
    ):
        raise typer.Exit(1)
