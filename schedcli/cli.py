"""The command line: parse options, call library functions, map errors to exit codes."""

from __future__ import annotations

import typer

from . import __version__

app = typer.Typer(
    name="schedcli",
    help="Replay LLM-serving scheduler traffic through batching policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"schedcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Replay LLM-serving scheduler traffic through batching policies."""


def main() -> None:
    app()
