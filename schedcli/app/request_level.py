"""``simulate`` of a request-level policy (``-p vllm``); ``validate`` of a request-level trace."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ..engine.replay import PolicyCrashed
from ..engine.request_replay import (
    check_request_trace_params,
    refuse_partial,
)
from ..engine.request_sim import simulate_requests
from ..engine.simulate import SimResult
from ..formats.interrupt import Stopped, stop_reason
from ..formats.output import atomic_output
from ..formats.requests import RequestReader, RequestTraceWriter
from ..formats.trace import open_trace
from ..formats.workload import read_workload
from ..model.errors import InputError, InvariantError, SchedcliError, UsageError
from ..policies.registry import build_request_policy

if TYPE_CHECKING:
    from rich.console import Console

    from .simulating import SimulateRequest


def run_request_simulate(req: SimulateRequest, out: Console, err: Console) -> SimResult:
    """``simulate -p vllm``: the workload through a request-level policy (see run_simulate)."""
    if req.chunk_size is not None:
        raise UsageError(
            f"--chunk-size is for task-level policies; {req.policy!r} chunks prompts itself "
            "(max_num_batched_tokens, long_prefill_token_threshold)"
        )
    from .simulating import (
        _progress,
        _timeline_feeder,
        open_timeline,
        raise_kept,
        show_summary,
        trace_meta,
    )

    to_stderr = req.summary_to_stderr()
    policy = build_request_policy(req.policy, req.params or {})
    label = policy.name or req.policy
    declared = policy.params()
    with ExitStack() as stack:
        stack.callback(policy.close)
        trace: RequestTraceWriter | None = None
        if req.output is not None:
            meta = trace_meta(req)
            # The header names the policy as given (vllm, or module:Class): what loads it.
            trace = RequestTraceWriter(
                stack.enter_context(atomic_output(req.output)), req.policy, declared, meta
            )
        timeline = open_timeline(req, stack, label, policy.token_budget)
        progress = _progress(req.workload, err)
        stopped: SchedcliError | Stopped | None = None
        try:
            result = simulate_requests(
                read_workload(req.workload),
                policy,
                policy_name=label,
                params=declared,
                cost=req.cost,
                trace=trace,
                slo_ttft=req.slo_ttft,
                slo_tpot=req.slo_tpot,
                on_progress=lambda requests, t: progress.update(requests, t=t),
                on_batch=_timeline_feeder(timeline) if timeline is not None else None,
                on_preempt=timeline.preempted if timeline is not None else None,
            )
        except (InvariantError, PolicyCrashed, Stopped) as e:
            stopped = e  # the files keep the run so far, the trace marked partial
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


def validate_request_trace(
    path: str,
    collect: Callable[[InputError], None],
    policy: str | None,
    params: dict[str, Any],
    allow_incomplete: bool,
) -> int:
    """Every problem of a request-level trace to ``collect``; the valid events. The
    policy's parameters are checked as a replay would take them, without building it."""
    with open_trace(path, on_error=collect) as reader:
        header = reader.header
        if header is None:  # a header the reader refused: collected already, nothing to read
            return 0
        try:
            check_request_trace_params(header, reader.name, policy, params)
        except InputError as e:
            collect(e)
        except UsageError as e:
            collect(InputError(reader.name, header.line, str(e)))
        events = RequestReader(reader, collect)
        count = sum(1 for _ in events)
        try:
            refuse_partial(events, allow_incomplete)
        except InputError as e:
            collect(e)
    return count
