"""``schedcli report``: one self-contained HTML file with the charts of a schedule.

Charts are drawn with matplotlib (the optional ``report`` extra) as inline SVG: vector,
crisp at any zoom, no JavaScript and nothing fetched, so the file works offline and is
the same bytes for the same input. Long runs are folded into at most a few hundred bins
per series, which keeps the file small and the memory flat.
"""

from __future__ import annotations

import html
import io
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..engine.cost import CostModel
from ..engine.metrics import StepMetrics
from ..engine.requests.simulate import simulate_either
from ..engine.run import open_replay
from ..formats.dump import batch_tasks, read_dump
from ..formats.kinds import sniff_kind
from ..formats.source import display_name
from ..formats.workload import read_workload
from ..model.errors import UsageError
from ..model.records import Record, discard
from ..model.task import DECODE, Task
from ..policies.registry import build_policy, config_label
from .progress import TraceProgress
from .render import _METRIC_LABELS, _metric
from .sweep_report import read_sweep, sweep_figures, sweep_summary

MAX_BINS = 400
COLORS = ("#3b6ea5", "#d9822b", "#3a9e6e", "#b8475a", "#7b5ea7", "#8c7a3c")


class Bins:
    """Per-step values in at most ``2 * MAX_BINS`` bins of equal width on the x axis.

    x is the step number or the simulated time; the width doubles (neighbours merge)
    whenever the run outgrows the bins, so memory stays flat however long it is. Bins
    with no step stay absent, so idle time is drawn as idle.
    """

    def __init__(self, max_bins: int = MAX_BINS, width: float = 1.0) -> None:
        self.max_bins = max_bins
        self.width = width
        self.origin: float | None = None
        # bin index -> [steps, prefill sum, decode sum, queued sum]
        self.bins: dict[int, list[float]] = {}

    def add(self, x: float, prefill: int, decode: int, queued: int) -> None:
        if self.origin is None:
            self.origin = x
        k = int((x - self.origin) // self.width)
        while k >= 2 * self.max_bins:
            self._halve()
            k = int((x - self.origin) // self.width)
        b = self.bins.get(k)
        if b is None:
            self.bins[k] = [1, prefill, decode, queued]
        else:
            b[0] += 1
            b[1] += prefill
            b[2] += decode
            b[3] += queued

    def _halve(self) -> None:
        merged: dict[int, list[float]] = {}
        for k, b in self.bins.items():
            m = merged.get(k // 2)
            if m is None:
                merged[k // 2] = list(b)
            else:
                for i in range(4):
                    m[i] += b[i]
        self.bins = merged
        self.width *= 2

    def outline(self, column: int) -> tuple[list[float], list[float]]:
        """A step outline of one column's mean per step: flat over each bin, 0 where none."""
        xs: list[float] = []
        ys: list[float] = []
        origin = self.origin or 0.0
        last = None
        for k, b in self.bins.items():
            x0 = origin + k * self.width
            if last is not None and k > last + 1:
                xs += [xs[-1], x0]
                ys += [0.0, 0.0]
            mean = b[column] / b[0]
            xs += [x0, x0 + self.width]
            ys += [mean, mean]
            last = k
        return xs, ys


PREFILL_COL, DECODE_COL, QUEUED_COL = 1, 2, 3


@dataclass
class Run:
    """One configuration's results, as the charts need them."""

    label: str
    budget: int | None
    bins: Bins = field(default_factory=Bins)
    waits: list[float] | None = None  # per session (steps) or per request (seconds)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def parse_config(text: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME,KEY=VALUE,...`` (a plugin's module:Class works as NAME)."""
    name, *pairs = text.split(",")
    params: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--policy {text!r}: expected NAME or NAME,KEY=VALUE,...")
        params[key.strip()] = value.strip()
    if not name.strip():
        raise UsageError(f"--policy {text!r}: no policy name")
    return name.strip(), params


def _from_trace(
    path: str,
    configs: Sequence[tuple[str, dict[str, str]]],
    progress: TraceProgress | None = None,
    allow_incomplete: bool = False,
) -> list[Run]:
    """A trace (either level) replayed under each configuration, binned by step."""
    runs = []
    chosen: Sequence[tuple[str | None, dict[str, str]]] = configs or [(None, {})]
    for spec, params in chosen:
        with open_replay(
            path, policy=spec, params=params, allow_incomplete=allow_incomplete
        ) as opened:
            run = Run(config_label(opened.policy_name, opened.params), opened.token_budget)
            task_level = opened.level == "task"
            metrics = StepMetrics(run.budget, waits_known=task_level)
            on_step = None
            if progress is not None:
                progress.position = opened.reader.position
                on_step = progress.on_step
            binning = _Binning(run, metrics)
            # The bins come from the observer: the engine then builds no step records.
            engine = opened.replayer(discard, observer=binning, on_step=on_step)
            binning.queued = engine.queued_count
            opened.run(engine)
            run.summary = metrics.summary() | engine.level_summary()
            if task_level:  # a request's waits are not known from its steps
                run.waits = sorted(metrics.session_mean_waits(), reverse=True)
            runs.append(run)
    return runs


class _Binning:
    """A replay's observer for a report: the metrics, and each batch into the run's bins
    (the engine's ledger has let the batch go when it is told: ``queue`` is what is left)."""

    def __init__(self, run: Run, metrics: StepMetrics) -> None:
        self.run, self.metrics = run, metrics
        self.queued: Callable[[], int] = lambda: 0  # the engine's, once it is made

    def accepted(self, tasks: list[Task], step: int) -> None:
        self.metrics.accepted(tasks, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        m = self.metrics
        before = m.decode_tokens
        m.dispatched(batch, step)
        decode = m.decode_tokens - before
        tokens = sum(t.size for t in batch)
        self.run.bins.add(step, tokens - decode, decode, self.queued())

    def dropped(self, tasks: list[Task], step: int) -> None:
        self.metrics.dropped(tasks, step)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        pass


def _from_dump(path: str, allow_incomplete: bool) -> list[Run]:
    run = Run(display_name(path), None)
    metrics = StepMetrics(waits_known=False)
    for record in read_dump(path, allow_incomplete=allow_incomplete):
        _bin(run, record, metrics)
    run.summary = metrics.summary()
    return [run]


def _bin(run: Run, record: Record, metrics: StepMetrics | None = None) -> None:
    """A dump's batch record into the run's bins (and ``metrics``)."""
    if "batch" in record:
        tasks = batch_tasks(record)
        decode = sum(1 for t in tasks if t.kind is DECODE)
        tokens = sum(t.size for t in tasks)
        run.bins.add(record["step"], tokens - decode, decode, record["queued"])
        if metrics is not None:
            metrics.dispatched(tasks, record["step"])


def _from_workload(
    path: str, configs: Sequence[tuple[str, dict[str, str]]], cost: CostModel
) -> list[Run]:
    runs = []
    for spec, params in configs or [("decode-first", {})]:
        policy = build_policy(spec, params, level=None)
        declared = policy.params()
        label = config_label(
            policy.name or spec, {k: declared.get(k, v) for k, v in params.items()}
        )
        run = Run(label, policy.token_budget, Bins(width=0.01))

        def on_batch(
            step: int, start: float, end: float, batch: list[Task], queued: int, run: Run = run
        ) -> None:
            decode = sum(1 for t in batch if t.kind is DECODE)
            run.bins.add(start, sum(t.size for t in batch) - decode, decode, queued)

        result = simulate_either(
            read_workload(path),
            policy,
            policy_name=label,
            params=declared,
            cost=cost,
            on_batch=on_batch,
        )
        run.summary = result.summary()
        run.waits = sorted(result.queue_delay, reverse=True)
        run.ttft = sorted(result.ttft)
        run.tpot = sorted(result.tpot)
        runs.append(run)
    return runs


# --- drawing -------------------------------------------------------------------------


@contextmanager
def _pyplot() -> Iterator[Any]:
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


def _svg(plt: Any, fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _tokens_chart(plt: Any, runs: Sequence[Run], x_label: str) -> str:
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
        ax.set_title(run.label, loc="left", fontsize=9)
        ax.set_ylabel("tokens per step")
        ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=3)
    axes[-1, 0].set_xlabel(x_label)
    return _svg(plt, fig)


_LINES = ("-", "--", ":", "-.")


def _styles(runs: Sequence[Run]) -> Iterator[tuple[Run, str, str]]:
    """A colour and a dash per run, so identical schedules still show as two lines."""
    for i, run in enumerate(runs):
        yield run, COLORS[i % len(COLORS)], _LINES[i % len(_LINES)]


def _queue_chart(plt: Any, runs: Sequence[Run], x_label: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for run, color, dash in _styles(runs):
        xs, queued = run.bins.outline(QUEUED_COL)
        ax.plot(xs, queued, color=color, linestyle=dash, label=run.label, linewidth=1.3)
    ax.set_xlabel(x_label)
    ax.set_ylabel("tasks queued")
    ax.legend(fontsize=8, frameon=False)
    return _svg(plt, fig)


def _waits_chart(plt: Any, runs: Sequence[Run], unit: str, what: str) -> str:
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
    return _svg(plt, fig)


def _cdf_chart(plt: Any, runs: Sequence[Run], attr: str, label: str) -> str:
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
    return _svg(plt, fig)


# --- the page --------------------------------------------------------------------------

_CSS = """
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


def _summary_html(runs: Sequence[Run], workload: bool) -> str:
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


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def _figure(chart_id: str, caption: str, svg: str) -> str:
    return (
        f'<figure class="chart" id="{chart_id}"><figcaption>{html.escape(caption)}</figcaption>'
        f"{svg}</figure>"
    )


def _sweep_page(path: str) -> str:
    records = read_sweep(path)
    name = display_name(path)
    with _pyplot() as plt:
        figures = sweep_figures(plt, records, _svg, _figure)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedcli report: {html.escape(name)}</title><style>{_CSS}</style></head><body>"
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
) -> str:
    """The report's HTML for a trace, a dump, a workload or sweep results."""
    kind = sniff_kind(path)
    parsed = [parse_config(c) for c in configs]
    if kind == "sweep":
        if parsed:
            raise UsageError("sweep results are many runs already: --policy does not apply")
        return _sweep_page(path)
    if kind == "dump" and parsed:
        raise UsageError("a dump is one schedule already: --policy applies to traces and workloads")
    if kind == "trace":
        runs = _from_trace(path, parsed, progress, allow_incomplete)
        x_label = "step"
    elif kind == "dump":
        runs = _from_dump(path, allow_incomplete)
        x_label = "step"
    else:
        runs = _from_workload(path, parsed, cost or CostModel())
        x_label = "simulated time (s)"
    name = display_name(path)
    with _pyplot() as plt:
        figures = [
            _figure(
                "tokens",
                "Tokens per step, decode and prefill, against the token budget "
                "(averaged over bins of steps on long runs).",
                _tokens_chart(plt, runs, x_label),
            ),
            _figure("queue", "Tasks queued after each step.", _queue_chart(plt, runs, x_label)),
        ]
        if kind == "trace" and runs and runs[0].waits:
            figures.append(
                _figure(
                    "waits",
                    "Mean wait per session, in steps from submit to dispatch.",
                    _waits_chart(plt, runs, "steps", "sessions"),
                )
            )
        elif kind == "workload":
            figures.append(
                _figure(
                    "waits",
                    "Queue delay per request (session), arrival to first dispatch.",
                    _waits_chart(plt, runs, "s", "requests"),
                )
            )
            figures.append(
                _figure(
                    "ttft",
                    "Time to first token, per policy (CDF).",
                    _cdf_chart(plt, runs, "ttft", "TTFT"),
                )
            )
            figures.append(
                _figure(
                    "tpot",
                    "Time per output token, per policy (CDF).",
                    _cdf_chart(plt, runs, "tpot", "TPOT"),
                )
            )
    notes = ""
    if kind == "dump":
        notes = (
            '<p class="note">Waits per session need submit times, which a dump does not hold: '
            "report on the trace to see them.</p>"
        )
    policies = ", ".join(html.escape(r.label) for r in runs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedcli report: {html.escape(name)}</title><style>{_CSS}</style></head><body>"
        f'<h1>schedcli report</h1><p class="sub">{html.escape(name)} ({kind}) &middot; '
        f"{policies}</p>"
        f"<h2>Summary</h2>{_summary_html(runs, kind == 'workload')}{notes}"
        f"<h2>Charts</h2>{''.join(figures)}</body></html>\n"
    )


def report_command(
    path: str,
    output: str,
    configs: Sequence[str],
    cost: CostModel,
    *,
    allow_incomplete: bool,
) -> None:
    """``schedcli report``: the page, written atomically, and its size said."""
    from ..formats.output import atomic_output
    from .progress import trace_progress

    progress = trace_progress("reporting", path)
    try:
        page = build_report(
            path, configs, cost=cost, progress=progress, allow_incomplete=allow_incomplete
        )
    finally:
        progress.stop()
    with atomic_output(output) as out:
        out.write(page.encode())
    print(f"wrote {output} ({len(page) // 1024} KiB)", file=sys.stderr)
