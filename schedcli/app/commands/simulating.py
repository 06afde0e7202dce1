"""``schedcli simulate``: play the runner over a workload, write what was asked."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
from rich.console import Console

from ...catalog.registry import CXX_PREFIX, RUNNER_PREFIX, build_policy, settled_params
from ...engine.cost import CostModel
from ...engine.levels.table import level_of_policy
from ...engine.replay import PolicyCrashed
from ...engine.results import Live, SimResult
from ...formats.perfetto import PerfettoWriter
from ...formats.workload import Request, read_workload
from ...formats.writer import task_entry
from ...model.errors import InvariantError, SchedcliError, UsageError
from ...model.records import Record
from ...model.task import Task
from ...streams.interrupt import Stopped, stop_reason
from ...streams.output import atomic_output
from ..report.sweep import group_reasons
from ..views.progress import ProgressBar
from ..views.render import simulation_tables

if TYPE_CHECKING:
    from ...runtimes.executorch.runner import RunnerRun


@dataclass
class SimulateRequest:
    workload: str
    policy: str = "decode-first"
    params: dict[str, str] | None = None
    output: str | None = None
    metrics: str | None = None
    perfetto: str | None = None
    chunk_size: int | None = None
    cost: CostModel = field(default_factory=CostModel)
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    json: bool = False

    def summary_to_stderr(self) -> bool:
        """``-`` is stdout for every output; at most one may claim it, and then the summary
        moves to stderr."""
        to_stdout = [
            name
            for name, value in (("-o", self.output), ("--metrics", self.metrics))
            if value == "-"
        ]
        if self.perfetto == "-":
            to_stdout.append("--perfetto")
        if len(to_stdout) > 1:
            raise UsageError(f"{' and '.join(to_stdout)} both ask for stdout; give one a FILE")
        return bool(to_stdout)


def run_simulate(req: SimulateRequest, out: Console, err: Console) -> SimResult:
    """Simulate a policy of either level, write the trace, timeline and metrics asked for,
    and show the summary."""
    to_stderr = req.summary_to_stderr()
    if req.policy.startswith(RUNNER_PREFIX):
        return run_with_runner(req, out, err, to_stderr)
    built = build_policy(req.policy, req.params or {}, level=None)
    with ExitStack() as stack:
        stack.callback(built.close)
        built.promise_serial_calls()  # the simulated runner is its only caller
        level = level_of_policy(built)
        size = level.chunking(built, req.chunk_size, req.policy)
        label = built.name or req.policy
        declared = built.params()
        trace = None
        if req.output is not None:
            stream = stack.enter_context(atomic_output(req.output))
            trace = level.trace_writer(stream, built, req.policy, declared, trace_meta(req, size))
        timeline = open_timeline(req, stack, label, built.token_budget)
        progress = _progress(req.workload, err)
        stopped: SchedcliError | Stopped | None = None
        try:
            result = level.simulate(
                read_workload(req.workload),
                built,
                policy_name=label,
                params=declared,
                chunk_size=size,
                cost=req.cost,
                trace=trace,
                slo_ttft=req.slo_ttft,
                slo_tpot=req.slo_tpot,
                on_progress=lambda requests, t: progress.update(requests, t=t),
                on_batch=_timeline_feeder(timeline) if timeline is not None else None,
                on_preempt=timeline.preempted if timeline is not None else None,
                close=False,
            )
        except (InvariantError, PolicyCrashed, Stopped) as e:
            # What was written is the run up to here: kept, and marked as such.
            stopped = e
            if trace is not None:
                trace.partial(stop_reason(e))
        finally:
            progress.stop()
        if timeline is not None:
            timeline.close()
    if stopped is not None:
        raise_kept(req, stopped, err)
    show_summary(req, result, out, err, to_stderr)
    return result


def run_with_runner(req: SimulateRequest, out: Console, err: Console, to_stderr: bool) -> SimResult:
    """``-p cxx-runner:NAME``: ExecuTorch's own runner over the workload, with the scheduler
    ``cxx:NAME`` names (docs/cxx.md, "The runner in the loop"); the summary from what the
    driver measured, in the simulated time of the same cost model."""
    from ...runtimes.executorch import runner

    if req.chunk_size is not None:
        raise UsageError(
            f"--chunk-size: {req.policy!r} runs ExecuTorch's runner, which splits prompts at "
            "its scheduler's max_prefill_chunk_size()"
        )
    if req.perfetto is not None:
        raise UsageError(f"--perfetto is not available with {req.policy!r} (ExecuTorch's runner)")
    requests = list(read_workload(req.workload))  # bad input is said before any build
    spec = runner.spec_of(req.policy)
    # The factory's parameters, -P over the spec's defaults, checked as cxx:NAME checks them.
    settled = settled_params(CXX_PREFIX + req.policy[len(RUNNER_PREFIX) :], req.params or {})
    values = runner.factory_values(spec, settled)
    exe = runner.program(spec, req.policy, lambda note: print(note, file=sys.stderr))
    meta = trace_meta(req)
    meta["runner"] = "ExecuTorch's batching::Runner (the checkout's runner.cpp), a fake executor"
    cost = (req.cost.a, req.cost.b, req.cost.c, req.cost.d)
    stopped: SchedcliError | Stopped | None = None
    with ExitStack() as stack:
        stream = stack.enter_context(atomic_output(req.output)) if req.output else None
        try:
            done = runner.run(exe, spec, values, requests, cost, stream, meta)
        except (SchedcliError, Stopped) as e:
            stopped = e  # the trace so far is kept, marked partial
    if stopped is not None:
        raise_kept(req, stopped, err)
    result = runner_result(req, spec.name, values, requests, done)
    show_summary(req, result, out, err, to_stderr)
    return result


def runner_result(
    req: SimulateRequest,
    label: str,
    values: dict[str, int],
    requests: list[Request],
    done: RunnerRun,
) -> SimResult:
    """The driver's per-request outcomes as simulate's own runner accounts them."""
    budget = values.get("max_batch_tokens")
    result = SimResult(label, dict(values), req.cost, done.chunk, budget=budget)
    result.slo_ttft, result.slo_tpot = req.slo_ttft, req.slo_tpot
    result.requests, result.steps = len(requests), done.steps
    result.batch_tokens, result.prefill_tokens = done.batch_tokens, done.prefill_tokens
    result.decode_tokens, result.end = done.decode_tokens, done.end
    result.start = requests[0].arrival if requests else 0.0
    for r, o in zip(requests, done.outcomes, strict=True):
        result.output_tokens += o.produced
        if o.first_dispatch_step >= 0:
            result.queue_delay.add(o.first_dispatch - r.arrival)
            result.queue_delay_steps.add(o.first_dispatch_step - o.arrival_step)
        if o.produced:
            result.ttft.add(o.first_token - r.arrival)
            result.ttft_steps.add(o.first_token_step - o.arrival_step)
        if o.reason in ("token limit", "stop token"):
            live = Live(r, o.arrival_step)
            live.produced = o.produced
            live.first_token, live.first_token_step = o.first_token, o.first_token_step
            live.last_token, live.last_token_step = o.last_token, o.last_token_step
            result.finished += 1
            result.finish(live)
        elif o.reason == "cancelled":
            result.cancelled += 1
        else:
            why = o.message or o.reason
            result.rejected += 1
            result.rejected_by_reason[why] = result.rejected_by_reason.get(why, 0) + 1
    return result


def raise_kept(req: SimulateRequest, stopped: BaseException, err: Console) -> NoReturn:
    """A run stopped early: its files (written whole, the trace marked partial) said, and
    the stop raised again."""
    kept = [name for name in (req.output, req.perfetto) if name not in (None, "-")]
    if kept:
        err.print(
            f"note: the run so far is in {' and '.join(str(k) for k in kept)} "
            "(the trace marked partial)",
            highlight=False,
            soft_wrap=True,
        )
    raise stopped


def show_summary(
    req: SimulateRequest, result: SimResult, out: Console, err: Console, to_stderr: bool
) -> None:
    """The metrics file, the summary (table or JSON), and a note on rejected requests."""
    summary = result.summary()
    if req.metrics:
        with atomic_output(req.metrics) as f:
            f.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    view = err if to_stderr else out
    if req.json:
        view.file.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        view.print(simulation_tables(summary))
    _note_rejections(result, err)


def open_timeline(
    req: SimulateRequest, stack: ExitStack, label: str, budget: int | None
) -> PerfettoWriter | None:
    """``--perfetto FILE``'s writer, its file closed with ``stack``; None without it."""
    if not req.perfetto:
        return None
    return PerfettoWriter(
        stack.enter_context(atomic_output(req.perfetto)),
        title=f"schedcli simulate {req.workload} ({label})",
        budget=budget,
    )


def trace_meta(req: SimulateRequest, size: int | None = None) -> Record:
    """The header meta of a trace ``simulate -o`` writes, at either level: every term of
    the cost model it ran under (``d`` too), and the chunk size a task-level run used."""
    meta: Record = {"generated_by": "schedcli simulate", "workload": req.workload}
    if size is not None:
        meta["chunk_size"] = size
    meta["cost_model"] = req.cost.as_dict()
    return meta


def _note_rejections(result: SimResult, err: Console) -> None:
    if not result.rejected:
        return
    err.print(f"note: {result.rejected} of {result.requests} requests were rejected by the policy:")
    for reason, count in group_reasons(result.rejected_by_reason):
        err.print(f"  {count}: {reason}", highlight=False, soft_wrap=True)


def _timeline_feeder(timeline: PerfettoWriter) -> Any:
    def on_batch(step: int, start: float, end: float, batch: list[Task], queued: int) -> None:
        entries = [task_entry(t) for t in batch]
        tokens = sum(t.size for t in batch)
        timeline.batch(step, start * 1e6, (end - start) * 1e6, entries, tokens, queued)

    return on_batch


def _progress(path: str, err: Console) -> ProgressBar:
    """Requests admitted (of the lines in the file) and simulated time."""
    total = None
    if path != "-" and err.is_terminal:
        try:
            with open(path, "rb") as f:
                total = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            total = None
    return ProgressBar(
        err, "simulating", total, "{task.completed} requests, t={task.fields[t]:.0f}s"
    )


def cost_model_of(path: str | None, a: float, b: float, c: float) -> CostModel:
    """--cost FILE (a fitted model) or --cost-a/-b/-c, not both."""
    default = CostModel()
    if path is None:
        return CostModel(a, b, c)
    if (a, b, c) != (default.a, default.b, default.c):
        raise UsageError("--cost FILE is a whole model: give it or --cost-a/-b/-c, not both")
    model = CostModel.load(path)
    poor = CostModel.poor_fit(path)
    if poor:
        from ..usage import warn_poor_fit

        warn_poor_fit(poor, f"the fit in {path}")
    return model
