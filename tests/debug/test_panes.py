"""The debugger's panes (app/debug/panes.py), drawn from a view as the server sends it."""

from __future__ import annotations

from typing import Any

from schedcli.app.debug.panes import batch_table
from schedcli.engine.levels.table import level_named


def _entry(tid: object, sid: object, size: int = 1) -> dict[str, Any]:
    return {"tid": tid, "sid": sid, "kind": "decode", "size": size}


def _marks(level: str, mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[str]:
    """The difference column of the batch pane, against a second policy: ours, the line
    naming theirs, then theirs."""
    records = [{"step": 0, "tokens": 1, "batch": b} for b in (mine, theirs)]
    view = {"step": 0, "records": records, "other": records[1]}
    key = level_named(level).batch_key
    table = batch_table(view, None, "fcfs", "against", "sjf", key)
    return [str(c) for c in table.columns[0].cells]


def test_a_task_level_batch_is_compared_task_by_task_whatever_its_tids_spell() -> None:
    # Two tasks of one session, tids with an "@" in them: a different task each side.
    assert _marks("task", [_entry("a@1", "s")], [_entry("a@2", "s")]) == ["-", "", "+"]
    assert _marks("task", [_entry("a@1", "s")], [_entry("a@1", "s")]) == ["", "", ""]


def test_a_request_level_batch_is_compared_request_by_request() -> None:
    # A slice of each request: the same requests at other positions are the same work.
    mine = [_entry("r1@0", "r1", 16), _entry("r2@0", "r2", 8)]
    theirs = [_entry("r1@16", "r1", 16), _entry("r2@8", "r2", 4)]
    assert _marks("request", mine, theirs) == ["", "~", "", "", "~"]
