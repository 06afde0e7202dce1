"""A task-level ``--check`` difference (``replay.Mismatch``: the first batch that differs
from its ``expect``): the facts its view draws, and its signature for shrink."""

from __future__ import annotations

from typing import Any

from ....model.task import Id, Task, id_key, ids_only_in, show_id
from ...recorded import Mismatch
from ..facts import Difference, Failure, Row


def _ids(values: list[Any]) -> str:
    return ", ".join(show_id(v) for v in values)


def _describe(t: Task | None, tid: Id) -> str:
    if t is None:
        return f"{show_id(tid)} (not queued)"
    return f"{show_id(tid)}  s{show_id(t.sid)} {t.kind.value} {t.size}"


def difference(m: Mismatch) -> Difference:
    """The batch recorded beside the batch replayed (what moved out, what moved in), and
    why the replay's policy left out what the recording had (its reasons there)."""
    got_ids = [t.tid for t in m.got]
    moved_out, moved_in = ids_only_in(m.expected, got_ids)
    out_keys = {id_key(i) for i in moved_out}
    in_keys = {id_key(i) for i in moved_in}
    by_tid: dict[tuple[type, Id], Task] = {id_key(t.tid): t for t in m.got}
    for tid, t in m.queued.items():
        by_tid.setdefault(id_key(tid), t)
    rows: list[Row] = []
    for i in range(max(len(m.expected), len(got_ids))):
        left = right = ""
        left_mark = right_mark = ""
        if i < len(m.expected):
            tid = m.expected[i]
            key = id_key(tid)
            left_mark = "out" if key in out_keys else ""
            left = _describe(by_tid.get(key), tid)
        if i < len(got_ids):
            tid = got_ids[i]
            right_mark = "in" if id_key(tid) in in_keys else ""
            right = _describe(m.got[i], tid)
        rows.append((str(i), left, left_mark, right, right_mark))
    caption = (
        f"moved out (expected, not dispatched): [{_ids(moved_out)}]   "
        f"moved in (dispatched, not expected): [{_ids(moved_in)}]"
    )
    if not moved_in and not moved_out:
        caption = "same tasks, different order"
    why: list[str] = []
    if m.left:
        expected = {id_key(tid) for tid in m.expected}
        said = [(t, code, detail) for t, code, detail in m.left if id_key(t.tid) in expected]
        if said:
            why = ["why the replay left out what the recording dispatched:"]
            why += [f"  {show_id(t.tid)}: {code}  {detail}" for t, code, detail in said]
    title = f"step {m.step} (trace line {m.line}): batch differs from the recording"
    return Difference(title, rows, caption, why)


def failure(m: Mismatch) -> Failure | None:
    """A batch that could have been dispatched (each task it names was queued then): the
    tids only in the recording, only in the replay, or their order."""
    queued = {id_key(t) for t in m.queued} | {id_key(t.tid) for t in m.got}
    if not all(id_key(tid) in queued for tid in m.expected):
        return None
    missing, extra = ids_only_in(m.expected, [t.tid for t in m.got])
    needs = frozenset(id_key(tid) for tid in m.expected)
    present = frozenset(id_key(t.sid) for t in (*m.queued.values(), *m.got))
    if missing or extra:
        signature: tuple[Any, ...] = ("check", _keys(missing), _keys(extra))
    else:
        signature = ("order", tuple(id_key(x) for x in m.expected))
    return Failure(m.line, signature, m.step, needs, present)


def _keys(ids: list[Any]) -> tuple[Any, ...]:
    return tuple(sorted((id_key(x) for x in ids), key=repr))
