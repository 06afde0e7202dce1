"""``schedcli replay``: its own options and its call (app/commands/replaying.py)."""

from typing import Annotated

import typer

from ...streams.source import DEFAULT_MAX_LINE_BYTES
from .. import options as o
from ..console import stderr_console
from ..parsing import StepRange, parse_id_option
from ..views.outputs import OutputFormat
from ..views.progress import trace_progress

FmtOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        "-f",
        metavar="table|jsonl",
        help="table (default on a terminal) or jsonl (default otherwise).",
    ),
]

OutputOption = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE.")
]

StepsOption = Annotated[
    str | None,
    typer.Option("--steps", metavar="A:B", help="Show only steps A:B (half-open), A: or :B."),
]

SessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        metavar="SID",
        help="Show only this session (7 is an int, '\"7\"' a string).",
    ),
]

CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Compare every batch with the trace's expect (and a recording's submit "
        "outcomes); exit 1 if one differs.",
    ),
]

RequireAllOption = Annotated[
    bool,
    typer.Option("--require-all", help="With --check: fail if any batch records no expect."),
]

UpdateGoldenOption = Annotated[
    bool, typer.Option("--update-golden", help="Rewrite the --golden file (atomically).")
]

FollowOption = Annotated[
    bool,
    typer.Option(
        "--follow",
        help="Keep reading FILE as it grows (like tail -f) until Ctrl-C.",
    ),
]


def replay(
    trace: o.TraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    fmt: FmtOption = None,
    output: OutputOption = None,
    steps: StepsOption = None,
    session: SessionOption = None,
    drain: o.DrainOption = False,
    check: CheckOption = False,
    require_all: RequireAllOption = False,
    golden: o.GoldenOption = None,
    update_golden: UpdateGoldenOption = False,
    max_line_bytes: o.MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    perfetto: o.PerfettoOption = None,
    follow: FollowOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
) -> None:
    """Replay a trace through a policy and show or dump every batch.

    Exit codes: 0 ok; 1 --check or --golden found a difference; 2 bad input or usage;
    3 the policy broke the Scheduler contract; 130 interrupted; 143 terminated.
    """
    from ..commands.replaying import ReplayRequest, run_replay

    request = ReplayRequest(
        trace,
        policy=policy,
        params=o.parse_params(param),
        fmt=fmt,
        output=output,
        steps=StepRange.parse(steps) if steps is not None else None,
        session=parse_id_option(session) if session is not None else None,
        drain=drain,
        check=check,
        require_all=require_all,
        golden=golden,
        update_golden=update_golden,
        max_line_bytes=max_line_bytes,
        perfetto=perfetto,
        follow=follow,
        allow_incomplete=allow_incomplete,
    )
    quiet = request.view_format() == "table" and output is None
    run_replay(request, stderr_console, trace_progress("replaying", trace, not quiet))
