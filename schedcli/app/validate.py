"""``schedcli validate``: every problem in a trace, not only the first."""

from __future__ import annotations

from ..engine.run import choose_policy
from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..formats.trace import open_trace
from ..model.errors import InputError, UsageError


def validate_trace(
    path: str, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[list[str], int]:
    """Problems as ``FILE:LINE: message`` lines, and the number of valid events."""
    problems: list[str] = []
    name = display_name(path)

    def collect(err: InputError) -> None:
        problems.append(str(err))

    events = 0
    try:
        with open_trace(path, max_line_bytes=max_line_bytes, on_error=collect) as reader:
            if reader.header is not None:
                try:
                    choose_policy(reader.header, name, None, {}, note=lambda _: None)
                except InputError as e:
                    problems.append(str(e))
                except UsageError as e:
                    problems.append(f"{name}:{reader.header.line}: {e}")
            for _ in reader:
                events += 1
    except InputError as e:
        # Problems past which nothing more can be read: a corrupt gzip stream, an
        # unreadable file, a line too long to hold.
        problems.append(str(e))
    return problems, events
