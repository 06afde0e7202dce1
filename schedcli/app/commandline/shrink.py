"""``schedcli shrink``: its own options and its call (app/commands/shrink.py)."""

from typing import Annotated

import typer

from .. import options as o
from ..console import stderr_console

ShrinkTraceOption = Annotated[
    str, typer.Argument(metavar="TRACE", help="A failing trace (.gz ok).")
]

UntilOption = Annotated[
    str,
    typer.Option(
        "--until",
        metavar="HOW",
        help="check | contract | diff:POLICY | cmd:'SHELL' ({} or $TRACE is the file).",
    ),
]

ShrinkOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="The small trace (- stdout).")
]

MaxTimeOption = Annotated[
    float | None,
    typer.Option(
        "--max-time",
        metavar="SECONDS",
        help="Stop after this long and write the smallest failing trace found so far.",
    ),
]

KeepExpectsOption = Annotated[
    bool,
    typer.Option(
        "--keep-expects",
        help="Keep every kept get_work's expect (default: only the failing batch's).",
    ),
]


def shrink(
    trace: ShrinkTraceOption,
    until: UntilOption,
    output: ShrinkOutputOption = "-",
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    max_time: MaxTimeOption = None,
    keep_expects: KeepExpectsOption = False,
    drain: o.DrainOption = False,
    b_param: o.BParamOption = None,
) -> None:
    """Reduce a failing trace to a small one that still fails the same way: --check still
    finds the same tids missing or extra, the policy still breaks the contract with the same
    message, two policies still part ways at the same tids, or a command still exits with
    the same code (--drain: each candidate replayed as replay --drain does, so a stall at
    the end shows; --b-param: diff:POLICY's parameters, as diff's). Deterministic; prints
    the sizes and the time taken. On Ctrl-C or at --max-time it writes the smallest
    failing trace found so far.
    """
    from ..commands.shrink import shrink_to_file

    shrink_to_file(
        trace,
        until,
        policy,
        o.parse_params(param),
        output,
        max_time,
        keep_expects,
        stderr_console(),
        drain,
        o.parse_params(b_param),
    )
