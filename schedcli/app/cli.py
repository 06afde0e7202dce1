"""The commands: each is its options (declared in ``options.py``) and one library call.
``entry.py`` runs them and maps every exception to its exit code, in one place.
"""

# Annotations are evaluated here, not postponed: typer reads a command's signature at each
# start, and a postponed annotation is a string it compiles and evaluates (for --help, 25M
# of its 338M instructions).
import copy
import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from .. import CORE
from ..formats.source import DEFAULT_MAX_LINE_BYTES
from . import options as o
from .console import PipeClosed, data_console, show, stderr_console
from .parsing import StepRange, parse_id_option
from .views.progress import trace_progress

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 a check found a difference; 2 bad input or usage; "
    "3 a policy broke the Scheduler contract (a policy bug); 4 an internal error of schedcli; "
    "130 interrupted; 143 terminated."
)

app = typer.Typer(
    name="schedcli",
    help="Replay LLM-serving scheduler traffic through batching policies.\n\n"
    + EXIT_CODES_HELP
    + "\n\nAny command takes --executorch PATH: the ExecuTorch checkout that "
    "-p cxx:decode-first builds (docs/cxx.md); and --stall-steps N: the steps in a row "
    "without a batch, with work queued, after which a policy not proven stuck is stopped "
    "(default 1000; docs/policies.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable[..., Any])


def command(fn: F) -> F:
    """Registers a command whose broken pipe ends the run quietly, not as an error."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        o.check_numbers(kwargs)
        o.check_paths(kwargs)
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed() from None

    # The docstring's first paragraph, whole: the command list never cuts it short.
    summary = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
    app.command(short_help=summary)(guarded)
    return fn


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs ``args``: when they start with a command's name, an app of that
    one command (typer builds every command it holds from the function's signature at
    each start, 25 ms for all of them); else the whole app (its help, its own options, a
    name it does not know). Either way a command parses and answers the same."""
    if args and not args[0].startswith("-"):
        for info in app.registered_commands:
            if info.callback is not None and _command_name(info.callback) == args[0]:
                one = copy.copy(app)
                one.registered_commands = [info]
                return one
    return app


def _command_name(fn: Callable[..., Any]) -> str:
    from typer.main import get_command_name

    return get_command_name(fn.__name__)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"schedcli {__version__} ({CORE})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Replay LLM-serving scheduler traffic through batching policies."""


@command
def replay(
    trace: o.TraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    fmt: o.FmtOption = None,
    output: o.OutputOption = None,
    steps: o.StepsOption = None,
    session: o.SessionOption = None,
    drain: o.DrainOption = False,
    check: o.CheckOption = False,
    require_all: o.RequireAllOption = False,
    golden: o.GoldenOption = None,
    update_golden: o.UpdateGoldenOption = False,
    max_line_bytes: o.MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    perfetto: o.PerfettoOption = None,
    follow: o.FollowOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
) -> None:
    """Replay a trace through a policy and show or dump every batch.

    Exit codes: 0 ok; 1 --check or --golden found a difference; 2 bad input or usage;
    3 the policy broke the Scheduler contract; 130 interrupted; 143 terminated.
    """
    from .commands.replaying import ReplayRequest, run_replay

    request = ReplayRequest(
        trace,
        policy=policy,
        params=o.parse_params(param),
        fmt=fmt,
        output=output,
        steps=StepRange.parse(steps) if steps is not None else None,
        session=parse_id_option(session) if session is not None else None,
        drain=drain,
        check=check,
        require_all=require_all,
        golden=golden,
        update_golden=update_golden,
        max_line_bytes=max_line_bytes,
        perfetto=perfetto,
        follow=follow,
        allow_incomplete=allow_incomplete,
    )
    quiet = request.view_format() == "table" and output is None
    run_replay(request, stderr_console, trace_progress("replaying", trace, not quiet))


@command
def validate(
    trace: o.TraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    max_line_bytes: o.MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    max_errors: o.MaxErrorsOption = 20,
    allow_incomplete: o.AllowIncompleteOption = False,
) -> None:
    """Check a trace against format v1 and report its problems, not only the first.

    Exit codes: 0 valid; 2 problems found (each as FILE:LINE: message on stderr).
    """
    from .commands.validate import check_trace

    valid = check_trace(
        trace,
        max_line_bytes=max_line_bytes,
        max_errors=max_errors,
        policy=policy,
        params=o.parse_params(param),
        allow_incomplete=allow_incomplete,
    )
    if not valid:
        raise typer.Exit(2)


@command
def includes() -> None:
    """Print the compiler flag that finds the C++ recorder's header,
    schedcli/recording_scheduler.h, shipped in the package (as pybind11 --includes does).

    Exit codes: 0 ok.
    """
    from ..record import include_dir

    typer.echo(f"-I{include_dir()}")


@command
def policies(
    policy: o.PolicyNameArgument = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """List the policies: built-ins and plugins, with parameters, defaults and rule; or
    the one NAME names, as -p takes it (vllm@PYTHON lists that interpreter's vLLM knobs).

    Exit codes: 0 ok; 2 a NAME that is no policy.
    """
    from ..policies.registry import describe_named, describe_policies
    from .views.render import policies_table

    show(fmt, [describe_named(policy)] if policy else describe_policies(), policies_table)


@command
def diff(
    inputs: o.InputsOption,
    a_policy: o.APolicyOption = None,
    b_policy: o.BPolicyOption = None,
    a_param: o.AParamOption = None,
    b_param: o.BParamOption = None,
    drain: o.DrainOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Find where two schedules part ways: one trace under two configurations, or two dumps.

    Decisions are compared (batches, accepted or rejected, what a cancel dropped, the end's
    counts); a rejection's reason is shown beside them, not compared.

    Exit codes: 0 identical; 1 different; 2 bad input or usage; 3 a policy broke the contract.
    """
    from ..engine.diff import Side
    from .commands.diff import run_diff

    a = Side(a_policy, dict(o.parse_params(a_param)))
    b = Side(b_policy, dict(o.parse_params(b_param)))
    if not run_diff(inputs, a, b, drain=drain, allow_incomplete=allow_incomplete, fmt=fmt):
        raise typer.Exit(1)


@command
def convert(
    fmt: o.ConvertFmtOption,
    src: o.SrcOption,
    output: o.ConvertOutputOption = "-",
    limit: o.LimitOption = None,
    start: o.StartOption = 0.0,
    duration: o.DurationOption = None,
    time_scale: o.TimeScaleOption = 1.0,
    seed: o.SeedOption = 0,
    rate: o.RateOption = None,
    cv: o.CvOption = None,
    skip_bad: o.SkipBadOption = False,
    keep_failed: o.KeepFailedOption = False,
) -> None:
    """Turn a public request trace into a workload (arrival, prompt and output tokens).

    Exit codes: 0 ok; 2 bad input (FILE:LINE: message) or usage.
    """
    from ..formats.convert import ConvertOptions
    from .commands.converting import convert_to

    options = ConvertOptions(
        limit=limit,
        start=start,
        duration=duration,
        time_scale=time_scale,
        seed=seed,
        rate=rate,
        cv=cv,
        skip_bad=skip_bad,
        keep_failed=keep_failed,
    )
    convert_to(fmt.value, src, output, options)


@command
def simulate(
    workload: o.WorkloadOption,
    policy: o.SimulatePolicyOption = "decode-first",
    param: o.ParamOption = None,
    output: o.SimulateOutputOption = None,
    metrics: o.MetricsOption = None,
    chunk_size: o.ChunkSizeOption = None,
    cost_file: o.CostFileOption = None,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
    slo_ttft: o.SloTtftOption = None,
    slo_tpot: o.SloTpotOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
    perfetto: o.PerfettoOption = None,
) -> None:
    """Play the runner over a workload: emit scheduler traffic and measure latencies.

    step_seconds = a + b * batch_tokens + c * decodes_in_batch (--cost-a/-b/-c).
    Exit codes: 0 ok; 2 bad input or usage; 3 the policy broke the contract.
    """
    from .commands.simulating import SimulateRequest, cost_model_of, run_simulate

    request = SimulateRequest(
        workload,
        policy=policy,
        params=o.parse_params(param),
        output=output,
        metrics=metrics,
        perfetto=perfetto,
        chunk_size=chunk_size,
        cost=cost_model_of(cost_file, cost_a, cost_b, cost_c),
        slo_ttft=slo_ttft,
        slo_tpot=slo_tpot,
        json=fmt is o.ViewFormat.json,
    )
    run_simulate(request, data_console(), stderr_console())


@command
def explain(
    trace: o.ExplainTraceOption,
    step: o.StepOption = None,
    task: o.TaskOption = None,
    session: o.ExplainSessionOption = None,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Why the scheduler did that: the queue get_work saw at a step and why each task was
    left behind, or the life of a task or a session (submitted, passed over, dispatched).
    """
    from .commands.explain import explain_command

    params = o.parse_params(param)
    explain_command(
        trace, step=step, task=task, session=session, policy=policy, params=params, fmt=fmt
    )


@command
def debug(
    trace: o.ExplainTraceOption,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    check: o.DebugCheckOption = False,
    golden: o.GoldenOption = None,
    against: o.AgainstOption = None,
    against_param: o.AgainstParamOption = None,
    allow_incomplete: o.AllowIncompleteOption = False,
    no_color: o.NoColorOption = False,
    checkpoint_every: o.EveryOption = 1000,
) -> None:
    """Step through a replay, forwards and backwards: the queue and every reason at each
    step, breakpoints, and where it parts from --check, --golden or --against.

    Exit codes (after quitting): 0 ok; 1 a step or another record differs (as replay --check,
    replay --golden, diff); 2 bad input or usage; 3 the policy broke the contract.
    """
    from ..engine.travel import Compare
    from .commands.debug import DebugRequest, debug_command

    compare = Compare(check, golden, against, dict(o.parse_params(against_param)))
    req = DebugRequest(
        trace, policy, o.parse_params(param), compare, allow_incomplete, no_color, checkpoint_every
    )
    code = debug_command(req)
    if code:
        raise typer.Exit(code)


@command
def shrink(
    trace: o.ShrinkTraceOption,
    until: o.UntilOption,
    output: o.ShrinkOutputOption = "-",
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    max_time: o.MaxTimeOption = None,
    keep_expects: o.KeepExpectsOption = False,
    drain: o.DrainOption = False,
    b_param: o.BParamOption = None,
) -> None:
    """Reduce a failing trace to a small one that still fails the same way: --check still
    finds the same tids missing or extra, the policy still breaks the contract with the same
    message, two policies still part ways at the same tids, or a command still exits with
    the same code (--drain: each candidate replayed as replay --drain does, so a stall at
    the end shows; --b-param: diff:POLICY's parameters, as diff's). Deterministic; prints
    the sizes and the time taken. On Ctrl-C or at --max-time it writes the smallest
    failing trace found so far.
    """
    from .commands.shrink import shrink_to_file

    shrink_to_file(
        trace,
        until,
        policy,
        o.parse_params(param),
        output,
        max_time,
        keep_expects,
        stderr_console(),
        drain,
        o.parse_params(b_param),
    )


@command
def sweep(
    workloads: o.WorkloadsOption = None,
    policy: o.SweepPolicyOption = None,
    grid: o.GridOption = None,
    spec: o.SpecOption = None,
    output: o.SweepOutputOption = "-",
    backend: o.BackendOption = "local",
    jobs: o.JobsOption = None,
    address: o.AddressOption = None,
    cache: o.CacheOption = ".schedcli-cache/sweep",
    fresh: o.FreshOption = False,
    capacity: o.CapacityOption = False,
    slo_ttft: o.SweepSloTtftOption = None,
    slo_tpot: o.SweepSloTpotOption = None,
    goodput: o.GoodputOption = 0.9,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
) -> None:
    """Run every workload x policy x grid point (simulate; replay for a trace) on all local
    cores or a Ray cluster, cached so a rerun skips finished points.

    Exit codes: 0 ok; 2 bad input or usage, or some point failed (the others finish); 3 a
    point's policy broke the contract (a stall included; the others finish).
    """
    from ..engine.cost import CostModel
    from .commands.sweeping import SweepRequest, capacity_search, sweep_command

    req = SweepRequest(
        list(workloads or []),
        list(policy or []),
        list(grid or []),
        output,
        backend,
        jobs,
        address,
        cache,
        fresh,
        CostModel(cost_a, cost_b, cost_c),
    )
    searched = capacity_search(capacity, slo_ttft, slo_tpot, goodput)
    sweep_command(req, spec, searched, data_console(), stderr_console())


@command
def fit(
    recordings: o.RecordingsOption,
    output: o.FitOutputOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Fit simulate's step-time model to the time between get_work calls of recordings.

    step_seconds = a + b * batch_tokens + c * decodes (+ d * context_tokens where every
    task recorded its position). Every fifth step is held out to measure the fit (MAPE,
    R²); idle gaps are reported as outliers, not fitted. simulate --cost FILE uses it.
    """
    from .commands.fitting import fit_command

    fit_command(recordings, output, fmt)


@command
def stats(
    input_path: o.InputPathOption,
    policy: o.StatsPolicyOption = None,
    param: o.ParamOption = None,
    drain: o.DrainOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
) -> None:
    """Step-based metrics of a recorded trace (replayed) or of a dump: waits in steps,
    utilisation, fairness, rejections and cancellations; at the request level, each
    preemption's victim and the tokens recomputed after it.
    """
    from .commands.stats import stats_command

    params = o.parse_params(param)
    stats_command(
        input_path, policy, params, drain=drain, allow_incomplete=allow_incomplete, fmt=fmt
    )


@command
def report(
    input_path: o.ReportInputPathOption,
    output: o.ReportOutputOption,
    policy: o.ReportPolicyOption = None,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
    allow_incomplete: o.AllowIncompleteOption = False,
) -> None:
    """Write one self-contained HTML report (works offline): tokens per step against the
    budget, queue depth, wait per session and, for workloads, TTFT and TPOT per policy;
    for request-level runs, the preemptions and the tokens they recompute.
    """
    from ..engine.cost import CostModel
    from .commands.report import report_command

    cost = CostModel(cost_a, cost_b, cost_c)
    report_command(input_path, output, policy or [], cost, allow_incomplete=allow_incomplete)


@command
def check(
    paths: o.CheckPathsArgument = None,
    golden_dir: o.GoldenDirOption = None,
    jobs: o.JobsOption = None,
    allow_unchecked: o.AllowUncheckedOption = False,
    allow_missing_golden: o.AllowMissingGoldenOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    strict: o.StrictOption = None,
    update: o.UpdateOption = False,
    dry_run: o.DryRunOption = False,
    junit_xml: o.JunitOption = None,
    staged: o.StagedOption = False,
    fmt: o.CheckFormatOption = o.CheckFormat.text,
    policy: o.CheckPolicyOption = None,
    param: o.ParamOption = None,
) -> None:
    """Check a suite of traces for CI: each against its recorded expects and its golden,
    in parallel; a line each, every failure's first divergence and the command that
    reproduces it, a summary; exit 1 on any failure (a trace without a golden, a golden
    without a trace included).
    """
    from .commands.check.report import run_check
    from .commands.check.suite import CheckRequest

    req = CheckRequest(
        paths or [],
        golden_dir=golden_dir,
        jobs=jobs,
        allow_unchecked=allow_unchecked,
        allow_missing_golden=allow_missing_golden,
        allow_incomplete=allow_incomplete,
        strict=strict,
        update=update,
        dry_run=dry_run,
        staged=staged,
        policy=policy,
        params=dict(o.parse_params(param)),
    )
    run_check(req, str(fmt), junit_xml)


@command
def conformance(
    parts: o.ConformancePartsArgument = None,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    jobs: o.JobsOption = None,
    junit_xml: o.JunitOption = None,
    fmt: o.CheckFormatOption = o.CheckFormat.text,
) -> None:
    """Check a scheduler against ExecuTorch's own scheduler tests, shipped with schedcli as
    traces: the contract any Scheduler keeps (the default), or DecodeFirstScheduler's own
    batches (decode-first). A verdict per trace, as check gives; exit 1 on any failure, 3
    where the scheduler broke the contract.
    """
    from .commands.check.conformance import conformance_request
    from .commands.check.report import run_check

    chosen = [str(p) for p in parts or [o.ConformancePart.contract]]
    req, config = conformance_request(chosen, policy, dict(o.parse_params(param)), jobs)
    run_check(req, str(fmt), junit_xml, config)


@command
def completion(shell: o.ShellArgument, install: o.InstallOption = False) -> None:
    """Tab completion for your shell: print its script, or --install it
    (eval "$(schedcli completion bash)" in ~/.bashrc does the same)."""
    from .completion import completion_command

    completion_command(str(shell), install)
