"""``schedcli completion``: tab completion for bash, zsh, fish or PowerShell (typer's
machinery, whose private modules the typer pin in pyproject.toml holds steady).

The script calls ``schedcli`` back with ``_SCHEDCLI_COMPLETE`` set; ``entry.main`` then
loads typer's completion (not at other starts: 5 ms of each command's start-up).
"""

from __future__ import annotations

import sys

COMPLETE_VAR = "_SCHEDCLI_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell")


def completion_command(shell: str, install: bool) -> None:
    """The completion script on stdout, or with ``install`` added to the shell's start-up
    file (said on stderr)."""
    from typer._completion_shared import get_completion_script
    from typer._completion_shared import install as install_script

    if install:
        shell, path = install_script(shell=shell, prog_name="schedcli", complete_var=COMPLETE_VAR)
        print(f"completion for {shell} installed in {path}; open a new shell", file=sys.stderr)
        return
    script = get_completion_script(prog_name="schedcli", complete_var=COMPLETE_VAR, shell=shell)
    sys.stdout.write(script.rstrip("\n") + "\n")


def init_if_completing() -> None:
    """When a shell asks for completions, typer's completion classes are registered."""
    import os

    if COMPLETE_VAR in os.environ:
        from typer._completion_classes import completion_init

        completion_init()
