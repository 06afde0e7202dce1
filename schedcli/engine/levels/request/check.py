"""A request-level ``--check`` difference (``replay.RequestMismatch``: the first
step whose plan differs from its ``expect``): the facts its view draws, and its signature
for shrink."""

from __future__ import annotations

from typing import Any

from ....model.task import id_key, show_id
from ..facts import Difference, Failure, Row
from .replay import RequestMismatch


def _entries(side: dict[str, Any]) -> list[str]:
    return [f"{show_id(rid)}: {tokens} tokens" for rid, tokens in side.get("batch", ())]


def difference(m: RequestMismatch) -> Difference:
    """The recorded step beside the replayed one (its slices, preemptions, finishes), and
    why the replay left out each request the recording scheduled (its reasons there)."""
    rows: list[Row] = []
    want, got = _entries(m.expected), _entries(m.got)
    for i in range(max(len(want), len(got))):
        left = want[i] if i < len(want) else ""
        right = got[i] if i < len(got) else ""
        mark = "" if left == right else "differs"
        rows.append((str(i), left, mark, right, mark))
    for key in ("preempted", "finished"):
        a, b = m.expected.get(key, []), m.got.get(key, [])
        if a or b:
            mark = "" if a == b else "differs"
            shown = [", ".join(show_id(r) for r in ids) or "-" for ids in (a, b)]
            rows.append((key, shown[0], mark, shown[1], mark))
    replayed = {(type(r), r) for r, _ in m.got.get("batch", ())}
    missing = [r for r, _ in m.expected.get("batch", ()) if (type(r), r) not in replayed]
    reasons = {(type(r), r): (code, detail) for r, code, detail in m.reasons}
    lines = []
    for rid in missing:
        code, detail = reasons.get((type(rid), rid), ("?", "no reason derived"))
        lines.append(f"  {show_id(rid)}: {code}  {detail}")
    why = ["why the replay left out what the recording scheduled:", *lines] if lines else []
    title = f"step {m.step} (trace line {m.line}): differs from the recording"
    return Difference(title, rows, None, why)


def failure(m: RequestMismatch) -> Failure | None:
    """The requests a step scheduled only in the recording, only in the replay, or with
    other token counts (a step that names a request not held then could not have been
    recorded: no failure)."""
    held = {id_key(r) for r in m.held}
    want = {id_key(r): n for r, n in m.expected.get("batch", ())}
    got = {id_key(r): n for r, n in m.got.get("batch", ())}
    if not all(k in held for k in want):
        return None
    missing = tuple(sorted((k for k in want if k not in got), key=repr))
    extra = tuple(sorted((k for k in got if k not in want), key=repr))
    other = tuple(sorted((k for k in want if k in got and want[k] != got[k]), key=repr))
    needs, present = frozenset(want), frozenset(held)
    if missing or extra or other:
        return Failure(m.line, ("check", missing, extra, other), m.step, needs, present)
    # The same slices, another field differing: a step's preemptions, or a split step's
    # update (which records what finished, and no batch).
    fields = sorted(k for k in {*m.expected, *m.got} if m.expected.get(k) != m.got.get(k))
    return Failure(m.line, ("steps", tuple(want), tuple(fields)), m.step, needs, present)
