"""The view of a ``--check`` difference at either level: the recorded step and the replayed
one side by side, then why the replay left out what the recording had (its policy's
reasons there). The level says what differs (``Level.difference``: facts); this draws it.
``replay --check`` prints it; ``check`` keeps it as plain text."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...engine.levels.facts import Difference
from ...engine.levels.table import level_of_difference
from ...model.errors import StepMismatch

# A side's mark as drawn: recorded only (moved out), replayed only (moved in), differing.
_STYLES = {"": "", "out": "red", "in": "green", "differs": "red"}


def step_mismatch_view(e: StepMismatch) -> Group:
    """The view of a --check difference, at its trace's level."""
    return difference_view(level_of_difference(e).difference(e))


def difference_view(d: Difference) -> Group:
    table = Table(title=d.title, box=box.ROUNDED, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("expected (recorded)")
    table.add_column("got (replayed)")
    for label, left, left_mark, right, right_mark in d.rows:
        table.add_row(label, Text(left, _STYLES[left_mark]), Text(right, _STYLES[right_mark]))
    if d.caption is not None:
        table.caption = d.caption
    parts: list[Any] = [table]
    if d.why:
        parts.append(Text("\n".join(d.why), "yellow"))
    return Group(*parts)
