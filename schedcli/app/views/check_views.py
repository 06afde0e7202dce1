"""The view of a ``--check`` difference at either level: the recorded step and the replayed
one side by side, then why the replay left out what the recording had (its policy's
reasons there). ``replay --check`` prints it; ``check`` keeps it as plain text."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...engine.replay import Mismatch
from ...engine.requests.replay import RequestMismatch
from ...model.errors import StepMismatch
from ...model.records import Left
from ...model.task import Id, Task, id_key, ids_only_in, show_id


def _ids(values: list[Any]) -> str:
    return ", ".join(show_id(v) for v in values)


def _describe(t: Task | None, tid: Id) -> str:
    if t is None:
        return f"{show_id(tid)} (not queued)"
    return f"{show_id(tid)}  s{show_id(t.sid)} {t.kind.value} {t.size}"


def step_mismatch_view(e: StepMismatch) -> Group:
    """The view of a --check difference, at its trace's level."""
    m = e.mismatch
    if isinstance(m, Mismatch):
        return mismatch_view(m, m.left)
    return request_mismatch_view(m)


def mismatch_view(m: Mismatch, left: Left = None) -> Group:
    """The first step whose batch differs from ``expect``, side by side, and why the
    replay's policy left out what the recording had (``left``: its reasons there)."""
    parts: list[Any] = [_mismatch_table(m)]
    if left:
        expected = {id_key(tid) for tid in m.expected}
        why = [(t, code, detail) for t, code, detail in left if id_key(t.tid) in expected]
        if why:
            lines = ["why the replay left out what the recording dispatched:"]
            for t, code, detail in why:
                lines.append(f"  {show_id(t.tid)}: {code}  {detail}")
            parts.append(Text("\n".join(lines), "yellow"))
    return Group(*parts)


def _mismatch_table(m: Mismatch) -> Table:
    got_ids = [t.tid for t in m.got]
    moved_out, moved_in = ids_only_in(m.expected, got_ids)
    out_keys = {id_key(i) for i in moved_out}
    in_keys = {id_key(i) for i in moved_in}
    by_tid: dict[tuple[type, Id], Task] = {id_key(t.tid): t for t in m.got}
    for tid, t in m.queued.items():
        by_tid.setdefault(id_key(tid), t)
    table = _recorded_vs_replayed(
        f"step {m.step} (trace line {m.line}): batch differs from the recording"
    )
    for i in range(max(len(m.expected), len(got_ids))):
        left = right = Text("")
        if i < len(m.expected):
            tid = m.expected[i]
            key = id_key(tid)
            style = "red" if key in out_keys else ""
            left = Text(_describe(by_tid.get(key), tid), style=style)
        if i < len(got_ids):
            tid = got_ids[i]
            style = "green" if id_key(tid) in in_keys else ""
            right = Text(_describe(m.got[i], tid), style=style)
        table.add_row(str(i), left, right)
    table.caption = (
        f"moved out (expected, not dispatched): [{_ids(moved_out)}]   "
        f"moved in (dispatched, not expected): [{_ids(moved_in)}]"
    )
    if not moved_in and not moved_out:
        table.caption = "same tasks, different order"
    return table


# --- the request level: a step's slices, preemptions and finishes --------------------


def _entries(side: dict[str, Any]) -> list[str]:
    return [f"{show_id(rid)}: {tokens} tokens" for rid, tokens in side.get("batch", ())]


def request_mismatch_view(m: RequestMismatch) -> Group:
    """The recorded step and the replayed one side by side, then why the replay left out
    each request the recording scheduled (the policy's reasons at that step)."""
    table = _recorded_vs_replayed(
        f"step {m.step} (trace line {m.line}): differs from the recording"
    )
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


def _recorded_vs_replayed(title: str) -> Table:
    table = Table(title=title, box=box.ROUNDED, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("expected (recorded)")
    table.add_column("got (replayed)")
    return table
