"""Exceptions that reach the CLI boundary, each with the exit code it maps to."""

from __future__ import annotations


class SchedcliError(Exception):
    """Base class: a problem to report in one line, without a traceback."""

    exit_code = 2


class UsageError(SchedcliError):
    """Bad options, parameters, or a policy that cannot be built or loaded."""


class InputError(SchedcliError):
    """Bad input data, located as ``FILE:LINE: message``."""

    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file = file
        self.line = line
        self.message = message
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")


class CheckFailed(SchedcliError):
    """A comparison (--check, --golden, diff) found a difference."""

    exit_code = 1


class InvariantError(SchedcliError):
    """A policy broke a promise of the Scheduler interface: a policy bug."""

    exit_code = 3
