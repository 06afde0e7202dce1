"""Exceptions that reach the CLI boundary, each with the exit code it maps to."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol


class Option:
    """A command-line option, as a fact an error carries: ``name`` is the setting's own
    (``until``, ``stall_steps``: the command's parameter), ``value`` what the sentence
    shows given with it ("" for nothing). The app words it as its flag
    (``app.usage.flag_text``); ``str`` is the plain fallback, for an error said where no
    app words it (a worker's record, a library's caller), spelled as the app spells it
    (tests/model/test_errors.py holds the two together). Not a dataclass: this module
    loads at every start, and making one execs code (docs/architecture.md, "Start-up")."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str = "") -> None:
        self.name, self.value = name, value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Option) and (self.name, self.value) == (other.name, other.value)

    def __hash__(self) -> int:
        return hash((self.name, self.value))

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.value!r})"

    def __reduce__(self) -> tuple[type[Option], tuple[str, str]]:
        return Option, (self.name, self.value)

    def __str__(self) -> str:
        said = "--" + self.name.replace("_", "-")
        return f"{said} {self.value}" if self.value else said


Said = str | Option  # a part of an error's message: words, or an option the app words


class SchedcliError(Exception):
    """Base class: a problem to report in one line, without a traceback. Its message is
    ``parts`` (``args``): words, and the options (``Option``) the app words as flags."""

    exit_code = 2

    def __init__(self, *parts: Said) -> None:
        super().__init__(*parts)

    @property
    def parts(self) -> tuple[Said, ...]:
        return tuple(p if isinstance(p, Option) else str(p) for p in self.args)

    def words(self, flag: Callable[[Option], str] = str) -> str:
        """The message, each option worded by ``flag``."""
        return "".join(flag(p) if isinstance(p, Option) else p for p in self.parts)

    def __str__(self) -> str:
        return self.words()


class UsageError(SchedcliError):
    """Bad options, parameters, or a policy that cannot be built or loaded."""


class InputError(SchedcliError):
    """Bad input data, located as ``FILE:LINE: message``."""

    def __init__(self, file: str, line: int | None, message: str | tuple[Said, ...]) -> None:
        parts = (message,) if isinstance(message, str) else message
        self.file = file
        self.line = line
        self.message = "".join(map(str, parts))
        where = f"{file}:{line}" if line is not None else file
        if isinstance(message, str):
            super().__init__(f"{where}: {message}")
        else:
            super().__init__(f"{where}: ", *parts)


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


class Mismatched(Protocol):
    """What every level's mismatch says (each level's own class says more, for its
    views): the step that differs and the trace line that recorded its expect."""

    @property
    def step(self) -> int: ...

    @property
    def line(self) -> int: ...


class StepMismatch(CheckFailed):
    """A replay's step differs from the trace's recorded ``expect``, at either level:
    ``mismatch`` holds what the views draw (each level's subclass narrows its type)."""

    located = True  # its message starts FILE:LINE
    mismatch: Mismatched
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


class SnapshotUnsupported(UsageError):
    """A policy that cannot hand over its state (``snapshot``) or take one (``restore``):
    a C++ scheduler, vLLM, a plugin that does not implement them. ``policy`` names it and
    ``why`` says why; a trace that begins from a state is then bad usage (exit 2)."""

    def __init__(self, policy: str, why: str) -> None:
        self.policy, self.why = policy, why
        super().__init__(f"policy {policy} has no snapshots: {why}")


class BadSnapshot(SchedcliError):
    """A policy's state refused by ``restore``: ``field`` is where in the state (``queued[2]
    [0].size``), ``why`` what is wrong there. The state comes from a trace (untrusted
    input): whoever read it adds the file and line."""

    def __init__(self, field: str, why: str) -> None:
        self.field, self.why = field, why
        super().__init__(f"{field}: {why}" if field else why)
