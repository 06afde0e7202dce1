"""The report's charts (matplotlib, drawn to inline SVG) and its summary table."""

from __future__ import annotations

import html
import io
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...model.errors import UsageError
from ...model.task import show_id
from ..views.render import _METRIC_LABELS, _metric, preemption_rows
from .runs import COLORS, DECODE_COL, PREFILL_COL, QUEUED_COL, Run


@contextmanager
def pyplot() -> Iterator[Any]:
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            "schedcli report draws with matplotlib: pip install 'schedcli[report]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style: Any = {
        "svg.hashsalt": "schedcli",
        "svg.fonttype": "none",  # text stays text: smaller, selectable, the page's own font
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.dpi": 96,
    }
    # Nothing a library warns of while drawing reaches the user: the page says what it
    # could not draw (an empty chart, a missing metric) in its own words.
    with matplotlib.rc_context(style), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield plt


def svg(plt: Any, fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def tokens_chart(plt: Any, runs: Sequence[Run], x_label: str) -> str:
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.3 * len(runs)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        xs, decode = run.bins.outline(DECODE_COL)
        _, prefill = run.bins.outline(PREFILL_COL)
        total = [d + p for d, p in zip(decode, prefill, strict=True)]
        ax.fill_between(xs, 0, decode, color="#3b6ea5", alpha=0.9, linewidth=0, label="decode")
        ax.fill_between(
            xs, decode, total, color="#d9822b", alpha=0.85, linewidth=0, label="prefill"
        )
        top = max(total, default=0)
        if run.budget:
            ax.axhline(run.budget, color="#444", linestyle="--", linewidth=1, label="budget")
            top = max(top, run.budget)
        ax.set_ylim(0, max(top, 1) * 1.3)
        _finding_marks(ax, run, max(top, 1) * 1.18)
        ax.set_title(run.label, loc="left", fontsize=9)
        ax.set_ylabel("tokens per step")
        ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=3)
    axes[-1, 0].set_xlabel(x_label)
    return svg(plt, fig)


# A marker and a colour per kind of finding (engine.findings.KINDS' order).
FINDING_MARKS = {
    "priority_inversion": ("v", "#b8475a"),
    "starvation": ("s", "#7b5ea7"),
    "hol_blocking": ("D", "#8c7a3c"),
    "preemption_thrash": ("X", "#d62728"),
    "skipped_running": ("o", "#17becf"),
    "decode_gap": ("|", "#444444"),
}


def _finding_marks(ax: Any, run: Run, y: float) -> None:
    """One mark per finding at its step, above the tokens, a marker per kind; the legend
    names each kind shown with its count. Each kind's marks are one SVG group whose id is
    ``findings-KIND`` (a mark a ``<use>`` in it)."""
    found = run.findings or []
    for kind, (marker, color) in FINDING_MARKS.items():
        steps = [f.step for f in found if f.kind == kind]
        if steps:
            ax.scatter(steps, [y] * len(steps), marker=marker, color=color, s=22, zorder=3,
                       label=f"{kind} ({len(steps)})", gid=f"findings-{kind}")  # fmt: skip


_LINES = ("-", "--", ":", "-.")


def _styles(runs: Sequence[Run]) -> Iterator[tuple[Run, str, str]]:
    """A colour and a dash per run, so identical schedules still show as two lines."""
    for i, run in enumerate(runs):
        yield run, COLORS[i % len(COLORS)], _LINES[i % len(_LINES)]


def queue_chart(plt: Any, runs: Sequence[Run], x_label: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for run, color, dash in _styles(runs):
        xs, queued = run.bins.outline(QUEUED_COL)
        ax.plot(xs, queued, color=color, linestyle=dash, label=run.label, linewidth=1.3)
    ax.set_xlabel(x_label)
    ax.set_ylabel("tasks queued")
    ax.legend(fontsize=8, frameon=False)
    return svg(plt, fig)


def waits_chart(plt: Any, runs: Sequence[Run], unit: str, what: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for run, color, dash in _styles(runs):
        waits = run.waits or []
        ax.plot(
            range(1, len(waits) + 1),
            waits,
            color=color,
            linestyle=dash,
            label=run.label,
            linewidth=1.3,
            marker="o" if len(waits) <= 40 else None,
            markersize=3,
        )
    ax.set_xlabel(f"{what}, longest wait first")
    ax.set_ylabel(f"wait ({unit})")
    ax.legend(fontsize=8, frameon=False)
    return svg(plt, fig)


def cdf_chart(plt: Any, runs: Sequence[Run], attr: str, label: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for run, color, dash in _styles(runs):
        values = getattr(run, attr)
        if not values:
            continue
        step = max(1, len(values) // 2000)
        picked = values[::step] + ([values[-1]] if (len(values) - 1) % step else [])
        ys = [min(1.0, (i * step + 1) / len(values)) for i in range(len(picked))]
        ax.step(
            [v * 1000 for v in picked],
            ys,
            where="post",
            color=color,
            linestyle=dash,
            label=run.label,
        )
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    return svg(plt, fig)


# --- the page --------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1000px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 2em; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 4px 12px; text-align: right; }
tr.rejected td { color: #b8475a; }
th:first-child, td:first-child { text-align: left; }
figure.chart { margin: 1.5em 0; } figure.chart svg { width: 100%; height: auto; }
figcaption { color: #555; font-size: 13px; margin-bottom: 0.4em; }
.note { color: #666; font-style: italic; }
"""


def summary_html(runs: Sequence[Run], workload: bool) -> str:
    if workload:
        keys = [
            ("requests", "requests"),
            ("finished", "finished"),
            ("steps", "steps"),
            ("throughput_output_tokens_per_s", "output tokens/s"),
            ("mean_token_utilisation", "mean token utilisation"),
            ("jain_fairness_service_rate", "Jain's fairness (service rate)"),
        ]
        rows = [(label, [_metric(k, r.summary.get(k)) for r in runs]) for k, label in keys]
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
            for q in ("p50", "p99"):
                rows.append((f"{label} {q}", [_ms(r.summary[key][q]) for r in runs]))
    else:
        rows = [
            (label, [_metric(k, r.summary.get(k)) for r in runs]) for k, label in _METRIC_LABELS
        ]
    if any("recomputed_tokens" in r.summary for r in runs):  # a request-level run
        measured = [
            preemption_rows(r.summary) if "recomputed_tokens" in r.summary else None for r in runs
        ]
        for i in range(2):
            label = next(m[i][0] for m in measured if m is not None)
            rows.append((label, [m[i][1] if m is not None else "n/a" for m in measured]))
    head = "".join(f"<th>{html.escape(r.label)}</th>" for r in runs)
    body = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{html.escape(v)}</td>" for v in values)
        + "</tr>"
        for label, values in rows
    )
    return (
        f'<table id="summary"><thead><tr><th>metric</th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def findings_html(runs: Sequence[Run], trace: str) -> str:
    """Each traced run's findings, one row each (the first ``LISTED``): step, kind, who
    waited, who ran; a run without any says so."""
    parts = []
    for r in runs:
        if r.findings is None:
            continue
        label = html.escape(r.label)
        if not r.findings:
            parts.append(f'<p class="findings">{label}: no findings.</p>')
            continue
        rows = [
            [f.step, f.kind, ", ".join(show_id(i) for i in f.waiting) or "-",
             ", ".join(show_id(i) for i in f.ran) or "-"]
            for f in r.findings
        ]  # fmt: skip
        more = f"schedcli findings {trace} lists every one, with its numbers."
        parts.append(
            f"<h3>{label}: {len(rows)} finding{'' if len(rows) == 1 else 's'}</h3>"
            + _table("findings", ["step", "kind", "waiting", "ran"], rows, more)
        )
    return "".join(parts)


LISTED = 50  # rows of a preemption table in a report (stats -f json lists them all)


def preemption_html(runs: Sequence[Run]) -> str:
    """Each request-level run's preemptions: the victim of each, and each request
    preempted, most recomputed first; a run without any says so."""
    parts = []
    for r in runs:
        s = r.summary
        if "recomputed_tokens" not in s:
            continue
        label = html.escape(r.label)
        if not s["victims"] and not s["preempted_requests"]:
            parts.append(
                f'<p class="preempt">{label}: no preemptions; 0 of {s["computed_tokens"]} '
                "computed tokens recomputed (0.00%).</p>"
            )
            continue
        victims = [
            [
                v["step"],
                show_id(v["rid"]),
                v["computed_tokens"],
                v["reached"],
                v["recomputed_tokens"],
                "-" if v["resumed_at"] is None else v["resumed_at"],
            ]
            for v in s["victims"]
        ]
        rows = sorted(s["preempted_requests"], key=lambda row: -row["recomputed_tokens"])
        requests = [
            [
                show_id(row["rid"]),
                row["preemptions"],
                ", ".join(str(n) for n in row["recomputed_after"]) or "-",
                row["recomputed_tokens"],
            ]
            for row in rows
        ]
        parts.append(
            f"<h3>{label}</h3>"
            + _table(
                "victims",
                ["step", "request", "computed", "reached", "recomputed after", "resumed at"],
                victims,
            )
            + _table(
                "preempted",
                ["request", "preemptions", "recomputed after each", "recomputed"],
                requests,
            )
        )
    return "".join(parts)


def _table(
    kind: str,
    head: list[str],
    rows: list[list[Any]],
    every: str = "schedcli stats -f json lists every one.",
) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in rows[:LISTED]
    )
    more = ""
    if len(rows) > LISTED:
        more = f'<p class="note">and {len(rows) - LISTED} more: {html.escape(every)}</p>'
    opening = f'<table class="{kind}"><thead><tr>{cells}</tr></thead>'
    return f"{opening}<tbody>{body}</tbody></table>{more}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def figure(chart_id: str, caption: str, svg: str) -> str:
    return (
        f'<figure class="chart" id="{chart_id}"><figcaption>{html.escape(caption)}</figcaption>'
        f"{svg}</figure>"
    )
