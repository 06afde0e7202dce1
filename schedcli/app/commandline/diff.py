"""``schedcli diff``: its own options and its call (app/commands/diff.py)."""

from typing import Annotated

import typer

from .. import options as o

InputsOption = Annotated[
    list[str],
    typer.Argument(
        metavar="INPUT...", help="One trace (replayed under A and B), or two dumps to compare."
    ),
]

APolicyOption = Annotated[
    str | None,
    typer.Option("--a", metavar="POLICY", help="Policy of side A (default: the trace header's)."),
]

BPolicyOption = Annotated[
    str | None,
    typer.Option("--b", metavar="POLICY", help="Policy of side B (default: the trace header's)."),
]

AParamOption = Annotated[
    list[str] | None,
    typer.Option("--a-param", metavar="KEY=VALUE", help="Side A parameter KEY=VALUE."),
]


def diff(
    inputs: InputsOption,
    a_policy: APolicyOption = None,
    b_policy: BPolicyOption = None,
    a_param: AParamOption = None,
    b_param: o.BParamOption = None,
    drain: o.DrainOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Find where two schedules part ways: one trace under two configurations, or two dumps.

    Decisions are compared (batches, accepted or rejected, what a cancel dropped, the end's
    counts); a rejection's reason is shown beside them, not compared.

    Exit codes: 0 identical; 1 different; 2 bad input or usage; 3 a policy broke the contract.
    """
    from ...engine.diff import Side
    from ..commands.diff import run_diff

    a = Side(a_policy, dict(o.parse_params(a_param)))
    b = Side(b_policy, dict(o.parse_params(b_param)))
    if not run_diff(inputs, a, b, drain=drain, allow_incomplete=allow_incomplete, fmt=fmt):
        raise typer.Exit(1)
