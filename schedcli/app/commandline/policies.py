"""``schedcli policies``: its own options and its call (schedcli/policies/registry.py)."""

from typing import Annotated

import typer

from .. import options as o
from ..console import show

PolicyNameArgument = Annotated[
    str | None, typer.Argument(metavar="[NAME]", help="One policy, as -p names it; default: all.")
]


def policies(
    policy: PolicyNameArgument = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """List the policies: built-ins and plugins, with parameters, defaults and rule; or
    the one NAME names, as -p takes it (vllm@PYTHON lists that interpreter's vLLM knobs).

    Exit codes: 0 ok; 2 a NAME that is no policy.
    """
    from ...catalog.registry import describe_named, describe_policies
    from ..views.render import policies_table

    show(fmt, [describe_named(policy)] if policy else describe_policies(), policies_table)
