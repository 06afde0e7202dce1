"""``schedcli report``: one self-contained HTML file with the charts of a schedule.

Charts are drawn with matplotlib (the optional ``report`` extra) as inline SVG: vector,
crisp at any zoom, no JavaScript and nothing fetched, so the file works offline and is
the same bytes for the same input. Long runs are folded into at most a few hundred bins
per series, which keeps the file small and the memory flat.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ...engine.cost import CostModel
from ...formats.kinds import sniff_kind
from ...model.errors import Option, UsageError
from ...streams.source import display_name
from ..views.progress import TraceProgress
from .charts import (
    CSS,
    cdf_chart,
    figure,
    findings_html,
    preemption_html,
    pyplot,
    queue_chart,
    summary_html,
    svg,
    tokens_chart,
    waits_chart,
)
from .runs import from_dump, from_trace, from_workload, parse_config
from .sweep import read_sweep, sweep_figures, sweep_summary


def _sweep_page(path: str) -> str:
    records = read_sweep(path)
    name = display_name(path)
    with pyplot() as plt:
        figures = sweep_figures(plt, records, svg, figure)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedcli report: {html.escape(name)}</title><style>{CSS}</style></head><body>"
        f'<h1>schedcli report</h1><p class="sub">{html.escape(name)} (sweep) &middot; '
        f"{len(records)} points</p>"
        f"<h2>Summary</h2>{sweep_summary(records)}"
        f"<h2>Charts</h2>{''.join(figures)}</body></html>\n"
    )


def build_report(
    path: str,
    configs: Sequence[str],
    *,
    cost: CostModel | None = None,
    progress: TraceProgress | None = None,
    allow_incomplete: bool = False,
    findings: bool = False,
) -> str:
    """The report's HTML for a trace, a dump, a workload or sweep results; ``findings``:
    a trace's findings marked and listed (refused for anything else)."""
    kind = sniff_kind(path)
    if findings and kind != "trace":
        raise UsageError(
            Option("findings"),
            " needs a trace: a dump, a workload or sweep results hold no queue and no "
            "policy's reasons to find them in",
        )
    parsed = [parse_config(c) for c in configs]
    if kind == "sweep":
        if parsed:
            raise UsageError("sweep results are many runs already: --policy does not apply")
        return _sweep_page(path)
    if kind == "dump" and parsed:
        raise UsageError("a dump is one schedule already: --policy applies to traces and workloads")
    if kind == "trace":
        runs = from_trace(path, parsed, progress, allow_incomplete, findings)
        x_label = "step"
    elif kind == "dump":
        runs = from_dump(path, allow_incomplete)
        x_label = "step"
    else:
        runs = from_workload(path, parsed, cost or CostModel())
        x_label = "simulated time (s)"
    name = display_name(path)
    with pyplot() as plt:
        figures = [
            figure(
                "tokens",
                "Tokens per step, decode and prefill, against the token budget "
                "(averaged over bins of steps on long runs)"
                + (
                    "; above them, a mark per finding at its step, a marker per kind "
                    "(docs/findings.md)."
                    if findings
                    else "."
                ),
                tokens_chart(plt, runs, x_label),
            ),
            figure("queue", "Tasks queued after each step.", queue_chart(plt, runs, x_label)),
        ]
        if kind == "trace" and runs and runs[0].waits:
            figures.append(
                figure(
                    "waits",
                    "Mean wait per session, in steps from submit to dispatch.",
                    waits_chart(plt, runs, "steps", "sessions"),
                )
            )
        elif kind == "workload":
            figures.append(
                figure(
                    "waits",
                    "Queue delay per request (session), arrival to first dispatch.",
                    waits_chart(plt, runs, "s", "requests"),
                )
            )
            figures.append(
                figure(
                    "ttft",
                    "Time to first token, per policy (CDF).",
                    cdf_chart(plt, runs, "ttft", "TTFT"),
                )
            )
            figures.append(
                figure(
                    "tpot",
                    "Time per output token, per policy (CDF).",
                    cdf_chart(plt, runs, "tpot", "TPOT"),
                )
            )
    notes = ""
    if kind == "dump":
        notes = (
            '<p class="note">Waits per session need submit times, which a dump does not hold: '
            "report on the trace to see them.</p>"
        )
    if findings:
        notes += (
            "<h2>Findings</h2><p>Each anomaly at the step that shows it (docs/findings.md), "
            "at its default bounds: who waited, who ran.</p>" + findings_html(runs, name)
        )
    elif kind == "trace":
        notes += (
            '<p class="note">Findings are marked with --findings (docs/findings.md): the '
            "policy then explains every step, which costs several times the replay.</p>"
        )
    policies = ", ".join(html.escape(r.label) for r in runs)
    preempted = preemption_html(runs)  # request-level runs only
    if preempted:
        notes += (
            "<h2>Preemptions</h2><p>Each preemption's victim: what it had computed, and the "
            "tokens it computed again after (positions it had computed before).</p>" + preempted
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedcli report: {html.escape(name)}</title><style>{CSS}</style></head><body>"
        f'<h1>schedcli report</h1><p class="sub">{html.escape(name)} ({kind}) &middot; '
        f"{policies}</p>"
        f"<h2>Summary</h2>{summary_html(runs, kind == 'workload')}{notes}"
        f"<h2>Charts</h2>{''.join(figures)}</body></html>\n"
    )
