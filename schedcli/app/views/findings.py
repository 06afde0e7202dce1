"""``findings``' views: a table for people, one JSON record a finding for machines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich import box
from rich.table import Table

from ...engine.findings import Finding
from ...model.task import show_id


def _said(value: Any) -> str:
    return orjson.dumps(value).decode() if not isinstance(value, str) else value


def findings_table(found: Sequence[Finding], title: str) -> Table:
    """One row a finding, in step order: its kind, step, who waited, who ran, its numbers."""
    table = Table(title=f"{title}: {len(found)} finding{'' if len(found) == 1 else 's'}",
                  box=box.ROUNDED, title_justify="left")  # fmt: skip
    for column in ("step", "kind", "waiting", "ran", "numbers"):
        table.add_column(column, justify="right" if column == "step" else "left")
    for f in found:
        numbers = "  ".join(f"{k}={_said(v)}" for k, v in f.numbers.items())
        table.add_row(
            str(f.step),
            f.kind,
            ", ".join(show_id(i) for i in f.waiting),
            ", ".join(show_id(i) for i in f.ran),
            numbers,
        )
    return table


def findings_lines(found: Sequence[Finding]) -> bytes:
    """One JSON record a finding, a line each (byte-identical for the same replay)."""
    return b"".join(orjson.dumps(f.to_json()) + b"\n" for f in found)


def findings_counted(tally: Mapping[str, int]) -> str:
    """A replay's findings by kind, in words (stats --findings)."""
    found = {kind: n for kind, n in tally.items() if n}
    if not found:
        return "0 (none of any kind)"
    return f"{sum(found.values())} (" + ", ".join(f"{k} {n}" for k, n in found.items()) + ")"
