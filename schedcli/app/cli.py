"""The typer app, assembled: each command is a module of ``commandline/`` (its own options
and its one library call, as a pytest plugin owns its options and hooks), registered here
in the order ``--help`` lists them; a run of one command loads that command's module
only. ``entry.py`` runs them and maps every exception to its exit code, in one place.
"""

import copy
import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from .. import CORE
from . import commandline
from . import options as o
from .console import PipeClosed

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 a check found a difference; 2 bad input or usage; "
    "3 a policy broke the Scheduler contract (a policy bug); 4 an internal error of schedcli; "
    "130 interrupted; 143 terminated."
)

_app = typer.Typer(
    name="schedcli",
    help="Replay LLM-serving scheduler traffic through batching policies.\n\n"
    + EXIT_CODES_HELP
    + "\n\nAny command takes --executorch PATH: the ExecuTorch checkout that "
    "-p cxx:decode-first builds (docs/cxx.md); and --stall-steps N: the steps in a row "
    "without a batch, with work queued, after which a policy not proven stuck is stopped "
    "(default 1000; docs/policies.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# The commands, each the module of commandline/ that declares it, in --help's order.
COMMANDS = (
    "replay",
    "validate",
    "includes",
    "policies",
    "diff",
    "convert",
    "simulate",
    "explain",
    "findings",
    "debug",
    "shrink",
    "sweep",
    "fit",
    "stats",
    "report",
    "check",
    "conformance",
    "completion",
)

F = TypeVar("F", bound=Callable[..., Any])


def command(fn: F, into: typer.Typer | None = None) -> F:
    """Registers a command (its name: the function's), whose numbers are checked against
    their bounds and paths against their roles before it runs, and whose broken pipe ends
    the run quietly, not as an error; into the whole app unless told ``into``."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        o.check_numbers(kwargs)
        o.check_paths(kwargs)
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed() from None

    # The docstring's first paragraph, whole: the command list never cuts it short.
    summary = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
    (_whole() if into is None else into).command(short_help=summary)(guarded)
    return fn


def _declared(name: str) -> Callable[..., Any]:
    """The function of the command ``name`` (one of ``COMMANDS``), from its own module,
    imported by name so that a run of one command loads no other command's module."""
    module = importlib.import_module(f"{commandline.__name__}.{name}")
    fn: Callable[..., Any] = getattr(module, name)
    return fn


_assembled = False


def _whole() -> typer.Typer:
    """The app with every command, assembled at its first use."""
    global _assembled
    if not _assembled:
        _assembled = True
        for name in COMMANDS:
            command(_declared(name), _app)
    return _app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the whole app, as ``cli.app``
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs ``args``: when they start with a command's name, an app of that
    one command (typer builds every command it holds from the function's signature at
    each start, 25 ms for all of them); else the whole app (its help, its own options, a
    name it does not know). Either way a command parses and answers the same."""
    if args and args[0] in COMMANDS:
        one = copy.copy(_app)
        one.registered_commands = []
        command(_declared(args[0]), one)
        return one
    return _whole()


def _command_name(fn: Callable[..., Any]) -> str:
    from typer.main import get_command_name

    return get_command_name(fn.__name__)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"schedcli {__version__} ({CORE})")
        raise typer.Exit()


@_app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Replay LLM-serving scheduler traffic through batching policies."""
