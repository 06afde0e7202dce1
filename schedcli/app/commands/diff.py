"""``schedcli diff``: one trace under two configurations, or two dumps, compared by
``engine/diff.py``; the result shown, with each side's reasons at the first difference."""

from __future__ import annotations

from rich.text import Text

from ...engine.diff import DiffResult, Side, diff_dumps, diff_trace
from ...engine.explain import reasons_at
from ...model.errors import UsageError
from ...model.records import Left
from ...model.task import Id, id_key, show_id
from ..console import data_console, show
from ..views.progress import trace_progress
from ..views.render import diff_view, why_left


def run_diff(
    inputs: list[str],
    a: Side,
    b: Side,
    *,
    drain: bool = False,
    allow_incomplete: bool = False,
    fmt: str = "table",
) -> bool:
    """``schedcli diff``: one trace under two configurations, or two dumps; the result on
    stdout, with each side's reasons at the first difference. Whether they are the same."""
    if len(inputs) == 1:
        progress = trace_progress("comparing", inputs[0])
        try:
            result = diff_trace(
                inputs[0], a, b, drain=drain, progress=progress, allow_incomplete=allow_incomplete
            )
        finally:
            progress.stop()
    elif len(inputs) == 2:
        if a.policy or b.policy or a.params or b.params:
            raise UsageError("--a/--b and their params apply to a trace, not to two dumps")
        result = diff_dumps(inputs[0], inputs[1], allow_incomplete=allow_incomplete)
    else:
        raise UsageError("diff takes one trace, or two dumps")
    show(fmt, result, diff_view, DiffResult.to_json)
    first = result.first
    # Reasons found as the step was compared, else from a replay to it (not from stdin).
    readable = first is not None and (first.left is not None or inputs[0] != "-")
    if fmt != "json" and len(inputs) == 1 and readable:
        _print_reasons(inputs[0], result, a, b)
    return result.identical


def _print_reasons(trace: str, result: DiffResult, a: Side, b: Side) -> None:
    """Each side's reasons at the first differing step (a replay is deterministic)."""
    first = result.first
    assert first is not None
    only_a, only_b = first.moved()
    resized = [sid for _, sid, _, _ in first.resized()]
    console = data_console()
    for i, (label, side, tids) in enumerate((("A", a, only_b), ("B", b, only_a))):
        # A side with no batch at the step left nothing out there (it made no get_work).
        if (tids or resized) and (first.a, first.b)[i] is not None:
            if first.left is not None:
                left = first.left[i]
            else:  # found past the step: its reasons from a replay to it, where one gives them
                found = reasons_at(trace, first.step, side.policy, side.params)
                if found is None:
                    continue  # kept only as the difference is found, or read once
                left = found.left
            if tids:
                console.print(why_left(label, left, tids))
            if resized and left is not None:
                console.print(_said_of(label, left, resized))


def _said_of(label: str, left: Left, sids: list[Id]) -> Text:
    """What ``label``'s policy said at the step of requests both sides ran at other sizes
    (its reasons for them: a slice cut to a threshold, say)."""
    wanted = {id_key(s) for s in sids}
    said = [
        f"  {show_id(t.tid)}: {code}  {detail}"
        for t, code, detail in left or ()
        if id_key(t.sid) in wanted
    ]
    lines = [f"what {label} said of the requests both ran at other sizes:"]
    return Text("\n".join(lines + (said or ["  nothing (no cut it gives a reason for)"])), "yellow")
