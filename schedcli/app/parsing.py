"""Option values that need parsing beyond their type: ``--steps A:B`` and the id options
(``--session 7`` is the integer, ``--session '"7"'`` the string)."""

from __future__ import annotations

import orjson

from ..model.errors import UsageError
from ..model.task import Id


def parse_id_option(text: str) -> Id:
    """``--session 7`` is the integer 7; ``--session '"7"'`` the string "7"; others strings."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if type(value) in (int, str):
        return value  # type: ignore[no-any-return]
    return text


class StepRange:
    """``A:B`` (half-open, like a Python slice), ``A:``, ``:B`` or a single step ``A``."""

    __slots__ = ("start", "stop")

    def __init__(self, start: int, stop: int | None) -> None:
        self.start = start
        self.stop = stop

    @classmethod
    def parse(cls, text: str) -> StepRange:
        try:
            if ":" in text:
                a, b = text.split(":", 1)
                start = int(a) if a.strip() else 0
                stop = int(b) if b.strip() else None
            else:
                start = int(text)
                stop = start + 1
        except ValueError:
            raise UsageError(f"--steps {text!r}: expected A:B, A:, :B or A (integers)") from None
        if start < 0 or (stop is not None and stop < start):
            raise UsageError(f"--steps {text!r}: need 0 <= A <= B")
        return cls(start, stop)

    def __contains__(self, step: object) -> bool:
        return (
            isinstance(step, int) and step >= self.start and (self.stop is None or step < self.stop)
        )
