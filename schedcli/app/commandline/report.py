"""``schedcli report``: its own options and its call (app/commands/report.py)."""

from typing import Annotated

import typer

from .. import options as o

ReportInputPathOption = Annotated[
    str, typer.Argument(metavar="INPUT", help="A trace, a dump or a workload.")
]

ReportOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="The HTML file to write.")
]

ReportPolicyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        metavar="NAME",
        help="A configuration to show: NAME or NAME,KEY=VALUE,... (repeat to compare).",
    ),
]

ReportFindingsOption = Annotated[
    bool,
    typer.Option(
        "--findings",
        help="Traces: mark each run's findings on its timeline and list them "
        "(docs/findings.md); the policy explains every step, which costs several times "
        "the replay.",
    ),
]


def report(
    input_path: ReportInputPathOption,
    output: ReportOutputOption,
    policy: ReportPolicyOption = None,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
    allow_incomplete: o.AllowIncompleteOption = False,
    findings: ReportFindingsOption = False,
) -> None:
    """Write one self-contained HTML report (works offline): tokens per step against the
    budget, queue depth, wait per session and, for workloads, TTFT and TPOT per policy;
    for request-level runs, the preemptions and the tokens they recompute.
    """
    from ...engine.cost import CostModel
    from ..commands.report import report_command

    cost = CostModel(cost_a, cost_b, cost_c)
    report_command(
        input_path,
        output,
        policy or [],
        cost,
        allow_incomplete=allow_incomplete,
        findings=findings,
    )
