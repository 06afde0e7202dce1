"""``schedcli explain``: its own options and its call (app/commands/explain.py)."""

from typing import Annotated

import typer

from .. import options as o

StepOption = Annotated[
    int | None, typer.Option("--step", metavar="N", help="The queue and batch of step N.")
]

TaskOption = Annotated[
    str | None, typer.Option("--task", metavar="TID", help="A task's life (7 or '\"7\"').")
]

ExplainSessionOption = Annotated[
    str | None, typer.Option("--session", metavar="SID", help="Every task of a session.")
]


AsTraceOption = Annotated[
    bool,
    typer.Option(
        "--as-trace",
        help="With --step: write the step from its state as a trace, with its expect.",
    ),
]

ExplainOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="--as-trace's file (- stdout).")
]


def explain(
    trace: o.ExplainTraceOption,
    step: StepOption = None,
    task: TaskOption = None,
    session: ExplainSessionOption = None,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
    as_trace: AsTraceOption = False,
    output: ExplainOutputOption = "-",
) -> None:
    """Why the scheduler did that: the queue get_work saw at a step and why each task was
    left behind, or the life of a task or a session (submitted, passed over, dispatched).
    --step N --as-trace writes step N from the policy's state as a standalone trace whose
    get_work expects the batch given there: a regression test (replay --check passes).
    """
    from ..commands.explain import explain_command

    params = o.parse_params(param)
    explain_command(
        trace,
        step=step,
        task=task,
        session=session,
        policy=policy,
        params=params,
        fmt=fmt,
        as_trace=as_trace,
        output=output,
    )
