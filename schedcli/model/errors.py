"""Exceptions that reach the CLI boundary, each with the exit code it maps to."""

from __future__ import annotations

from typing import Any, ClassVar


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


class WrongKind(InputError):
    """A file of another of schedcli's kinds: ``noun`` says what it is; the app, which
    knows the commands, adds which of them take it (see ``app.usage.error_text``)."""

    def __init__(self, file: str, line: int | None, found: str, noun: str, expected: str) -> None:
        self.found = found
        self.noun = noun
        self.expected = expected
        super().__init__(file, line, self.text())

    def text(self, takers: str | None = None) -> str:
        what = f"{self.noun} ({takers})" if takers else self.noun
        if not self.expected:
            return f"this is {what}"
        article = "an" if self.expected[0] in "aeiou" else "a"
        return f"this is {what}, not {article} {self.expected}"


class CheckFailed(SchedcliError):
    """A comparison (--check, --golden, diff) found a difference."""

    exit_code = 1
    located = False  # True where the message starts FILE:LINE (said as it is)


class StepMismatch(CheckFailed):
    """A replay's step differs from the trace's recorded ``expect``, at either level:
    ``mismatch`` holds what the views draw."""

    located = True  # its message starts FILE:LINE
    mismatch: Any
    level: ClassVar[str]  # the name of the level whose replay found it (engine/levels/table.py)


class InvariantError(SchedcliError):
    """A policy broke a promise of the Scheduler interface: a policy bug."""

    exit_code = 3


class PolicyAborted(Exception):
    """Raised by a policy whose outside code died inside a call (a C++ scheduler's
    segfault, abort or failed assert): the engine reports the contract broken (exit 3) at
    the step and line of the call."""


class UnfitTask(Exception):
    """Raised by a policy handed a task its interface cannot carry (an id wider than a C++
    ``TaskId``): the engine reports bad input (exit 2) at the line of the call."""
