"""The consoles views print to: data on stdout, everything else on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

import orjson
from rich.console import Console


class PipeClosed(BaseException):
    """The reader of stdout went away (``| head``): stop quietly."""


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


def show(
    fmt: str,
    data: Any,
    view: Callable[[Any], Any],
    as_json: Callable[[Any], Any] | None = None,
) -> None:
    """What a command found, on stdout: JSON (``fmt`` json; ``as_json`` shapes it) or a
    rich view for people. The one json-or-table branch of every command."""
    if fmt == "json":
        shaped = as_json(data) if as_json is not None else data
        sys.stdout.buffer.write(orjson.dumps(shaped, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        data_console().print(view(data))
