"""``schedcli stats``: its own options and its call (app/commands/stats.py)."""

from typing import Annotated

import typer

from .. import options as o

InputPathOption = Annotated[str, typer.Argument(metavar="INPUT", help="An event trace or a dump.")]

StatsPolicyOption = Annotated[
    str | None,
    typer.Option("--policy", "-p", metavar="NAME", help="Traces: policy (default: the header's)."),
]

FindingsOption = Annotated[
    bool,
    typer.Option(
        "--findings",
        help="Traces: count the findings by kind (docs/findings.md), at findings' default "
        "bounds, in the same replay; the policy explains every step, which costs several "
        "times the replay.",
    ),
]


def stats(
    input_path: InputPathOption,
    policy: StatsPolicyOption = None,
    param: o.ParamOption = None,
    drain: o.DrainOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
    findings: FindingsOption = False,
) -> None:
    """Step-based metrics of a recorded trace (replayed) or of a dump: waits in steps,
    utilisation, fairness, rejections and cancellations; at the request level, each
    preemption's victim and the tokens recomputed after it.
    """
    from ..commands.stats import stats_command

    params = o.parse_params(param)
    stats_command(
        input_path,
        policy,
        params,
        drain=drain,
        allow_incomplete=allow_incomplete,
        fmt=fmt,
        findings=findings,
    )
