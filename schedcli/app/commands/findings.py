"""``schedcli findings``: a trace replayed at its level and its findings shown
(``engine/findings.py`` finds them)."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ...engine.findings import Thresholds, find, kinds_of


def findings_command(
    path: str,
    *,
    policy: str | None,
    params: Mapping[str, object],
    fail_on: str | None,
    thresholds: tuple[int, float, int, int],
    allow_incomplete: bool,
    fmt: str,
) -> bool:
    """The findings of ``path``, shown; True when one of a ``fail_on`` kind was found (the
    caller exits 1). The kinds are checked before the replay."""
    from ..console import data_console
    from ..views.findings import findings_lines, findings_table

    failing = set(kinds_of(fail_on)) if fail_on is not None else set()
    found, title = find(
        path, policy, params, Thresholds(*thresholds), allow_incomplete=allow_incomplete
    )
    if fmt == "json":
        sys.stdout.buffer.write(findings_lines(found))
        sys.stdout.buffer.flush()
    else:
        data_console().print(findings_table(found, title))
    return any(f.kind in failing for f in found)
