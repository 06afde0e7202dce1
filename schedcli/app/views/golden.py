"""A golden comparison's difference, for people: the first differing step side by side,
then why the replay left out what the golden has there."""

from __future__ import annotations

from typing import Any

from ...engine.check.golden import LeftOut
from ...engine.diff import DiffResult


def golden_views(result: DiffResult, left_out: LeftOut | None) -> list[Any]:
    """The views of a replay's difference from its golden (``result``), and what the
    replay left out at the first differing step, with its reasons (``left_out``)."""
    from .render import diff_view, why_left

    views: list[Any] = [diff_view(result)]
    if left_out is not None:
        views.append(why_left("the replay", left_out.left, left_out.tids))
    return views
