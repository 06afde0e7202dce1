"""The consoles views print to: data on stdout, everything else on stderr."""

from __future__ import annotations

from typing import IO

from rich.console import Console


class DataConsole(Console):
    """A console for stdout whose reader may go away (``| head``).

    rich turns a broken pipe into exit 1; here it stays a BrokenPipeError, which the
    command line ends quietly with exit 0, as for every other output format.
    """

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def data_console(file: IO[str] | None = None, width: int | None = None) -> Console:
    return DataConsole(file=file, highlight=False, width=width)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=False)
