"""The command line: parse options, call library functions, map errors to exit codes.

Exit codes: 0 ok, 1 a check found a difference, 2 bad input or usage,
3 a policy broke the Scheduler contract, 4 an internal error of schedcli,
130 interrupted (143 on SIGTERM).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import sys
import threading
import traceback
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from rich.console import Console

from .. import CORE, __version__
from .._compiled import CORE_IS_STALE, STALE
from ..engine.simulate import CostModel
from ..formats import interrupt
from ..formats.dump import (
    StepRange,
    parse_id_option,
)
from ..formats.interrupt import Stopped, guard
from ..formats.output import atomic_output
from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..model.errors import InputError, SchedcliError, UsageError
from ..model.limits import OPTIONS, BoundError
from ..policies.registry import plugin_imported
from .console import data_console, stderr_console
from .progress import TraceProgress
from .replaying import OutputFormat, ReplayRequest, run_replay
from .usage import usage_message

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 a check found a difference; 2 bad input or usage; "
    "3 a policy broke the Scheduler contract (a policy bug); 4 an internal error of schedcli; "
    "130 interrupted; 143 terminated."
)

app = typer.Typer(
    name="schedcli",
    help="Replay LLM-serving scheduler traffic through batching policies.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable[..., Any])

# A bug in schedcli itself; 3 stays "a policy broke the contract".
INTERNAL_ERROR = 4

err_console = stderr_console()


class PipeClosed(BaseException):
    """The reader of stdout went away (``| head``): stop quietly."""


def check_numbers(kwargs: dict[str, Any]) -> None:
    """Every numeric option against its bound in ``limits.OPTIONS`` (the one table), so no
    nan, infinity or runaway value gets further than the command line."""
    for key, value in kwargs.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            option = "--" + key.replace("_", "-")
            bound = OPTIONS.get(option)
            if bound is None:
                raise AssertionError(f"{option} has no bound in limits.OPTIONS")
            try:
                bound.check(option, value)
            except BoundError as e:
                raise UsageError(str(e)) from None


def command(fn: F) -> F:
    """Registers a command whose broken pipe ends the run quietly, not as an error."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        check_numbers(kwargs)
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed() from None

    # The docstring's first paragraph, whole: the command list never cuts it short.
    summary = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
    app.command(short_help=summary)(guarded)
    return fn


class ViewFormat(StrEnum):
    table = "table"
    json = "json"


DEFAULT_COST = CostModel()

# Options several commands share, declared once.
ViewFormatOption = Annotated[
    ViewFormat,
    typer.Option("--format", "-f", metavar="table|json", help="table (for people) or json."),
]
PolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        "-p",
        metavar="NAME",
        help="Policy name or module:Class (default: the header's, else decode-first).",
    ),
]
ParamOption = Annotated[
    list[str] | None,
    typer.Option(
        "--param", "-P", metavar="KEY=VALUE", help="Policy parameter KEY=VALUE (repeatable)."
    ),
]
AllowIncompleteOption = Annotated[
    bool,
    typer.Option(
        "--allow-incomplete",
        help="Read a dump without its end record, or a trace marked partial, anyway.",
    ),
]
DrainOption = Annotated[
    bool, typer.Option("--drain", help="Explicit traces: keep calling get_work at the end.")
]
MaxLineOption = Annotated[
    int, typer.Option("--max-line-bytes", metavar="BYTES", help="Reject longer lines.")
]
PerfettoOption = Annotated[
    str | None,
    typer.Option(
        "--perfetto", metavar="FILE", help="Also write a Chrome trace-event timeline (Perfetto)."
    ),
]
CostAOption = Annotated[
    float, typer.Option("--cost-a", metavar="SECONDS", help="Cost model: seconds per step.")
]
CostBOption = Annotated[
    float, typer.Option("--cost-b", metavar="SECONDS", help="Cost model: seconds per batch token.")
]
CostCOption = Annotated[
    float, typer.Option("--cost-c", metavar="SECONDS", help="Cost model: seconds per decode.")
]


def _version(value: bool) -> None:
    if value:
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


def parse_params(items: list[str] | None) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param {item!r}: expected KEY=VALUE")
        params[key.strip()] = value
    return params


def _stdout_console() -> Console:
    return data_console()


def _trace_progress(label: str, path: str, enabled: bool = True) -> TraceProgress:
    return TraceProgress(err_console if enabled else Console(file=io.StringIO()), label, path)


@command
def replay(
    trace: Annotated[
        str,
        typer.Argument(metavar="TRACE", help="Trace file (JSON Lines, .gz ok), or - for stdin."),
    ],
    policy: PolicyOption = None,
    param: ParamOption = None,
    fmt: Annotated[
        OutputFormat | None,
        typer.Option(
            "--format",
            "-f",
            metavar="table|jsonl",
            help="table (default on a terminal) or jsonl (default otherwise).",
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE.")
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option("--steps", metavar="A:B", help="Show only steps A:B (half-open), A: or :B."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="SID",
            help="Show only this session (7 is an int, '\"7\"' a string).",
        ),
    ] = None,
    drain: DrainOption = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Compare every batch with the trace's expect (and a recording's submit "
            "outcomes); exit 1 if one differs.",
        ),
    ] = False,
    require_all: Annotated[
        bool,
        typer.Option("--require-all", help="With --check: fail if any batch records no expect."),
    ] = False,
    golden: Annotated[
        str | None,
        typer.Option(
            "--golden", metavar="FILE", help="Compare the whole dump with this golden dump."
        ),
    ] = None,
    update_golden: Annotated[
        bool, typer.Option("--update-golden", help="Rewrite the --golden file (atomically).")
    ] = False,
    max_line_bytes: MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    perfetto: PerfettoOption = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep reading FILE as it grows (like tail -f) until Ctrl-C.",
        ),
    ] = False,
    allow_incomplete: AllowIncompleteOption = False,
) -> None:
    """Replay a trace through a policy and show or dump every batch.

    Exit codes: 0 ok; 1 --check or --golden found a difference; 2 bad input or usage;
    3 the policy broke the Scheduler contract; 130 interrupted; 143 terminated.
    """
    request = ReplayRequest(
        trace,
        policy=policy,
        params=parse_params(param),
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
    quiet = request.view_format() is OutputFormat.table and output is None
    run_replay(request, err_console, _trace_progress("replaying", trace, not quiet))


@command
def validate(
    trace: Annotated[
        str,
        typer.Argument(metavar="TRACE", help="Trace file (JSON Lines, .gz ok), or - for stdin."),
    ],
    policy: PolicyOption = None,
    param: ParamOption = None,
    max_line_bytes: MaxLineOption = DEFAULT_MAX_LINE_BYTES,
    max_errors: Annotated[
        int, typer.Option("--max-errors", metavar="N", help="Show at most N problems.")
    ] = 20,
    allow_incomplete: AllowIncompleteOption = False,
) -> None:
    """Check a trace against format v1 and report its problems, not only the first.

    Exit codes: 0 valid; 2 problems found (each as FILE:LINE: message on stderr).
    """
    from .validate import validate_trace

    problems, events = validate_trace(
        trace,
        max_line_bytes=max_line_bytes,
        max_errors=max_errors,
        policy=policy,
        params=parse_params(param),
        allow_incomplete=allow_incomplete,
    )
    for p in problems:
        print(p, file=sys.stderr)
    if problems.total:
        shown = "" if problems.total == len(problems) else f" (the first {len(problems)} shown)"
        print(f"{problems.total} problem(s){shown}; {events} valid event(s)", file=sys.stderr)
        raise typer.Exit(2)
    print(f"{display_name(trace)}: valid, {events} event(s)", file=sys.stderr)


@command
def policies(
    fmt: ViewFormatOption = ViewFormat.table,
) -> None:
    """List the policies: built-ins and plugins, with parameters, defaults and rule."""
    from ..policies.registry import describe_policies
    from .render import policies_table

    described = describe_policies()
    if fmt is ViewFormat.json:
        sys.stdout.buffer.write(orjson.dumps(described, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _stdout_console().print(policies_table(described))


@command
def diff(
    inputs: Annotated[
        list[str],
        typer.Argument(
            metavar="INPUT...", help="One trace (replayed under A and B), or two dumps to compare."
        ),
    ],
    a_policy: Annotated[
        str | None,
        typer.Option(
            "--a", metavar="POLICY", help="Policy of side A (default: the trace header's)."
        ),
    ] = None,
    b_policy: Annotated[
        str | None,
        typer.Option(
            "--b", metavar="POLICY", help="Policy of side B (default: the trace header's)."
        ),
    ] = None,
    a_param: Annotated[
        list[str] | None,
        typer.Option("--a-param", metavar="KEY=VALUE", help="Side A parameter KEY=VALUE."),
    ] = None,
    b_param: Annotated[
        list[str] | None,
        typer.Option("--b-param", metavar="KEY=VALUE", help="Side B parameter KEY=VALUE."),
    ] = None,
    drain: DrainOption = False,
    allow_incomplete: AllowIncompleteOption = False,
    fmt: ViewFormatOption = ViewFormat.table,
) -> None:
    """Find where two schedules part ways: one trace under two configurations, or two dumps.

    Exit codes: 0 identical; 1 different; 2 bad input or usage; 3 a policy broke the contract.
    """
    from .diff import Config, diff_dumps, diff_trace
    from .render import diff_view

    if len(inputs) == 1:
        progress = _trace_progress("comparing", inputs[0])
        try:
            result = diff_trace(
                inputs[0],
                Config(a_policy, dict(parse_params(a_param))),
                Config(b_policy, dict(parse_params(b_param))),
                drain=drain,
                progress=progress,
                allow_incomplete=allow_incomplete,
            )
        finally:
            progress.stop()
    elif len(inputs) == 2:
        if a_policy or b_policy or a_param or b_param:
            raise UsageError("--a/--b and their params apply to a trace, not to two dumps")
        result = diff_dumps(inputs[0], inputs[1], allow_incomplete=allow_incomplete)
    else:
        raise UsageError("diff takes one trace, or two dumps")
    if fmt is ViewFormat.json:
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        console = _stdout_console()
        console.print(diff_view(result))
        if len(inputs) == 1 and inputs[0] != "-" and result.first is not None:
            _print_diff_reasons(console, inputs[0], result, a_policy, a_param, b_policy, b_param)
    if not result.identical:
        raise typer.Exit(1)


def _print_diff_reasons(
    console: Console,
    trace: str,
    result: Any,
    a_policy: str | None,
    a_param: list[str] | None,
    b_policy: str | None,
    b_param: list[str] | None,
) -> None:
    """Each side's reasons at the first differing step (a replay is deterministic)."""
    from .explain import explain_step
    from .render import why_left

    first = result.first
    only_a, only_b = first.moved()
    for label, policy, param, tids in (
        ("A", a_policy, a_param, only_b),
        ("B", b_policy, b_param, only_a),
    ):
        if tids:
            view = explain_step(trace, first.step, policy, parse_params(param))
            console.print(why_left(label, view.left, tids))


class ConvertFormat(StrEnum):
    auto = "auto"
    azure = "azure"
    mooncake = "mooncake"
    vidur = "vidur"
    lengths = "lengths"
    burstgpt = "burstgpt"


@command
def convert(
    fmt: Annotated[
        ConvertFormat,
        typer.Argument(metavar="FORMAT", help="Source format, or auto to recognise it."),
    ],
    src: Annotated[
        str, typer.Argument(metavar="SOURCE", help="Source file (.gz ok), or - for stdin.")
    ],
    output: Annotated[
        str,
        typer.Option(
            "--output", "-o", metavar="FILE", help="Workload file to write (- for stdout)."
        ),
    ] = "-",
    limit: Annotated[
        int | None, typer.Option("--limit", metavar="N", help="Keep the first N requests.")
    ] = None,
    start: Annotated[
        float,
        typer.Option(
            "--start", metavar="SECONDS", help="Window start, seconds after the first request."
        ),
    ] = 0.0,
    duration: Annotated[
        float | None,
        typer.Option("--duration", metavar="SECONDS", help="Window length in seconds."),
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale", metavar="FACTOR", help="Multiply arrival times (0.5 = twice the rate)."
        ),
    ] = 1.0,
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="Seed for generated arrivals.")
    ] = 0,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate", metavar="PER_SECOND", help="lengths: requests per second (Poisson)."
        ),
    ] = None,
    cv: Annotated[
        float | None,
        typer.Option(
            "--cv",
            metavar="CV",
            help="lengths: coefficient of variation of gaps (gamma; 1 = Poisson).",
        ),
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip and count bad rows instead of stopping.")
    ] = False,
    keep_failed: Annotated[
        bool,
        typer.Option(
            "--keep-failed", help="burstgpt: keep failed requests (1 token, meta.failed)."
        ),
    ] = False,
) -> None:
    """Turn a public request trace into a workload (arrival, prompt and output tokens).

    Exit codes: 0 ok; 2 bad input (FILE:LINE: message) or usage.
    """
    from ..formats.convert import ConvertOptions, to_text
    from ..formats.convert import convert as run_convert

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
    with atomic_output(output) as out:
        report = run_convert(fmt.value, src, out, options, _warn)
    print(to_text(report), file=sys.stderr)


def _warn(message: str) -> None:
    print(f"schedcli: {message}", file=sys.stderr)


@command
def simulate(
    workload: Annotated[
        str, typer.Argument(metavar="WORKLOAD", help="Workload file (JSON Lines, .gz ok), or -.")
    ],
    policy: Annotated[
        str, typer.Option("--policy", "-p", metavar="NAME", help="Policy name or module:Class.")
    ] = "decode-first",
    param: ParamOption = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="Write the event trace (explicit mode) to FILE."
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", metavar="FILE", help="Write the metrics as JSON to FILE."),
    ] = None,
    chunk_size: Annotated[
        int | None,
        typer.Option(
            "--chunk-size",
            metavar="TOKENS",
            help="Prompt chunk size (default: the policy's max_prefill_chunk_size, else 256).",
        ),
    ] = None,
    cost_file: Annotated[
        str | None,
        typer.Option(
            "--cost",
            metavar="FILE",
            help="A fitted cost model (schedcli fit -o); not with --cost-a/-b/-c.",
        ),
    ] = None,
    cost_a: CostAOption = DEFAULT_COST.a,
    cost_b: CostBOption = DEFAULT_COST.b,
    cost_c: CostCOption = DEFAULT_COST.c,
    slo_ttft: Annotated[
        float | None,
        typer.Option("--slo-ttft", metavar="SECONDS", help="Goodput: TTFT target, seconds."),
    ] = None,
    slo_tpot: Annotated[
        float | None,
        typer.Option("--slo-tpot", metavar="SECONDS", help="Goodput: TPOT target, seconds."),
    ] = None,
    fmt: ViewFormatOption = ViewFormat.table,
    perfetto: PerfettoOption = None,
) -> None:
    """Play the runner over a workload: emit scheduler traffic and measure latencies.

    step_seconds = a + b * batch_tokens + c * decodes_in_batch (--cost-a/-b/-c).
    Exit codes: 0 ok; 2 bad input or usage; 3 the policy broke the contract.
    """
    from .simulating import SimulateRequest, run_simulate

    request = SimulateRequest(
        workload,
        policy=policy,
        params=parse_params(param),
        output=output,
        metrics=metrics,
        perfetto=perfetto,
        chunk_size=chunk_size,
        cost=_cost_model(cost_file, cost_a, cost_b, cost_c),
        slo_ttft=slo_ttft,
        slo_tpot=slo_tpot,
        json=fmt is ViewFormat.json,
    )
    run_simulate(request, _stdout_console(), err_console)


@command
def explain(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="Trace file (.gz ok).")],
    step: Annotated[
        int | None, typer.Option("--step", metavar="N", help="The queue and batch of step N.")
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", metavar="TID", help="A task's life (7 or '\"7\"').")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", metavar="SID", help="Every task of a session.")
    ] = None,
    policy: PolicyOption = None,
    param: ParamOption = None,
    fmt: ViewFormatOption = ViewFormat.table,
) -> None:
    """Why the scheduler did that: the queue get_work saw at a step and why each task was
    left behind, or the life of a task or a session (submitted, passed over, dispatched).
    """
    from .explain import explain_lives, explain_step
    from .render import lives_view, step_view

    chosen = [
        o for o, v in (("--step", step), ("--task", task), ("--session", session)) if v is not None
    ]
    if len(chosen) != 1:
        raise UsageError("explain one thing: give exactly one of --step, --task, --session")
    params = parse_params(param)
    if step is not None:
        view = explain_step(trace, step, policy, params)
        if fmt is ViewFormat.json:
            sys.stdout.buffer.write(
                orjson.dumps(view.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
            )
        else:
            _stdout_console().print(step_view(view))
        return
    tid = parse_id_option(task) if task is not None else None
    sid = parse_id_option(session) if session is not None else None
    lives = explain_lives(trace, tid=tid, sid=sid, policy=policy, params=params)
    if fmt is ViewFormat.json:
        data = [life.to_json() for life in lives]
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _stdout_console().print(lives_view(lives))


@command
def shrink(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="A failing trace (.gz ok).")],
    until: Annotated[
        str,
        typer.Option(
            "--until",
            metavar="HOW",
            help="check | contract | diff:POLICY | cmd:'SHELL' ({} or $TRACE is the file).",
        ),
    ],
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FILE", help="The small trace (- stdout).")
    ] = "-",
    policy: PolicyOption = None,
    param: ParamOption = None,
    max_time: Annotated[
        float | None,
        typer.Option(
            "--max-time",
            metavar="SECONDS",
            help="Stop after this long and write the smallest failing trace found so far.",
        ),
    ] = None,
    keep_expects: Annotated[
        bool,
        typer.Option(
            "--keep-expects",
            help="Keep every kept get_work's expect (default: only the failing batch's).",
        ),
    ] = False,
) -> None:
    """Reduce a failing trace to a small one that still fails the same way: --check still
    finds the same tids missing or extra, the policy still breaks the contract with the same
    message, two policies still part ways at the same tids, or a command still exits with
    the same code. Deterministic; prints the sizes and the time taken. On Ctrl-C or at
    --max-time it writes the smallest failing trace found so far.
    """
    from .shrink import shrink_to_file

    shrink_to_file(
        trace, until, policy, parse_params(param), output, max_time, keep_expects, err_console
    )


@command
def sweep(
    workloads: Annotated[
        list[str] | None,
        typer.Argument(metavar="WORKLOAD...", help="Workloads (or traces) to run each point on."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", metavar="NAME", help="A policy to sweep (repeatable)."),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            "--grid",
            metavar="KEY=V1,V2",
            help="Values of a parameter (or time_scale, chunk_size, cost_a/b/c); repeatable.",
        ),
    ] = None,
    spec: Annotated[
        str | None, typer.Option("--spec", metavar="FILE", help="The sweep as a TOML file.")
    ] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FILE", help="One JSON line per point.")
    ] = "-",
    backend: Annotated[
        str, typer.Option("--backend", metavar="local|ray", help="Where points run.")
    ] = "local",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", metavar="N", help="Workers (default: every core)."),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option("--address", metavar="ADDR", help="Ray: an existing cluster's address."),
    ] = None,
    cache: Annotated[
        str, typer.Option("--cache", metavar="DIR", help="Where finished points are kept.")
    ] = ".schedcli-cache/sweep",
    fresh: Annotated[bool, typer.Option("--fresh", help="Run every point, cache or not.")] = False,
    capacity: Annotated[
        bool,
        typer.Option("--capacity", help="Find each point's highest arrival rate meeting SLOs."),
    ] = False,
    slo_ttft: Annotated[
        float | None, typer.Option("--slo-ttft", metavar="SECONDS", help="Capacity: TTFT SLO.")
    ] = None,
    slo_tpot: Annotated[
        float | None, typer.Option("--slo-tpot", metavar="SECONDS", help="Capacity: TPOT SLO.")
    ] = None,
    goodput: Annotated[
        float,
        typer.Option("--goodput", metavar="FRACTION", help="Capacity: requests meeting SLOs."),
    ] = 0.9,
    cost_a: CostAOption = DEFAULT_COST.a,
    cost_b: CostBOption = DEFAULT_COST.b,
    cost_c: CostCOption = DEFAULT_COST.c,
) -> None:
    """Run every workload x policy x grid point (simulate; replay for a trace) on all local
    cores or a Ray cluster, cached so a rerun skips finished points.

    Exit codes: 0 ok; 2 bad input or usage, or some point failed (the others finish).
    """
    from .sweeping import SweepRequest, capacity_search, load_spec, run_sweep

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
    if spec is not None:
        req = load_spec(spec, req)
    req.capacity = capacity_search(capacity, slo_ttft, slo_tpot, goodput) or req.capacity
    failed = run_sweep(req, _stdout_console(), err_console)
    if failed:
        raise UsageError(f"{failed} point(s) failed; the others are in {output}")


def _cost_model(path: str | None, a: float, b: float, c: float) -> CostModel:
    if path is None:
        return CostModel(a, b, c)
    if (a, b, c) != (DEFAULT_COST.a, DEFAULT_COST.b, DEFAULT_COST.c):
        raise UsageError("--cost FILE is a whole model: give it or --cost-a/-b/-c, not both")
    return CostModel.load(path)


@command
def fit(
    recordings: Annotated[
        list[str],
        typer.Argument(metavar="RECORDING...", help="Clocked recordings (clock=True; .gz ok)."),
    ],
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write the cost model as JSON."),
    ] = None,
    fmt: ViewFormatOption = ViewFormat.table,
) -> None:
    """Fit simulate's step-time model to the time between get_work calls of recordings.

    step_seconds = a + b * batch_tokens + c * decodes (+ d * context_tokens where every
    task recorded its position). Every fifth step is held out to measure the fit (MAPE,
    R²); idle gaps are reported as outliers, not fitted. simulate --cost FILE uses it.
    """
    from ..engine.fit import fit_recordings
    from .render import fit_table

    result = fit_recordings(recordings)
    model = result.cost_json()
    if output is not None:
        with atomic_output(output) as out:
            out.write(orjson.dumps(model, option=orjson.OPT_INDENT_2) + b"\n")
    if fmt is ViewFormat.json:
        sys.stdout.buffer.write(orjson.dumps(model, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _stdout_console().print(fit_table(result))


@command
def stats(
    input_path: Annotated[str, typer.Argument(metavar="INPUT", help="An event trace or a dump.")],
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy", "-p", metavar="NAME", help="Traces: policy (default: the header's)."
        ),
    ] = None,
    param: ParamOption = None,
    drain: DrainOption = False,
    allow_incomplete: AllowIncompleteOption = False,
    fmt: ViewFormatOption = ViewFormat.table,
) -> None:
    """Step-based metrics of a recorded trace (replayed) or of a dump: waits in steps,
    utilisation, fairness, rejections and cancellations.
    """
    from .render import stats_table
    from .stats import stats_of

    progress = _trace_progress("measuring", input_path)
    try:
        summary, title = stats_of(
            input_path,
            policy,
            parse_params(param),
            drain=drain,
            progress=progress,
            allow_incomplete=allow_incomplete,
        )
    finally:
        progress.stop()
    if fmt is ViewFormat.json:
        sys.stdout.buffer.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _stdout_console().print(stats_table(summary, title))


@command
def report(
    input_path: Annotated[
        str, typer.Argument(metavar="INPUT", help="A trace, a dump or a workload.")
    ],
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FILE", help="The HTML file to write.")
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            "-p",
            metavar="NAME",
            help="A configuration to show: NAME or NAME,KEY=VALUE,... (repeat to compare).",
        ),
    ] = None,
    cost_a: CostAOption = DEFAULT_COST.a,
    cost_b: CostBOption = DEFAULT_COST.b,
    cost_c: CostCOption = DEFAULT_COST.c,
    allow_incomplete: AllowIncompleteOption = False,
) -> None:
    """Write one self-contained HTML report (works offline): tokens per step against the
    budget, queue depth, wait per session and, for workloads, TTFT and TPOT per policy.
    """
    from .report import build_report

    progress = _trace_progress("reporting", input_path)
    try:
        page = build_report(
            input_path,
            policy or [],
            cost=CostModel(cost_a, cost_b, cost_c),
            progress=progress,
            allow_incomplete=allow_incomplete,
        )
    finally:
        progress.stop()
    with atomic_output(output) as out:
        out.write(page.encode())
    print(f"wrote {output} ({len(page) // 1024} KiB)", file=sys.stderr)


def _exit(code: int) -> NoReturn:
    guard.writing = True  # the last flush is a write too: a signal now waits for it
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        _silence_stdout()
    sys.exit(code)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _warn_if_stale() -> None:
    """An edited checkout runs pure Python until rebuilt: same answers, slower. Said on a
    terminal, where someone may wonder at the speed; pipes and tests see no difference."""
    if CORE_IS_STALE and sys.stderr.isatty():
        print(f"schedcli: warning: {STALE}; running pure Python meanwhile", file=sys.stderr)


def run() -> NoReturn:
    """The console script: ``main``, then its exit hooks, then out without the rest of
    the interpreter's teardown unless something may need it (another thread, or a plugin's
    objects). Every output of schedcli's own is flushed and closed by then; the teardown
    would only free memory the process is about to give back (35 ms a command, 100 ms
    once matplotlib is loaded)."""
    try:
        main()
        code = 0
    except SystemExit as e:
        if not isinstance(e.code, int) or threading.active_count() > 1 or plugin_imported():
            raise
        code = e.code
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place exceptions become messages and exit codes."""
    interrupt.install()
    _warn_if_stale()
    try:
        code = app(args=argv, prog_name="schedcli", standalone_mode=False)
        if isinstance(code, int) and code:
            _exit(code)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        _exit(code)
    except SchedcliError as e:
        if os.environ.get("SCHEDCLI_DEBUG") and e.__cause__ is not None:
            # A plugin that failed to import, start or answer: its own traceback.
            traceback.print_exception(e.__cause__, file=sys.stderr)
        print(str(e) if isinstance(e, InputError) else f"schedcli: {e}", file=sys.stderr)
        _exit(e.exit_code)
    except Stopped as e:
        message = "interrupted" if e.exit_code == 130 else "terminated"
        print(f"schedcli: {message}", file=sys.stderr)
        _exit(e.exit_code)
    except (BrokenPipeError, PipeClosed):
        _silence_stdout()
        sys.exit(0)
    except OSError as e:
        print(f"schedcli: {e.strerror or e}", file=sys.stderr)
        _exit(2)
    except Exception as e:
        usage = usage_message(e)
        if usage is not None:
            print(usage, file=sys.stderr)
            _exit(2)
        # A bug in schedcli itself: still one line, and the internal-error code.
        if os.environ.get("SCHEDCLI_DEBUG"):
            raise
        print(
            f"schedcli: internal error: {type(e).__name__}: {e} "
            "(set SCHEDCLI_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        _exit(INTERNAL_ERROR)
    _exit(0)
