"""The runs a report draws: each configuration's steps folded into bins, read from a
trace (replayed), a dump, or a workload (simulated)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...catalog.registry import build_policy, config_label
from ...engine.cost import CostModel
from ...engine.findings import DEFAULTS, Detectors, Finding, step_hooks
from ...engine.levels.table import level_named, level_of_policy
from ...engine.metrics import StepMetrics
from ...engine.requests.preemption import PreemptionTally
from ...engine.run import open_replay
from ...formats.dump import batch_tasks, read_dump
from ...formats.workload import read_workload
from ...model.errors import UsageError
from ...model.records import Record, discard
from ...model.task import DECODE, Task
from ...streams.source import display_name
from ..views.progress import TraceProgress

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
    findings: list[Finding] | None = None  # a trace's (None: a dump's or a workload's)


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


def from_trace(
    path: str,
    configs: Sequence[tuple[str, dict[str, str]]],
    progress: TraceProgress | None = None,
    allow_incomplete: bool = False,
    findings: bool = False,
) -> list[Run]:
    """A trace (either level) replayed under each configuration, binned by step; with
    ``findings``, its findings too (at ``findings``' default bounds: the policy then
    explains every step, which costs several times the replay)."""
    runs = []
    chosen: Sequence[tuple[str | None, dict[str, str]]] = configs or [(None, {})]
    for spec, params in chosen:
        with open_replay(
            path, policy=spec, params=params, allow_incomplete=allow_incomplete
        ) as opened:
            run = Run(config_label(opened.policy_name, opened.params), opened.token_budget)
            metrics = opened.step_metrics()
            on_step = None
            if progress is not None:
                progress.position = opened.reader.position
                on_step = progress.on_step
            binning = _Binning(run, metrics)
            if findings:
                # The bins come from the observer, the findings from the adapter (which
                # reads a request level's step records; a task level then builds none).
                detectors = Detectors(DEFAULTS)
                hooks = step_hooks(opened, detectors.step, also=binning)
                engine = opened.replayer(
                    hooks.emit,
                    observer=hooks.observer,
                    on_step=on_step,
                    measure_preemption=True,
                    on_left=hooks.on_left,
                    on_accepted=hooks.on_accepted,
                )
            else:  # the bins come from the observer: the engine then builds no step records
                engine = opened.replayer(
                    discard, observer=binning, on_step=on_step, measure_preemption=True
                )
            binning.queued = engine.queued_count
            engine.replay()
            if findings:
                run.findings = detectors.finish()
            run.summary = metrics.summary() | engine.level_summary()
            if metrics.waits_known:  # a request's waits are not known from its steps
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


def from_dump(path: str, allow_incomplete: bool) -> list[Run]:
    run = Run(display_name(path), None)
    metrics = StepMetrics(waits_known=False)
    preemption = PreemptionTally()
    for record in read_dump(path, allow_incomplete=allow_incomplete):
        _bin(run, record, metrics)
        preemption.record(record)
    run.summary = metrics.summary()
    if preemption.request_level:
        run.summary |= preemption.summary()
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


def from_workload(
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
        preemption = PreemptionTally() if level_named(policy.level).preempts else None

        def on_batch(
            step: int, start: float, end: float, batch: list[Task], queued: int, run: Run = run
        ) -> None:
            decode = sum(1 for t in batch if t.kind is DECODE)
            run.bins.add(start, sum(t.size for t in batch) - decode, decode, queued)

        result = level_of_policy(policy).simulate(
            read_workload(path),
            policy,
            policy_name=label,
            params=declared,
            cost=cost,
            on_batch=on_batch,
            preemption=preemption,
            keep_values=True,  # the charts draw every request's figures
        )
        run.summary = result.summary()
        if preemption is not None:
            run.summary |= preemption.summary()
        run.waits = sorted(result.queue_delay.values, reverse=True)
        run.ttft = sorted(result.ttft.values)
        run.tpot = sorted(result.tpot.values)
        runs.append(run)
    return runs


# --- drawing -------------------------------------------------------------------------
