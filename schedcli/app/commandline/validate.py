"""``schedcli validate``: its own options and its call (app/commands/validate.py)."""

from typing import Annotated

import typer

from ...streams.source import DEFAULT_MAX_LINE_BYTES
from .. import options as o

MaxErrorsOption = Annotated[
    int, typer.Option("--max-errors", metavar="N", help="Show at most N problems.")
]


def validate(
    trace: o.TraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    max_line_bytes: o.MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    max_errors: MaxErrorsOption = 20,
    allow_incomplete: o.AllowIncompleteOption = False,
) -> None:
    """Check a trace against format v1 and report its problems, not only the first.

    Exit codes: 0 valid; 2 problems found (each as FILE:LINE: message on stderr).
    """
    from ..commands.validate import check_trace

    valid = check_trace(
        trace,
        max_line_bytes=max_line_bytes,
        max_errors=max_errors,
        policy=policy,
        params=o.parse_params(param),
        allow_incomplete=allow_incomplete,
    )
    if not valid:
        raise typer.Exit(2)
