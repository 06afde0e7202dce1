"""Request-level views: the first step that differs from the recording, with reasons."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..engine.request_replay import RequestMismatch
from ..model.task import show_id


def _entries(side: dict[str, Any]) -> list[str]:
    return [f"{show_id(rid)}: {tokens} tokens" for rid, tokens in side.get("batch", ())]


def request_mismatch_view(m: RequestMismatch) -> Group:
    """The recorded step and the replayed one side by side, then why the replay left out
    each request the recording scheduled (the policy's reasons at that step)."""
    table = Table(
        title=f"step {m.step} (trace line {m.line}): differs from the recording",
        box=box.ROUNDED,
        title_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("expected (recorded)")
    table.add_column("got (replayed)")
    want, got = _entries(m.expected), _entries(m.got)
    for i in range(max(len(want), len(got))):
        left = want[i] if i < len(want) else ""
        right = got[i] if i < len(got) else ""
        style = "" if left == right else "red"
        table.add_row(str(i), Text(left, style), Text(right, style))
    for key in ("preempted", "finished"):
        a, b = m.expected.get(key, []), m.got.get(key, [])
        if a or b:
            style = "" if a == b else "red"
            shown = [", ".join(show_id(r) for r in ids) or "-" for ids in (a, b)]
            table.add_row(key, Text(shown[0], style), Text(shown[1], style))
    parts: list[Any] = [table]
    replayed = {(type(r), r) for r, _ in m.got.get("batch", ())}
    missing = [r for r, _ in m.expected.get("batch", ()) if (type(r), r) not in replayed]
    reasons = {(type(r), r): (code, detail) for r, code, detail in m.reasons}
    lines = []
    for rid in missing:
        code, detail = reasons.get((type(rid), rid), ("?", "no reason derived"))
        lines.append(f"  {show_id(rid)}: {code}  {detail}")
    if lines:
        parts.append(
            Text(
                "\n".join(["why the replay left out what the recording scheduled:", *lines]),
                "yellow",
            )
        )
    return Group(*parts)
