"""``schedcli report``: the page (app/report/), written atomically, and its size said."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ...engine.cost import CostModel
from ..report.page import build_report


def report_command(
    path: str,
    output: str,
    configs: Sequence[str],
    cost: CostModel,
    *,
    allow_incomplete: bool,
    findings: bool = False,
) -> None:
    """``schedcli report``: the page, written atomically, and its size said."""
    from ...streams.output import atomic_output
    from ..views.progress import trace_progress

    progress = trace_progress("reporting", path)
    try:
        page = build_report(
            path,
            configs,
            cost=cost,
            progress=progress,
            allow_incomplete=allow_incomplete,
            findings=findings,
        )
    finally:
        progress.stop()
    with atomic_output(output) as out:
        out.write(page.encode())
    print(f"wrote {output} ({len(page) // 1024} KiB)", file=sys.stderr)
