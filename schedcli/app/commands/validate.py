"""``schedcli validate``: every problem in a trace, not only the first."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from ...catalog.choice import RecordedPolicy, check_policy_for_trace
from ...engine.levels import CheckEvent, Level
from ...engine.levels.table import level_of
from ...formats.trace import TraceReader, incomplete_trace, open_trace
from ...model.errors import InputError, UsageError
from ...streams.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..usage import error_text


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
    ``policy``) checked as replay builds it, and the same step-mode rules (``StepClock``);
    under a policy with a narrow interface (``cxx:``), that policy built and every task
    checked against it (``interface_check``).
    """
    problems = Problems(max_errors)
    name = display_name(path)

    def collect(err: InputError) -> None:
        problems.append(error_text(err))

    events = 0
    try:
        with open_trace(path, max_line_bytes=max_line_bytes, on_error=collect) as reader:
            header = reader.header
            level = level_of(header)
            for problem in level.state_check(reader):  # first, as replay refuses it first
                collect(problem)
            before = problems.total
            unfit = _check_policy(reader, collect, policy, params or {}, level)
            if problems.total == before:  # the policy is one replay would build
                for problem in level.start_check(reader, policy, params or {}):
                    collect(problem)
            events, partial = level.events(reader, collect, unfit)
            if partial is not None and not allow_incomplete:
                collect(InputError(name, partial[0], incomplete_trace(partial[1])))
    except InputError as e:
        # Problems past which nothing more can be read: a corrupt gzip stream, an
        # unreadable file, a line too long to hold.
        problems.append(error_text(e))
    return problems, events


Collect = Callable[[InputError], None]


def _check_policy(
    reader: TraceReader,
    collect: Collect,
    policy: str | None,
    params: Mapping[str, object],
    level: Level,
) -> CheckEvent | None:
    """The trace's policy and parameters checked as replay takes them, without building a
    policy whose building costs (vLLM's takes seconds: ``Policy.settle``); a policy with a
    narrow interface built, and its check of each event."""
    header = reader.header
    try:
        recorded = RecordedPolicy.of(header)
        check_policy_for_trace(recorded, reader.name, policy, params, level.policy_level)
        return level.interface_check(header, reader.name, policy, params)
    except InputError as e:
        collect(e)
    except UsageError as e:
        collect(InputError(reader.name, header.line if header is not None else None, str(e)))
    return None


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
