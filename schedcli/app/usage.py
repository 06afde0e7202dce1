"""Command-line mistakes, told in our words (the option parser's own are a validator's)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from ..model.errors import InputError, Option, Said, SchedcliError, WrongKind

# Which commands take each kind of file, for the message when a command is given another.
TAKERS = {
    "trace": "replay, validate, stats, diff, report, check take it",
    "dump": "stats, diff, report take it; a golden is one too",
    "workload": "simulate and report take it",
    "csv": "convert turns it into a workload",
    "sweep": "report draws them",
}


# The options the engine names whose flag is not the option's name spelled ``--name``.
FLAGS = {"policy": "-p"}


def flag_text(option: Option) -> str:
    """An option an error names, as the command line spells it (with the value shown)."""
    flag = FLAGS.get(option.name) or "--" + option.name.replace("_", "-")
    return f"{flag} {option.value}" if option.value else flag


def worded(parts: Iterable[Said]) -> str:
    """A message the engine gives as parts (words and options), each option as its flag."""
    return "".join(flag_text(p) if isinstance(p, Option) else p for p in parts)


def said(e: SchedcliError) -> str:
    """An error's message, each option it names worded as its flag."""
    return e.words(flag_text)


def error_text(e: SchedcliError) -> str:
    """The one line for an error: ``FILE:LINE: message`` for input, else ``schedcli: ...``."""
    if isinstance(e, WrongKind):
        where = f"{e.file}:{e.line}" if e.line is not None else e.file
        return f"{where}: {e.text(TAKERS.get(e.found))}"
    located = isinstance(e, InputError) or getattr(e, "located", False)
    return said(e) if located else f"schedcli: {said(e)}"


# The parser's words, in ours: click's, as typer 0.28 vendors it (pyproject.toml pins
# typer below 0.29). Compiled by re (and kept in its cache) at the first usage error, not
# at start-up.
_REWRITES = (
    (r"'.*' is not a valid int(eger)?\.?$", "must be a whole number"),
    (r"'.*' is not a valid float\.?$", "must be a number"),
    (r"^'(.*)' is not one of (.*)\.$", r"must be one of \2, not '\1'"),
)


def _is_usage_error(e: BaseException) -> bool:
    """The option parser's usage errors (typer vendors its parser; no import of it here)."""
    return type(e).__module__.startswith("typer") and getattr(e, "exit_code", None) == 2


def usage_message(e: BaseException) -> str | None:
    """One line naming the command, the option and what is wrong; None if not a usage error."""
    if not _is_usage_error(e):
        return None
    ctx = getattr(e, "ctx", None)
    command = getattr(ctx, "command_path", None) or "schedcli"
    param = getattr(e, "param", None)
    kind = type(e).__name__
    message = str(getattr(e, "message", "") or e)
    if kind == "MissingParameter" and param is not None:
        name = (param.metavar if param.param_type_name == "argument" else None) or param.name
        name = str(name or "").upper()
        what = f"a {name}" if param.param_type_name == "argument" else f"the option {name}"
        return f"{command}: needs {what} (see {command} -h)"
    if param is not None:
        for pattern, replacement in _REWRITES:
            message = re.sub(pattern, replacement, message)
        opts = getattr(param, "opts", None) or [param.name]
        return f"{command}: {' / '.join(opts)} {message} (see {command} -h)"
    if kind == "NoSuchOption":
        option = getattr(e, "option_name", "")
        possibilities = getattr(e, "possibilities", None) or []
        hint = f" (did you mean {possibilities[0]}?)" if possibilities else ""
        return f"{command}: no option {option}{hint} (see {command} -h)"
    message = re.sub(
        r"Got unexpected extra argument\S* \((.*)\)", r"unexpected argument: \1", message
    )
    return f"{command}: {message[:1].lower()}{message[1:]} (see {command} -h)"


def warn_poor_fit(why: str, what: str) -> None:
    """A cost model's fit is poor: said once on stderr, by ``fit`` and by ``simulate``."""
    print(
        f"warning: {what} is poor ({why}): it explains little of the recorded step times, "
        "so a simulation under it is a choice, not a measurement",
        file=sys.stderr,
    )
