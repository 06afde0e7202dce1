"""``schedcli completion``: its own options and its call (app/completion.py)."""

from enum import StrEnum
from typing import Annotated

import typer

Shell = StrEnum("Shell", [(s, s) for s in ("bash", "zsh", "fish", "powershell")])  # type: ignore[misc]

ShellArgument = Annotated[
    Shell,
    typer.Argument(metavar="SHELL", help="bash, zsh, fish or powershell."),
]

InstallOption = Annotated[
    bool,
    typer.Option("--install", help="Add it to the shell's start-up file instead of printing it."),
]


def completion(shell: ShellArgument, install: InstallOption = False) -> None:
    """Tab completion for your shell: print its script, or --install it
    (eval "$(schedcli completion bash)" in ~/.bashrc does the same)."""
    from ..completion import completion_command

    completion_command(str(shell), install)
