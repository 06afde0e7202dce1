"""``simulate`` and ``replay`` for request-level policies (``-p vllm``) and traces."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ..engine.replay import PolicyCrashed
from ..engine.request_replay import (
    RequestExpectMismatch,
    RequestReplayer,
    policy_for_request_trace,
    refuse_partial,
)
from ..engine.request_sim import simulate_requests
from ..engine.simulate import SimResult
from ..formats.interrupt import Stopped, stop_reason
from ..formats.output import atomic_output
from ..formats.requests import RequestReader, RequestTraceWriter
from ..formats.trace import open_trace
from ..formats.workload import read_workload
from ..model.errors import CheckFailed, InputError, InvariantError, SchedcliError, UsageError
from ..policies.registry import build_request_policy
from .outputs import Fanout, Opened

if TYPE_CHECKING:
    from rich.console import Console

    from .replaying import ReplayRequest
    from .simulating import SimulateRequest


def run_request_simulate(req: SimulateRequest, out: Console, err: Console) -> SimResult:
    """``simulate -p vllm``: the workload through a request-level policy (see run_simulate)."""
    if req.chunk_size is not None:
        raise UsageError(
            f"--chunk-size is for task-level policies; {req.policy!r} chunks prompts itself "
            "(max_num_batched_tokens, long_prefill_token_threshold)"
        )
    from .simulating import _progress, _timeline_feeder, open_timeline, raise_kept, show_summary

    to_stderr = req.summary_to_stderr()
    policy = build_request_policy(req.policy, req.params or {})
    label = policy.name or req.policy
    declared = policy.params()
    with ExitStack() as stack:
        stack.callback(policy.close)
        trace: RequestTraceWriter | None = None
        if req.output is not None:
            cost = req.cost
            meta = {
                "generated_by": "schedcli simulate",
                "workload": req.workload,
                "cost_model": cost.as_dict(),
            }
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


def run_request_replay(
    req: ReplayRequest, err: Callable[[], Console], outputs_for: Callable[..., list[Any]]
) -> None:
    """``replay`` of a request-level trace: views, --check, --golden, --perfetto."""
    with ExitStack() as stack:
        reader = stack.enter_context(open_trace(req.trace, max_line_bytes=req.max_line_bytes))
        assert reader.header is not None
        policy, label = policy_for_request_trace(
            reader.header, reader.name, req.policy, req.params or {}
        )
        stack.callback(policy.close)
        engine: RequestReplayer | None = None
        outputs = outputs_for(stack, lambda: engine)
        opened = Opened(
            reader.name, label, policy.token_budget, lambda: engine.totals.steps if engine else 0
        )
        for output in outputs:
            output.opened(opened)
        fan = Fanout(outputs)
        engine = RequestReplayer(
            policy,
            fan.emit,
            policy_name=label,
            check=req.check,
            drain=req.drain,
            on_left=fan.on_left,
            trace_name=reader.name,
        )
        events = RequestReader(reader)
        try:
            totals = engine.run(events, lambda: refuse_partial(events, req.allow_incomplete))
        except RequestExpectMismatch as e:
            for output in outputs:
                output.close(None, e)
            from .render_requests import request_mismatch_view

            err().print(request_mismatch_view(e.mismatch))
            raise
        except (SchedcliError, Stopped) as e:
            for output in outputs:
                output.close(None, e)
            raise
        for output in outputs:
            output.close(totals, None)
    if req.check:
        if engine.checked == 0:
            raise InputError(
                reader.name, None, "nothing to check: no step in this trace records an expect"
            )
        err().print(f"{reader.name}: {engine.checked_text()}", soft_wrap=True, highlight=False)
        total = engine.step_events + engine.update_events
        if req.require_all and engine.checked < total:
            raise CheckFailed(
                f"{reader.name}: {total - engine.checked} of {total} recorded calls record no "
                "expect (--require-all)"
            )
    for output in outputs:
        verdict = getattr(output, "verdict", None)
        if verdict is not None:
            verdict()


def request_stats(
    path: str, policy: str | None, params: dict[str, Any], *, drain: bool, allow_incomplete: bool
) -> tuple[dict[str, Any], str]:
    """``stats`` of a request-level trace: replayed, its steps measured as a dump's are."""
    from ..engine.request_replay import request_trace_metrics
    from ..formats.source import display_name

    summary, label = request_trace_metrics(
        path, policy, params, drain=drain, allow_incomplete=allow_incomplete
    )
    return summary, f"{display_name(path)} under {label}"


def validate_request_trace(
    path: str,
    collect: Callable[[InputError], None],
    policy: str | None,
    params: dict[str, Any],
    allow_incomplete: bool,
) -> int:
    """Every problem of a request-level trace to ``collect``; the valid events. The
    policy's parameters are checked as a replay would take them, without building it."""
    from ..policies.registry import check_request_params

    with open_trace(path, on_error=collect) as reader:
        header = reader.header
        if header is None:  # a header the reader refused: collected already, nothing to read
            return 0
        spec = policy or header.policy
        given = dict(header.params) if policy in (None, header.policy) else {}
        given.update(params)
        try:
            if spec is None:
                raise InputError(reader.name, header.line, "a request-level trace names its policy")
            check_request_params(spec, given)
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
