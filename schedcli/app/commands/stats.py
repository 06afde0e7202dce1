"""``schedcli stats``: the step-based metrics a recorded trace, or a dump, allows; with
``--findings``, a trace's findings counted by kind, from the same replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, BinaryIO

from ...engine.findings import CountingFindings
from ...engine.metrics import StepMetrics
from ...engine.requests.preemption import PreemptionTally
from ...engine.run import replay_metrics
from ...formats.dump import batch_tasks, read_dump
from ...formats.kinds import kind_of_stream
from ...model.errors import Option, UsageError
from ...streams.source import display_name, looked_ahead, open_binary
from ..views.progress import TraceProgress


def _dump_stats(path: str, stream: BinaryIO, allow_incomplete: bool) -> dict[str, Any]:
    metrics = StepMetrics(waits_known=False)
    preemption = PreemptionTally()  # a request level's dump: what preemption cost
    rejected = 0
    queued: int | None = None
    for record in read_dump(path, allow_incomplete=allow_incomplete, stream=stream):
        preemption.record(record)
        if "batch" in record:
            metrics.dispatched(batch_tasks(record), record["step"])
        elif record.get("op") == "submit" and record.get("accepted") is False:
            rejected += 1
        elif record.get("op") in ("cancel", "clear"):
            metrics.dropped_count += len(record.get("dropped") or ())
        elif "end" in record and isinstance(record["end"], dict):
            end_queued = record["end"].get("queued")
            queued = end_queued if type(end_queued) is int else None
    summary = metrics.summary()
    summary["rejected"] = rejected
    summary["queued"] = queued
    if preemption.request_level:
        summary.update(preemption.summary())
    return summary


def stats_of(
    path: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    drain: bool = False,
    progress: TraceProgress | None = None,
    allow_incomplete: bool = False,
    findings: bool = False,
) -> tuple[dict[str, Any], str]:
    """Metrics of ``path`` and a title saying what they are of. The input is opened and
    read once, what it is told from its first line on the way (so a pipe is read too).
    ``findings``: count the trace's findings by kind in the same replay (the policy then
    explains every step, which costs several times the replay: asked for, never default)."""
    name = display_name(path)
    with open_binary(path, name) as opened:
        kind, stream = looked_ahead(opened, lambda s: kind_of_stream(s, name))
        if kind == "dump":
            if policy is not None or params or drain:
                raise UsageError(
                    "a dump is one schedule already: --policy, --param and --drain apply to traces"
                )
            if findings:
                raise UsageError(
                    Option("findings"),
                    " needs a trace: a dump has no queue and no reasons to find them in",
                )
            return _dump_stats(path, stream, allow_incomplete), f"{name} (dump)"
        return replay_metrics(
            path,
            policy,
            params,
            drain=drain,
            allow_incomplete=allow_incomplete,
            progress=progress,
            measure_preemption=True,
            stream=stream,
            watch=CountingFindings() if findings else None,
        )


def stats_command(
    path: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    drain: bool,
    allow_incomplete: bool,
    fmt: str,
    findings: bool = False,
) -> None:
    """``schedcli stats``: the metrics of a trace (replayed) or a dump, shown."""
    from ..console import show
    from ..views.progress import trace_progress
    from ..views.render import stats_table

    progress = trace_progress("measuring", path)
    try:
        summary, title = stats_of(
            path,
            policy,
            params,
            drain=drain,
            progress=progress,
            allow_incomplete=allow_incomplete,
            findings=findings,
        )
    finally:
        progress.stop()
    show(fmt, summary, lambda data: stats_table(data, title))
