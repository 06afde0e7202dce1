"""Rich views for people: the replay as tables, mismatches side by side, summaries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ...engine.replay import Totals
from ...model.records import Left, Record
from ...model.steps import Emitted, Step
from ...model.task import Id, id_key, show_id
from ...streams.interrupt import whole_write


def _step_table(header: bool) -> Table:
    # Fixed widths and ratios, so the per-step tables line up as one.
    table = Table(
        box=box.SIMPLE_HEAD,
        show_header=header,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        expand=True,
    )
    table.add_column("step", justify="right", width=6, no_wrap=True)
    table.add_column("decodes sid:tid", ratio=2)
    table.add_column("prefill sid:tid (size)", ratio=3)
    table.add_column("tokens", justify="right", width=11, no_wrap=True)
    table.add_column("queued", justify="right", width=7, no_wrap=True)
    table.add_column("left behind", ratio=2)
    return table


def _ids(values: Iterable[Id]) -> str:
    return ", ".join(show_id(v) for v in values)


class TableRows:
    """Prints each record as it arrives, so a long replay streams instead of piling up."""

    def __init__(self, console: Console, budget: int | None) -> None:
        self.console = console
        self.budget = budget
        self._header_done = False
        self._left = "-"

    def left(self, step: int, left: list[tuple[Any, str, str]] | None) -> None:
        """The reasons of the batch about to be shown: counts by reason code."""
        if left is None:
            self._left = "no reasons given"
            return
        counts: dict[str, int] = {}
        for _, code, _ in left:
            counts[code] = counts.get(code, 0) + 1
        self._left = " ".join(f"{code}:{n}" for code, n in counts.items()) or "-"

    def __call__(self, record: Emitted) -> None:
        if isinstance(record, Step):
            self._batch(record)
        elif "end" in record:
            return
        else:
            self._event(record)

    def _batch(self, record: Step) -> None:
        decodes, chunks = [], []
        for e in record.batch:
            if e["kind"] == "decode":
                decodes.append(f"{show_id(e['sid'])}:{show_id(e['tid'])}")
            else:
                chunks.append(f"{show_id(e['sid'])}:{show_id(e['tid'])} ({e['size']})")
        tokens = record.tokens
        if self.budget:
            style = "bold" if tokens == self.budget else ""
            used = Text(f"{tokens}/{self.budget}", style=style)
        else:
            used = Text(str(tokens))
        table = _step_table(not self._header_done)
        self._header_done = True
        table.add_row(
            str(record.step),
            Text(" ".join(decodes) or "-", style="cyan" if decodes else "dim"),
            Text(" ".join(chunks) or "-", style="green" if chunks else "dim"),
            used,
            str(record.queued),
            Text(self._left, style="yellow" if self._left != "-" else "dim"),
        )
        with whole_write():
            self.console.print(table)

    def _event(self, record: Record) -> None:
        self.console.print(event_text(record), overflow="fold")


def event_text(record: Record) -> Text:
    """A record other than a batch, as a line of the table view: a rejected submit or
    arrival, a cancel, a clear, an abort, a split step's update; any other as its fields."""
    op = record.get("op")
    at = f"  line {record.get('line')}: "
    if op in ("submit", "arrive") and record.get("accepted") is False:
        what = f"submit [{_ids(record.get('tids', ()))}]" if op == "submit" else "arrive"
        if op == "arrive":
            what += f" {_field(record.get('rid'))}"
        text = Text(f"{at}{what} rejected: ", style="red")
        text.append(str(record.get("reason")), style="bold red")
        return text
    if op == "cancel":
        return Text(
            f"{at}cancel session {_field(record.get('sid'))}, "
            f"dropped [{_ids(record.get('dropped', ()))}]",
            style="yellow",
        )
    if op == "clear":
        return Text(f"{at}clear, dropped [{_ids(record.get('dropped', ()))}]", style="magenta")
    if op == "abort":
        return Text(
            f"{at}abort {_field(record.get('rid'))} (was {record.get('was')})", style="yellow"
        )
    if op == "update":
        return Text(f"{at}update, finished [{_ids(record.get('finished', ()))}]", style="cyan")
    rest = {k: v for k, v in record.items() if k not in ("line", "op")}
    return Text(f"{at}{op} {orjson.dumps(rest, default=str).decode()}")


def _field(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary_table(totals: Totals, title: str = "summary") -> Table:
    table = Table(title=title, box=box.ROUNDED, show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows: Sequence[tuple[str, str]] = (
        ("step mode", totals.mode),
        ("steps", str(totals.steps)),
        ("accepted tasks", str(totals.accepted)),
        ("dispatched", str(totals.dispatched)),
        ("cancelled", str(totals.cancelled)),
        ("rejected submits", f"{totals.rejected} ({totals.rejected_tasks} tasks)"),
        ("still queued", str(totals.queued)),
        ("token budget", "none" if totals.budget is None else str(totals.budget)),
        ("mean token utilisation", _pct(totals.mean_utilisation)),
        ("peak token utilisation", _pct(totals.peak_utilisation)),
    )
    for what, value in rows:
        table.add_row(what, value)
    return table


_METRIC_LABELS = (
    ("steps", "get_work calls"),
    ("steps_to_drain", "steps to drain"),
    ("dispatched", "tasks dispatched"),
    ("cancelled", "tasks cancelled"),
    ("mean_tokens_per_batch", "mean tokens per batch"),
    ("mean_utilisation", "mean token utilisation"),
    ("mean_wait_steps", "mean wait (steps, submit to dispatch)"),
    ("max_wait_steps", "max wait (steps)"),
    ("worst_session_mean_wait_steps", "worst session's mean wait (steps)"),
    ("jain_fairness", "Jain's fairness index (tokens served)"),
    ("sessions", "sessions"),
)


def _metric(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if "utilisation" in key:
        return _pct(value)
    if isinstance(value, float):
        return f"{value:.3f}" if key == "jain_fairness" else f"{value:.2f}"
    return str(value)


def metrics_comparison(labels: Sequence[str], summaries: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="summary", box=box.ROUNDED, title_justify="left")
    table.add_column("metric")
    for label in labels:
        table.add_column(label, justify="right", overflow="fold")
    for key, label in _METRIC_LABELS:
        table.add_row(label, *(_metric(key, s.get(key)) for s in summaries))
    return table


def diff_view(result: Any) -> Group:
    """A DiffResult for people: the first differing step side by side, then the summary."""
    a_label, b_label = result.labels
    parts: list[Any] = [Text(f"A: {a_label}\nB: {b_label}", "bold")]
    if result.identical:
        parts.append(Text(f"identical: all {result.steps_compared} steps match", "green"))
    else:
        parts.append(
            Text(
                f"{result.steps_differing} of {result.steps_compared} steps differ"
                + (
                    f"; {result.events_differing} other record(s) differ"
                    if result.events_differing
                    else ""
                ),
                "yellow",
            )
        )
    if result.reasons_differing:  # shown, never counted: a verdict is on decisions
        parts[-1].append(
            f"; {result.reasons_differing} rejection(s) worded differently"
            " (reasons are not compared)"
        )
    first = result.first
    if first is not None:
        table = Table(
            title=f"first difference: step {first.step}", box=box.ROUNDED, title_justify="left"
        )
        table.add_column("#", justify="right")
        table.add_column("A")
        table.add_column("B")
        only_a, only_b = first.moved()
        a_keys = {id_key(t) for t in only_a}
        b_keys = {id_key(t) for t in only_b}
        a_rows = first.a or []
        b_rows = first.b or []
        for i in range(max(len(a_rows), len(b_rows), 1)):
            cells = []
            for rows, keys, style, missing in (
                (a_rows, a_keys, "red", first.a is None),
                (b_rows, b_keys, "green", first.b is None),
            ):
                if i < len(rows):
                    e = rows[i]
                    tid = e["tid"]
                    cells.append(
                        Text(
                            f"{show_id(tid)}  sid {show_id(e['sid'])} {e['kind']} {e['size']}",
                            style if id_key(tid) in keys else "",
                        )
                    )
                else:
                    cells.append(Text("(no batch)" if missing and i == 0 else "", "dim"))
            table.add_row(str(i), *cells)
        table.caption = f"only in A: [{_ids(only_a)}]   only in B: [{_ids(only_b)}]"
        resized = first.resized()
        if resized and not only_a and not only_b:
            shown = ", ".join(f"{show_id(t)} A {x} B {y}" for t, _, x, y in resized[:3])
            more = f" and {len(resized) - 3} more" if len(resized) > 3 else ""
            table.caption = f"same tasks, at other sizes: {shown}{more}"
        elif not only_a and not only_b and first.a is not None and first.b is not None:
            table.caption = "same tasks, in a different order"
        if first.fields is not None:
            a_fields, b_fields = first.fields
            table.caption = f"same batch; the record differs: A {a_fields}   B {b_fields}"
        parts.append(table)
    if result.records:
        parts.append(records_view(result))
    if result.reasons:
        parts.append(reasons_view(result))
    if any(result.summaries):
        parts.append(metrics_comparison(["A", "B"], result.summaries))
    return Group(*parts)


RECORDS_SHOWN = 50


def records_view(result: Any) -> Text:
    """Each differing record other than a batch: its kind, where, and every differing
    field with both sides' values (as JSON, so they can be copied)."""
    text = Text()
    shown = result.records[:RECORDS_SHOWN]
    text.append(f"records that differ ({result.events_differing}):\n", "bold")
    for r in shown:
        a_line, b_line = r.lines
        where = ""
        if a_line is not None and b_line is not None:
            where = f" (line {a_line})" if a_line == b_line else f" (A line {a_line}, B {b_line})"
        elif a_line is not None or b_line is not None:
            where = (
                f" (line {a_line}, only in A)" if b_line is None else f" (line {b_line}, only in B)"
            )
        text.append(f"  {r.kind}{where}:\n")
        for name, a, b in r.fields:
            text.append(f"    {name}: ")
            text.append(f"A {_json(a)}", "red")
            text.append("  ")
            text.append(f"B {_json(b)}", "green")
            text.append("\n")
    hidden = result.events_differing - len(shown)
    if hidden > 0:
        text.append(f"  and {hidden} more (diff -f json lists the first {len(result.records)})\n")
    text.rstrip()
    return text


def reasons_view(result: Any) -> Text:
    """Both sides' words for each rejection they share, where the words differ: shown
    beside the verdict, never counted in it (a policy's reasons are its own wording)."""
    shown = result.reasons[:RECORDS_SHOWN]
    text = Text(
        f"reasons worded differently ({result.reasons_differing}; the same rejections,"
        " not a difference):\n",
        "bold",
    )
    for r in shown:
        a_line, b_line = r.lines
        where = f"line {a_line}" if a_line == b_line else f"A line {a_line}, B {b_line}"
        for _, a, b in r.fields:
            text.append(f"  {r.kind} ({where}): ")
            text.append(f"A {_json(a)}", "red")
            text.append("  ")
            text.append(f"B {_json(b)}", "green")
            text.append("\n")
    hidden = result.reasons_differing - len(shown)
    if hidden > 0:
        text.append(f"  and {hidden} more (diff -f json lists the first {len(result.reasons)})\n")
    text.rstrip()
    return text


def _json(value: Any) -> str:
    if value == "(none)":
        return "(none)"
    return orjson.dumps(value).decode()


def policies_table(described: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(box=box.ROUNDED, show_lines=True, title="policies", title_justify="left")
    table.add_column("policy", style="bold", no_wrap=True)
    table.add_column("parameters (default)")
    table.add_column("rule", ratio=1)
    for d in described:
        params = "\n".join(f"{p['name']}={p['default']}  {p['help']}" for p in d["params"])
        name = Text(d["name"])
        if d["origin"] != "built-in":
            name.append(f"\n{d['origin']}", "dim")
        rule = Text(d["rule"])
        if d.get("note"):
            rule.append(f"\n{d['note']}", "yellow")
        table.add_row(name, params or "-", rule)
    return table


def _secs(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def simulation_tables(summary: Mapping[str, Any]) -> Group:
    """Latency percentiles (seconds and steps) and run totals of a simulation."""
    lat = Table(title="latency per request", box=box.ROUNDED, title_justify="left")
    lat.add_column("metric")
    for col in ("p50", "p90", "p99", "mean"):
        lat.add_column(col, justify="right")
    for key, label in (
        ("queue_delay", "queue delay"),
        ("ttft", "time to first token"),
        ("tpot", "time per output token"),
        ("e2e", "end-to-end latency"),
    ):
        secs, steps = summary[key], summary[f"{key}_steps"]
        # "~": an estimate from simulate's buckets (docs/trace-format.md).
        rough, rough_steps = secs.get("approximate", ()), steps.get("approximate", ())
        cols = ("p50", "p90", "p99", "mean")
        lat.add_row(label, *(("~" if c in rough else "") + _secs(secs[c]) for c in cols))
        dim = (Text(("~" if c in rough_steps else "") + _num(steps[c]), "dim") for c in cols)
        lat.add_row(Text(f"  {label} (steps)", "dim"), *dim)
    totals = Table(title="run", box=box.ROUNDED, show_header=False, title_justify="left")
    totals.add_column("what")
    totals.add_column("value", justify="right")
    rows = [
        ("policy", summary["policy"]),
        ("requests", str(summary["requests"])),
        (
            "finished / cancelled / rejected",
            f"{summary['finished']} / {summary['cancelled']} / {summary['rejected']}",
        ),
        ("steps", str(summary["steps"])),
        *([("preemptions", str(summary["preemptions"]))] if "preemptions" in summary else []),
        ("simulated time", _secs(summary["simulated_seconds"])),
        ("output tokens", str(summary["output_tokens"])),
        ("throughput (output tokens/s)", _num(summary["throughput_output_tokens_per_s"])),
        ("throughput (all tokens/s)", _num(summary["throughput_tokens_per_s"])),
        ("mean token utilisation", _pct(summary["mean_token_utilisation"])),
        (
            "Jain's fairness (service rate)",
            _metric("jain_fairness", summary["jain_fairness_service_rate"]),
        ),
    ]
    goodput = summary.get("goodput")
    if goodput:
        rows.append(
            (
                "goodput (requests meeting SLO)",
                f"{goodput['requests_meeting_slo']} ({_pct(goodput['fraction'])})",
            )
        )
        rows.append(("goodput (requests/s)", _num(goodput["requests_per_s"])))
    for what, value in rows:
        totals.add_row(what, value)
    return Group(lat, totals)


def stats_table(summary: Mapping[str, Any], title: str) -> Table | Group:
    table = Table(title=title, box=box.ROUNDED, show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, label in (
        *_METRIC_LABELS,
        ("rejected", "rejected submits"),
        ("queued", "still queued"),
    ):
        if key in summary:
            table.add_row(label, _metric(key, summary[key]))
    if summary.get("worst_session") is not None:
        table.add_row("worst session (longest mean wait)", show_id(summary["worst_session"]))
    longest = summary.get("longest_wait")
    if longest:
        table.add_row(
            "longest wait",
            f"task {show_id(longest['tid'])} of session {show_id(longest['sid'])}, "
            f"{longest['waited_steps']} steps, dispatched at step {longest['dispatched_at_step']}",
        )
    if "findings" in summary:
        from .findings import findings_counted

        table.add_row("findings", findings_counted(summary["findings"]))
    if "recomputed_tokens" not in summary:  # a task level's: nothing is preempted
        return table
    for what, value in preemption_rows(summary):
        table.add_row(what, value)
    return Group(table, *preemption_tables(summary))


SHOWN = 20  # rows of a preemption table on a terminal (-f json lists them all)


def preemption_rows(summary: Mapping[str, Any]) -> tuple[tuple[str, str], tuple[str, str]]:
    """A request-level run's preemptions and recompute share, in words (stats, report)."""
    count, requests = summary["preemptions"], len(summary["preempted_requests"])
    computed, recomputed = summary["computed_tokens"], summary["recomputed_tokens"]
    return (
        (
            "preemptions",
            f"{count} ({requests} request{'' if requests == 1 else 's'} preempted)"
            if count
            else "0 (no request was preempted)",
        ),
        (
            "tokens recomputed after preemption",
            f"{recomputed} of {computed} computed ({summary['recompute_share']:.2%})",
        ),
    )


def preemption_tables(summary: Mapping[str, Any]) -> list[Table]:
    """The victim of each preemption, and each request preempted, most recomputed first."""
    victims = summary["victims"]
    if not victims and not summary["preempted_requests"]:
        return []
    steps = Table(title="preemptions", box=box.ROUNDED, title_justify="left")
    for column in ("step", "request", "computed", "reached", "recomputed after", "resumed at"):
        steps.add_column(column, justify="left" if column == "request" else "right")
    for v in victims[:SHOWN]:
        resumed = "-" if v["resumed_at"] is None else str(v["resumed_at"])
        steps.add_row(
            str(v["step"]),
            show_id(v["rid"]),
            str(v["computed_tokens"]),
            str(v["reached"]),
            str(v["recomputed_tokens"]),
            resumed,
        )
    rows = sorted(summary["preempted_requests"], key=lambda r: -r["recomputed_tokens"])
    requests = Table(
        title="requests preempted, most recomputed first", box=box.ROUNDED, title_justify="left"
    )
    for column in ("request", "preemptions", "recomputed after each", "recomputed"):
        requests.add_column(column, justify="left" if column == "request" else "right")
    for r in rows[:SHOWN]:
        after = ", ".join(str(n) for n in r["recomputed_after"]) or "-"
        requests.add_row(
            show_id(r["rid"]), str(r["preemptions"]), after, str(r["recomputed_tokens"])
        )
    for table, listed in ((steps, victims), (requests, rows)):
        if len(listed) > SHOWN:
            table.caption = f"and {len(listed) - SHOWN} more (-f json lists every one)"
    return [steps, requests]


_TERM_MEANING = {
    "a": "seconds per step",
    "b": "seconds per batch token",
    "c": "seconds per decode",
    "d": "seconds per token of context",
}


def fit_table(fit: Any) -> Group:
    """A fitted cost model: its terms, and how well they explain held-out steps."""
    table = Table(title="fitted step-time model", box=box.ROUNDED, title_justify="left")
    table.add_column("term")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    for term in fit.terms:
        table.add_row(term, f"{fit.coefficients[term]:.6g}", _TERM_MEANING[term])
    mape = "n/a" if fit.mape is None else f"{fit.mape * 100:.2f}%"
    r2 = "n/a" if fit.r2 is None else f"{fit.r2:.4f}"
    lines = [
        f"{fit.steps} steps: {fit.fitted} fitted, {fit.held_out} held out; "
        f"{fit.idle} empty batches and {fit.outliers} idle gaps left out as outliers",
        f"held-out MAPE {mape}, R² {r2}",
        *fit.notes,
    ]
    return Group(table, Text("\n".join(lines)))


def _reason_text(code: str, detail: str) -> Text:
    return Text.assemble((code, "yellow"), f"  {detail}")


def step_view(view: Any) -> Group:
    """``explain --step``: the queue get_work saw, what it took, and why it left the rest."""
    where = f"trace line {view.line}" if view.line else "an implicit step"
    title = f"step {view.step} ({where}) under {view.policy}: {len(view.batch)} taken, "
    title += f"{len(view.queue) - len(view.batch)} left"
    table = Table(title=title, box=box.ROUNDED, title_justify="left")
    for column in ("tid", "sid", "kind", "size", "submitted", "age"):
        table.add_column(column, justify="right" if column in ("size", "age") else "left")
    table.add_column("outcome")
    taken = {id(t) for t in view.batch}
    reasons = {id(t): (code, detail) for t, code, detail in view.left or ()}
    for q in view.queue:
        t = q.task
        if id(t) in taken:
            outcome = Text("in the batch", "green")
        elif id(t) in reasons:
            outcome = _reason_text(*reasons[id(t)])
        else:
            outcome = Text("left (no reasons given)", "dim")
        table.add_row(
            show_id(t.tid),
            show_id(t.sid),
            t.kind.value,
            str(t.size),
            f"line {q.line}, step {q.step}",
            str(view.step - q.step),
            outcome,
        )
    return Group(table)


def lives_view(lives: Sequence[Any]) -> Group:
    """``explain --task`` or ``--session``: each task from submit to its outcome."""
    parts: list[Any] = []
    for life in lives:
        t = life.task
        head = Text(
            f"task {show_id(t.tid)} (session {show_id(t.sid)}, {t.kind.value} {t.size}): "
            f"submitted at line {life.line}, step {life.step}; "
            + (
                f"{life.outcome} at step {life.outcome_step}"
                if life.outcome_step is not None
                else life.outcome
            ),
            "bold",
        )
        parts.append(head)
        for step, code, detail in life.passed_over:
            parts.append(
                Text.assemble(f"  step {step}: passed over, ", (code, "yellow"), f"  {detail}")
            )
    return Group(*parts)


def why_left(label: str, left: Left, tids: Sequence[Id]) -> Text:
    """Why ``label``'s policy left out the given tasks (those the other side dispatched)."""
    if left is None:
        return Text(f"{label}: no reasons given", "dim")
    wanted = {id_key(t) for t in tids}
    lines = [f"why {label} left out what the other side dispatched:"]
    lines += [
        f"  {show_id(t.tid)}: {code}  {detail}"
        for t, code, detail in left
        if id_key(t.tid) in wanted
    ]
    return Text("\n".join(lines), "yellow")
