"""``schedcli convert``: a public request trace to a workload file, with a report."""

from __future__ import annotations

import sys

from ...formats.convert import ConvertOptions, convert, to_text
from ...streams.output import atomic_output


def convert_to(fmt: str, src: str, output: str, options: ConvertOptions) -> None:
    """Convert ``src`` (format ``fmt``, or auto) into ``output``, written atomically; what
    was kept, skipped and left out goes to stderr."""
    with atomic_output(output) as out:
        report = convert(fmt, src, out, options, _warn)
    print(to_text(report), file=sys.stderr)


def _warn(message: str) -> None:
    print(f"schedcli: {message}", file=sys.stderr)
