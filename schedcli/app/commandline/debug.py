"""``schedcli debug``: its own options and its call (app/commands/debug.py)."""

from typing import Annotated

import typer

from .. import options as o

DebugCheckOption = Annotated[
    bool,
    typer.Option("--check", help="Mark every step whose batch differs from the trace's expect."),
]

AgainstOption = Annotated[
    str | None,
    typer.Option(
        "--against", metavar="POLICY", help="Replay beside a second policy; mark where they part."
    ),
]

AgainstParamOption = Annotated[
    list[str] | None,
    typer.Option("--against-param", metavar="KEY=VALUE", help="A parameter of --against's policy."),
]

NoColorOption = Annotated[
    bool, typer.Option("--no-color", help="No colour (as NO_COLOR=1); marks stay readable.")
]

EveryOption = Annotated[
    int,
    typer.Option(
        "--checkpoint-every",
        metavar="STEPS",
        help="Steps between checkpoints at first (they thin out past 32).",
    ),
]


def debug(
    trace: o.ExplainTraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    check: DebugCheckOption = False,
    golden: o.GoldenOption = None,
    against: AgainstOption = None,
    against_param: AgainstParamOption = None,
    allow_incomplete: o.AllowIncompleteOption = False,
    no_color: NoColorOption = False,
    checkpoint_every: EveryOption = 1000,
) -> None:
    """Step through a replay, forwards and backwards: the queue and every reason at each
    step, breakpoints, and where it parts from --check, --golden or --against.

    Exit codes (after quitting): 0 ok; 1 a step or another record differs (as replay --check,
    replay --golden, diff); 2 bad input or usage; 3 the policy broke the contract.
    """
    from ...engine.travel import Compare
    from ..commands.debug import DebugRequest, debug_command

    compare = Compare(check, golden, against, dict(o.parse_params(against_param)))
    req = DebugRequest(
        trace, policy, o.parse_params(param), compare, allow_incomplete, no_color, checkpoint_every
    )
    code = debug_command(req)
    if code:
        raise typer.Exit(code)
