"""``schedcli includes``: its own options and its call (schedcli/record.py)."""

import typer


def includes() -> None:
    """Print the compiler flag that finds the C++ recorder's header,
    schedcli/recording_scheduler.h, shipped in the package (as pybind11 --includes does).

    Exit codes: 0 ok.
    """
    from ...record import include_dir

    typer.echo(f"-I{include_dir()}")
