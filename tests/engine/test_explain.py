"""engine/explain.py's one service for a policy's reasons at a past step (replay's golden
comparison, diff and check call it), apart from the command line."""

from __future__ import annotations

from pathlib import Path

from schedcli.engine.explain import Reasons, explain_step, reasons_at
from schedcli.model.records import Left
from schedcli.model.task import Id
from tests.helpers import TRACES, request_trace

ROTATION = str(TRACES / "rotation-fairness.jsonl")


def _said(left: Left) -> list[tuple[Id, str, str]] | None:
    return None if left is None else [(t.tid, code, detail) for t, code, detail in left]


def test_a_task_trace_s_reasons_at_a_step_are_those_explain_shows_there() -> None:
    for step in (1, 2, 3):
        found = reasons_at(ROTATION, step)
        assert isinstance(found, Reasons) and found.step == step
        assert _said(found.left) == _said(explain_step(ROTATION, step).left)


def test_no_reasons_where_no_second_replay_can_give_them(tmp_path: Path) -> None:
    assert reasons_at("-", 2) is None  # a pipe is read once
    assert reasons_at(ROTATION, 2, follow=True) is None  # so is a file followed as it grows
    # A request-level trace's reasons are kept as a difference is found, not replayed.
    assert reasons_at(str(request_trace(tmp_path)), 1) is None
