"""What each pane shows, as rich renderables from the server's answers: the timeline, a
step's batch (and the other side's, differences marked), the queue with its reasons, and a
life. No widget state here: ``screen.py`` places them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ...engine.travel import Travel
from ...model.task import show_id

BARS = " ▁▂▃▄▅▆▇█"
# One character per mark kind, strongest first where several share a column; readable
# without colour.
MARK_CHARS = {"break": "!", "div": "x", "preempt": "p", "reject": "r", "cancel": "c", "clear": "C"}
MARK_STYLES = {"break": "bold red", "div": "bold magenta", "preempt": "yellow"}
# A finding's mark, by kind (docs/findings.md), weaker than the replay's own marks.
FINDING_CHARS = {
    "priority_inversion": "i",
    "starvation": "s",
    "hol_blocking": "h",
    "preemption_thrash": "t",
    "skipped_running": "k",
    "decode_gap": "g",
}


def timeline(
    travel: Travel, row: int, width: int, findings: Sequence[tuple[int, str]] = ()
) -> Text:
    """Four lines over every step indexed: tokens against the budget, queued depth, marks
    (the replay's, then each finding's, ``findings``: its step and kind), and where the
    cursor stands."""
    width = max(width - 9, 10)
    n = travel.steps
    text = Text()
    if n == 0:
        text.append("tokens   (no steps yet)\n\n\n")
        return text
    per = max(1, -(-n // width))
    cols = -(-n // per)
    budget = (travel.hello or {}).get("budget") or max(travel.tokens) or 1
    deepest = max(travel.queued) or 1
    tokens = [max(travel.tokens[i * per : (i + 1) * per]) for i in range(cols)]
    queued = [max(travel.queued[i * per : (i + 1) * per]) for i in range(cols)]
    text.append("tokens   ", style="dim")
    text.append("".join(_bar(v, budget) for v in tokens), style="green")
    text.append("\nqueued   ", style="dim")
    text.append("".join(_bar(v, deepest) for v in queued), style="cyan")
    text.append("\nmarks    ", style="dim")
    marks = [" "] * cols
    chars = {**MARK_CHARS, **FINDING_CHARS}
    rank = list(chars)
    strongest: list[int] = [len(rank)] * cols
    for step, kind in [*((m[0], m[1]) for m in travel.marks), *findings]:
        col = min(travel.row_of(step) // per, cols - 1)
        r = rank.index(kind) if kind in rank else len(rank)
        if r < strongest[col]:
            strongest[col], marks[col] = r, chars[kind]
    for col, ch in enumerate(marks):
        kind = rank[strongest[col]] if strongest[col] < len(rank) else ""
        style = "cyan" if kind in FINDING_CHARS else MARK_STYLES.get(kind, "bold")
        text.append(ch, style=style)
    text.append("\nstep     ", style="dim")
    at = min(row // per, cols - 1)
    text.append(" " * at + "^", style="bold")
    text.append(f" {travel.numbers[row] if row < n else '?'}", style="bold")
    return text


def _bar(value: int, top: int) -> str:
    if value <= 0:
        return " "
    return BARS[min(8, max(1, round(8 * value / top)))]


def batch_table(
    view: dict[str, Any],
    budget: int | None,
    label: str,
    other_label: str | None,
    other_name: str | None = None,
    key: str = "tid",
) -> Table:
    """The step's batch, and what it is compared with below it, differences marked:
    ``-`` ours only, ``+`` theirs only, ``~`` a different size. ``key``: the entry field
    the two sides match by (the trace level's ``batch_key``)."""
    record = view["records"][0]
    mine = _entries(record, key)
    theirs = _theirs(view, other_label, key)
    table = Table(
        title=_title(record, budget, label),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        expand=True,
    )
    for name in ("", "tid", "sid", "kind", "size"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    their_keys = {k: size for k, size in (theirs or [])}
    for key, e in mine:
        mark = ""
        if theirs is not None:
            mark = (
                "-"
                if key not in their_keys
                else ("~" if their_keys[key] not in (None, e["size"]) else "")
            )
        table.add_row(
            mark,
            show_id(e["tid"]),
            show_id(e["sid"]),
            _short(e["kind"]),
            str(e["size"]),
            style=_diff_style(mark),
        )
    if theirs is not None:
        table.add_section()
        other = view["records"][1] if len(view["records"]) > 1 else None
        table.add_row("", Text(f"{other_name or other_label}:", style="bold"), "", "", "")
        my_keys = {k: e["size"] for k, e in mine}
        for key, size in theirs:
            mark = "+" if key not in my_keys else ("~" if size not in (None, my_keys[key]) else "")
            table.add_row(
                mark, key, "", "", "" if size is None else str(size), style=_diff_style(mark)
            )
        if other is None and other_label == "against":
            table.add_row("", Text("(no such step)", style="dim"), "", "", "")
    return table


def _title(record: dict[str, Any] | None, budget: int | None, label: str) -> str:
    if record is None:
        return f"{label}: no such step"
    tokens = record["tokens"]
    decodes = sum(1 for e in record["batch"] if e["kind"] == "decode")
    chunks = len(record["batch"]) - decodes
    of = f"/{budget}" if budget else ""
    d, c = "decode" if decodes == 1 else "decodes", "chunk" if chunks == 1 else "chunks"
    return f"step {record['step']}: {decodes} {d}, {chunks} {c}, {tokens}{of} tokens"


def _short(kind: str) -> str:
    return {"prefill": "pre", "decode": "dec", "waiting": "wait"}.get(kind, kind)


def _entries(record: dict[str, Any] | None, key: str) -> list[tuple[str, dict[str, Any]]]:
    if record is None:
        return []
    return [(show_id(e[key]), e) for e in record["batch"]]


def _theirs(
    view: dict[str, Any], label: str | None, key: str
) -> list[tuple[str, int | None]] | None:
    """The other side's batch as (key, size) pairs: expect tids, or a record's entries."""
    if label is None:
        return None
    other = view.get("other")
    if label == "expect":
        if other is None:
            return None  # this step records no expect
        return [(show_id(who), size) for who, size in other]  # Side.expect_batch
    if other is None:
        return []
    return [(k, e["size"]) for k, e in _entries(other, key)]


def _diff_style(mark: str) -> str:
    return {"-": "red", "+": "green", "~": "yellow"}.get(mark, "")


QUEUE_COLUMNS = ("", "tid", "sid", "kind", "size", "age", "reason")


def queue_rows(view: dict[str, Any], side: int = 0) -> list[tuple[str, ...]]:
    """The queue get_work saw: ``>`` ran, else the reason it was left (and its detail)."""
    queue = view["queues"][side] or []
    step = view["step"]
    rows: list[tuple[str, ...]] = []
    for e in queue:
        why = "" if e["ran"] else f"{e['reason'] or '?'}: {e['detail'] or ''}".rstrip(": ")
        rows.append(
            (
                ">" if e["ran"] else " ",
                show_id(e["tid"]),
                show_id(e["sid"]),
                _short(e["kind"]),
                str(e["size"]),
                str(step - e["since"]),
                why,
            )
        )
    return rows


def life_table(what: str, events: list[list[Any]], done: bool) -> Table:
    table = Table(
        title=f"life of {what}" + ("" if done else " (following…)"),
        expand=True,
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for name in ("step", "what", "tid", "detail"):
        table.add_column(name, no_wrap=name != "detail")
    for step, kind, tid, detail in events:
        table.add_row(str(step), kind, show_id(tid), detail)
    if done and not events:
        table.add_row("", "nothing", "", "no such task or session from this step on")
    return table


def state_table(view: dict[str, Any], side: int = 0) -> Table:
    """The policy's state after the step: each attribute and what it holds."""
    table = Table(
        title=f"policy state after step {view['step']}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
    )
    table.add_column("attribute", no_wrap=True)
    table.add_column("holds")
    for name, value in (view.get("states") or [[]])[side]:
        table.add_row(name, value)
    return table
