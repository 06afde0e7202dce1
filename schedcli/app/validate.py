"""``schedcli validate``: every problem in a trace, not only the first."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ..engine.clock import StepClock
from ..engine.run import choose_policy
from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..formats.trace import incomplete_trace, open_trace
from ..model.errors import InputError, UsageError
from .usage import error_text


class Problems(list[str]):
    """The first ``keep`` problems as ``FILE:LINE: message``, and how many there were."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep
        self.total = 0

    def append(self, problem: str) -> None:
        self.total += 1
        if len(self) < self.keep:
            super().append(problem)


def validate_trace(
    path: str,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_errors: int = 20,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    allow_incomplete: bool = False,
) -> tuple[Problems, int]:
    """The problems (the first ``max_errors`` kept, all counted) and the valid events.

    What ``replay`` refuses, this reports: the same reader, the header's policy (or
    ``policy``) built as replay builds it, and the same step-mode rules (``StepClock``).
    """
    problems = Problems(max_errors)
    name = display_name(path)

    def collect(err: InputError) -> None:
        problems.append(error_text(err))

    events = 0
    from ..formats.kinds import is_request_trace

    if is_request_trace(path):
        from .request_level import validate_request_trace

        try:
            events = validate_request_trace(
                path, collect, policy, dict(params or {}), allow_incomplete
            )
        except InputError as e:
            problems.append(error_text(e))
        return problems, events
    try:
        with open_trace(path, max_line_bytes=max_line_bytes, on_error=collect) as reader:
            line = reader.header.line if reader.header is not None else None
            try:
                choose_policy(reader.header, name, policy, params or {}, note=lambda _: None)
            except InputError as e:
                problems.append(error_text(e))
            except UsageError as e:
                problems.append(f"{name}:{line}: {e}" if line else f"{name}: {e}")
            clock = StepClock(name)
            for event in reader:
                try:
                    clock.check(event)
                except InputError as e:
                    problems.append(error_text(e))
                    continue
                events += 1
            if reader.partial is not None and not allow_incomplete:
                problems.append(
                    str(InputError(name, reader.partial[0], incomplete_trace(reader.partial[1])))
                )
    except InputError as e:
        # Problems past which nothing more can be read: a corrupt gzip stream, an
        # unreadable file, a line too long to hold.
        problems.append(error_text(e))
    return problems, events


def check_trace(
    path: str,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_errors: int = 20,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    allow_incomplete: bool = False,
) -> bool:
    """``schedcli validate``: every problem on stderr, then a count; whether it is valid."""
    problems, events = validate_trace(
        path,
        max_line_bytes=max_line_bytes,
        max_errors=max_errors,
        policy=policy,
        params=params,
        allow_incomplete=allow_incomplete,
    )
    for p in problems:
        print(p, file=sys.stderr)
    if problems.total:
        shown = "" if problems.total == len(problems) else f" (the first {len(problems)} shown)"
        print(f"{problems.total} problem(s){shown}; {events} valid event(s)", file=sys.stderr)
        return False
    print(f"{display_name(path)}: valid, {events} event(s)", file=sys.stderr)
    return True
