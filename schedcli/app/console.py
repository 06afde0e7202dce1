"""The consoles views print to: data on stdout, everything else on stderr."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from rich.console import Console

# rich loads when a console is first made: a command that prints no table (a dump,
# --help, --version) does without it.


class PipeClosed(BaseException):
    """The reader of stdout went away (``| head``): stop quietly."""


@functools.cache
def _data_console_class() -> type[Console]:
    from rich.console import Console

    class DataConsole(Console):
        """A console for stdout whose reader may go away (``| head``).

        rich turns a broken pipe into exit 1; here it stays a BrokenPipeError, which the
        command line ends quietly with exit 0, as for every other output format.
        """

        fitted = False  # no terminal to fit: each print as wide as its content, unwrapped

        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

        def print(self, *objects: Any, **kwargs: Any) -> None:
            if self.fitted and objects:
                self.width = FITTED_MAX  # measured against room enough, then fitted
                needed = max(self.measure(o).maximum for o in objects)
                self.width = max(FITTED_MIN, min(needed, FITTED_MAX))
            super().print(*objects, **kwargs)

    return DataConsole


# A table piped to a file or another program is never cut to 80 columns: each is as wide
# as its cells need unwrapped, a row a line (COLUMNS, when set, still decides).
FITTED_MIN, FITTED_MAX = 80, 2000


def data_console(file: IO[str] | None = None, width: int | None = None) -> Console:
    import os

    console = _data_console_class()(file=file, highlight=False, width=width)
    target = file if file is not None else sys.stdout
    if width is None and "COLUMNS" not in os.environ and not target.isatty():
        console.fitted = True  # type: ignore[attr-defined]
    return console


def stderr_console() -> Console:
    """The one console for messages (stderr), made when first asked for."""
    global _stderr
    if _stderr is None:
        from rich.console import Console

        _stderr = Console(stderr=True, highlight=False, soft_wrap=False)
    return _stderr


_stderr: Console | None = None


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
