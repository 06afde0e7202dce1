"""Every option and argument of the command line, declared once (typer's ``Annotated``
aliases), and what checks them: ``check_numbers`` against the one table of bounds
(``limits.OPTIONS``), ``parse_params`` for ``-P KEY=VALUE``. ``cli.py`` then holds only
the commands, each its options and one library call."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from ..engine.cost import CostModel
from ..formats.converters import NAMES as CONVERTER_NAMES
from ..model.errors import UsageError
from ..model.limits import OPTIONS, BoundError
from ..streams.output import refuse_overwriting
from .views.outputs import OutputFormat

# `convert`'s FORMAT: auto, or a name from the converter table (one line adds a format).
ConvertFormat = StrEnum(  # type: ignore[misc]
    "ConvertFormat", [(name, name) for name in ("auto", *CONVERTER_NAMES)]
)


class ViewFormat(StrEnum):
    table = "table"
    json = "json"


Shell = StrEnum("Shell", [(s, s) for s in ("bash", "zsh", "fish", "powershell")])  # type: ignore[misc]


class CheckFormat(StrEnum):
    text = "text"
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


def parse_params(items: list[str] | None) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param {item!r}: expected KEY=VALUE")
        params[key.strip()] = value
    return params


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


# What each command's path parameters are, by parameter name: read (and what the command
# line calls them), written, or neither. ``check_paths`` refuses an output that is an
# input before anything is opened; a new path parameter must be named here.
INPUT_PATHS = {
    "trace": "TRACE",
    "input_path": "INPUT",
    "inputs": "INPUT",
    "src": "SOURCE",
    "workload": "WORKLOAD",
    "workloads": "WORKLOAD",
    "recordings": "RECORDING",
    "paths": "PATH",
    "spec": "--spec",
    "cost_file": "--cost",
    "golden": "--golden",
}
OUTPUT_PATHS = {
    "output": "--output",
    "perfetto": "--perfetto",
    "metrics": "--metrics",
    "junit_xml": "--junit-xml",
}
NOT_PATHS = frozenset(
    {"fmt", "policy", "param", "a_policy", "b_policy", "a_param", "b_param", "steps", "session"}
    | {"task", "until", "grid", "backend", "address", "cache", "golden_dir", "shell"}
    | {"against", "against_param", "parts"}
)


def check_paths(kwargs: dict[str, Any]) -> None:
    """No output (standard output included) is the same file as an input or another
    output (``--golden`` is an output under ``--update-golden``)."""
    inputs: list[tuple[str, str]] = []
    outputs: list[tuple[str, str]] = []
    for key, value in kwargs.items():
        if not isinstance(value, str | list):
            continue
        if key == "golden" and kwargs.get("update_golden"):
            role, label = outputs, "--golden"
        elif key in INPUT_PATHS:
            role, label = inputs, INPUT_PATHS[key]
        elif key in OUTPUT_PATHS:
            role, label = outputs, OUTPUT_PATHS[key]
        elif key in NOT_PATHS:
            continue
        else:
            raise AssertionError(f"parameter {key!r} is in none of options.py's path tables")
        role += [(label, v) for v in (value if isinstance(value, list) else [value])]
    outputs.append(("standard output", "-"))
    refuse_overwriting(inputs, outputs)


# Each command's own options and arguments.

TraceOption = Annotated[
    str,
    typer.Argument(metavar="TRACE", help="Trace file (JSON Lines, .gz ok), or - for stdin."),
]
FmtOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        "-f",
        metavar="table|jsonl",
        help="table (default on a terminal) or jsonl (default otherwise).",
    ),
]
OutputOption = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE.")
]
StepsOption = Annotated[
    str | None,
    typer.Option("--steps", metavar="A:B", help="Show only steps A:B (half-open), A: or :B."),
]
SessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        metavar="SID",
        help="Show only this session (7 is an int, '\"7\"' a string).",
    ),
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Compare every batch with the trace's expect (and a recording's submit "
        "outcomes); exit 1 if one differs.",
    ),
]
RequireAllOption = Annotated[
    bool,
    typer.Option("--require-all", help="With --check: fail if any batch records no expect."),
]
GoldenOption = Annotated[
    str | None,
    typer.Option("--golden", metavar="FILE", help="Compare the whole dump with this golden dump."),
]
UpdateGoldenOption = Annotated[
    bool, typer.Option("--update-golden", help="Rewrite the --golden file (atomically).")
]
FollowOption = Annotated[
    bool,
    typer.Option(
        "--follow",
        help="Keep reading FILE as it grows (like tail -f) until Ctrl-C.",
    ),
]
MaxErrorsOption = Annotated[
    int, typer.Option("--max-errors", metavar="N", help="Show at most N problems.")
]
InputsOption = Annotated[
    list[str],
    typer.Argument(
        metavar="INPUT...", help="One trace (replayed under A and B), or two dumps to compare."
    ),
]
PolicyNameArgument = Annotated[
    str | None, typer.Argument(metavar="[NAME]", help="One policy, as -p names it; default: all.")
]
APolicyOption = Annotated[
    str | None,
    typer.Option("--a", metavar="POLICY", help="Policy of side A (default: the trace header's)."),
]
BPolicyOption = Annotated[
    str | None,
    typer.Option("--b", metavar="POLICY", help="Policy of side B (default: the trace header's)."),
]
AParamOption = Annotated[
    list[str] | None,
    typer.Option("--a-param", metavar="KEY=VALUE", help="Side A parameter KEY=VALUE."),
]
BParamOption = Annotated[
    list[str] | None,
    typer.Option("--b-param", metavar="KEY=VALUE", help="Side B parameter KEY=VALUE."),
]
ConvertFmtOption = Annotated[
    ConvertFormat,
    typer.Argument(metavar="FORMAT", help="Source format, or auto to recognise it."),
]
SrcOption = Annotated[
    str, typer.Argument(metavar="SOURCE", help="Source file (.gz ok), or - for stdin.")
]
ConvertOutputOption = Annotated[
    str,
    typer.Option("--output", "-o", metavar="FILE", help="Workload file to write (- for stdout)."),
]
LimitOption = Annotated[
    int | None, typer.Option("--limit", metavar="N", help="Keep the first N requests.")
]
StartOption = Annotated[
    float,
    typer.Option(
        "--start", metavar="SECONDS", help="Window start, seconds after the first request."
    ),
]
DurationOption = Annotated[
    float | None,
    typer.Option("--duration", metavar="SECONDS", help="Window length in seconds."),
]
TimeScaleOption = Annotated[
    float,
    typer.Option(
        "--time-scale", metavar="FACTOR", help="Multiply arrival times (0.5 = twice the rate)."
    ),
]
SeedOption = Annotated[
    int, typer.Option("--seed", metavar="N", help="Seed for generated arrivals.")
]
RateOption = Annotated[
    float | None,
    typer.Option("--rate", metavar="PER_SECOND", help="lengths: requests per second (Poisson)."),
]
CvOption = Annotated[
    float | None,
    typer.Option(
        "--cv",
        metavar="CV",
        help="lengths: coefficient of variation of gaps (gamma; 1 = Poisson).",
    ),
]
SkipBadOption = Annotated[
    bool, typer.Option("--skip-bad", help="Skip and count bad rows instead of stopping.")
]
KeepFailedOption = Annotated[
    bool,
    typer.Option("--keep-failed", help="burstgpt: keep failed requests (1 token, meta.failed)."),
]
WorkloadOption = Annotated[
    str, typer.Argument(metavar="WORKLOAD", help="Workload file (JSON Lines, .gz ok), or -.")
]
SimulatePolicyOption = Annotated[
    str, typer.Option("--policy", "-p", metavar="NAME", help="Policy name or module:Class.")
]
SimulateOutputOption = Annotated[
    str | None,
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write the event trace (explicit mode) to FILE."
    ),
]
MetricsOption = Annotated[
    str | None,
    typer.Option("--metrics", metavar="FILE", help="Write the metrics as JSON to FILE."),
]
ChunkSizeOption = Annotated[
    int | None,
    typer.Option(
        "--chunk-size",
        metavar="TOKENS",
        help="Prompt chunk size (default: the policy's max_prefill_chunk_size, else 256).",
    ),
]
CostFileOption = Annotated[
    str | None,
    typer.Option(
        "--cost",
        metavar="FILE",
        help="A fitted cost model (schedcli fit -o); not with --cost-a/-b/-c.",
    ),
]
SloTtftOption = Annotated[
    float | None,
    typer.Option("--slo-ttft", metavar="SECONDS", help="Goodput: TTFT target, seconds."),
]
SloTpotOption = Annotated[
    float | None,
    typer.Option("--slo-tpot", metavar="SECONDS", help="Goodput: TPOT target, seconds."),
]
ExplainTraceOption = Annotated[str, typer.Argument(metavar="TRACE", help="Trace file (.gz ok).")]
StepOption = Annotated[
    int | None, typer.Option("--step", metavar="N", help="The queue and batch of step N.")
]
TaskOption = Annotated[
    str | None, typer.Option("--task", metavar="TID", help="A task's life (7 or '\"7\"').")
]
ExplainSessionOption = Annotated[
    str | None, typer.Option("--session", metavar="SID", help="Every task of a session.")
]
ShrinkTraceOption = Annotated[
    str, typer.Argument(metavar="TRACE", help="A failing trace (.gz ok).")
]
UntilOption = Annotated[
    str,
    typer.Option(
        "--until",
        metavar="HOW",
        help="check | contract | diff:POLICY | cmd:'SHELL' ({} or $TRACE is the file).",
    ),
]
ShrinkOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="The small trace (- stdout).")
]
MaxTimeOption = Annotated[
    float | None,
    typer.Option(
        "--max-time",
        metavar="SECONDS",
        help="Stop after this long and write the smallest failing trace found so far.",
    ),
]
KeepExpectsOption = Annotated[
    bool,
    typer.Option(
        "--keep-expects",
        help="Keep every kept get_work's expect (default: only the failing batch's).",
    ),
]
WorkloadsOption = Annotated[
    list[str] | None,
    typer.Argument(metavar="WORKLOAD...", help="Workloads (or traces) to run each point on."),
]
SweepPolicyOption = Annotated[
    list[str] | None,
    typer.Option("--policy", "-p", metavar="NAME", help="A policy to sweep (repeatable)."),
]
GridOption = Annotated[
    list[str] | None,
    typer.Option(
        "--grid",
        metavar="KEY=V1,V2",
        help="Values of a parameter (or time_scale, chunk_size, cost_a/b/c); repeatable.",
    ),
]
SpecOption = Annotated[
    str | None, typer.Option("--spec", metavar="FILE", help="The sweep as a TOML file.")
]
SweepOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="One JSON line per point.")
]
BackendOption = Annotated[
    str, typer.Option("--backend", metavar="local|ray", help="Where points run.")
]
JobsOption = Annotated[
    int | None,
    typer.Option("--jobs", "-j", metavar="N", help="Workers (default: every core)."),
]
AddressOption = Annotated[
    str | None,
    typer.Option("--address", metavar="ADDR", help="Ray: an existing cluster's address."),
]
CacheOption = Annotated[
    str, typer.Option("--cache", metavar="DIR", help="Where finished points are kept.")
]
FreshOption = Annotated[bool, typer.Option("--fresh", help="Run every point, cache or not.")]
CapacityOption = Annotated[
    bool,
    typer.Option("--capacity", help="Find each point's highest arrival rate meeting SLOs."),
]
SweepSloTtftOption = Annotated[
    float | None, typer.Option("--slo-ttft", metavar="SECONDS", help="Capacity: TTFT SLO.")
]
SweepSloTpotOption = Annotated[
    float | None, typer.Option("--slo-tpot", metavar="SECONDS", help="Capacity: TPOT SLO.")
]
GoodputOption = Annotated[
    float,
    typer.Option("--goodput", metavar="FRACTION", help="Capacity: requests meeting SLOs."),
]
RecordingsOption = Annotated[
    list[str],
    typer.Argument(metavar="RECORDING...", help="Clocked recordings (clock=True; .gz ok)."),
]
FitOutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write the cost model as JSON."),
]
InputPathOption = Annotated[str, typer.Argument(metavar="INPUT", help="An event trace or a dump.")]
StatsPolicyOption = Annotated[
    str | None,
    typer.Option("--policy", "-p", metavar="NAME", help="Traces: policy (default: the header's)."),
]
ReportInputPathOption = Annotated[
    str, typer.Argument(metavar="INPUT", help="A trace, a dump or a workload.")
]
ReportOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="The HTML file to write.")
]
ReportPolicyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        metavar="NAME",
        help="A configuration to show: NAME or NAME,KEY=VALUE,... (repeat to compare).",
    ),
]

# check
CheckPathsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[PATH]...",
        help="Trace files (*.jsonl, *.jsonl.gz) and folders of them (default: [tool.schedcli] "
        "traces in pyproject.toml, else traces).",
        show_default=False,
    ),
]
GoldenDirOption = Annotated[
    str | None,
    typer.Option(
        "--golden-dir",
        metavar="DIR",
        help="Where the goldens are (default: golden/ beside each trace); a trace "
        "NAME.jsonl has its golden at NAME.dump.jsonl there.",
    ),
]
AllowUncheckedOption = Annotated[
    bool,
    typer.Option(
        "--allow-unchecked", help="A trace with no expect and no golden passes (else it fails)."
    ),
]
StrictOption = Annotated[
    bool | None,
    typer.Option(
        "--strict/--no-strict",
        help="A golden that no trace claims fails the check (the default; or as configured).",
        show_default=False,
    ),
]
ShellArgument = Annotated[
    Shell,
    typer.Argument(metavar="SHELL", help="bash, zsh, fish or powershell."),
]
InstallOption = Annotated[
    bool,
    typer.Option("--install", help="Add it to the shell's start-up file instead of printing it."),
]
StagedOption = Annotated[
    bool,
    typer.Option(
        "--staged",
        help="Check what git's staged commit touches, deletions and renames included "
        "(the pre-commit hook).",
    ),
]
AllowMissingGoldenOption = Annotated[
    bool,
    typer.Option(
        "--allow-missing-golden",
        help="A trace without a golden passes on its expects (else it fails: no golden).",
    ),
]
UpdateOption = Annotated[
    bool,
    typer.Option(
        "--update",
        help="Rewrite every differing or missing golden (atomically) from its replay, and "
        "say what changed; traces whose expects fail are left alone.",
    ),
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="With --update: say what it would write, write nothing.")
]
JunitOption = Annotated[
    str | None,
    typer.Option(
        "--junit-xml",
        metavar="FILE",
        help="Also write a JUnit XML report: a testcase per trace (classname its folder).",
    ),
]
CheckFormatOption = Annotated[
    CheckFormat,
    typer.Option(
        "--format",
        "-f",
        metavar="text|json",
        help="text (for people) or json (a record per trace).",
    ),
]
CheckPolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        "-p",
        metavar="NAME",
        help="Replay every trace under this policy (name, module:Class or cxx:...), in place "
        "of its folder's policy and parameters and its header's policy.",
    ),
]


# conformance
class ConformancePart(StrEnum):
    contract = "contract"
    decode_first = "decode-first"


ConformancePartsArgument = Annotated[
    list[ConformancePart] | None,
    typer.Argument(
        metavar="[PART]...",
        help="contract (what any Scheduler keeps; the default) and/or decode-first "
        "(DecodeFirstScheduler's own batches).",
        show_default=False,
    ),
]

# debug
DebugCheckOption = Annotated[
    bool,
    typer.Option("--check", help="Mark every step whose batch differs from the trace's expect."),
]
AgainstOption = Annotated[
    str | None,
    typer.Option(
        "--against", metavar="POLICY", help="Replay beside a second policy; mark where they part."
    ),
]
AgainstParamOption = Annotated[
    list[str] | None,
    typer.Option("--against-param", metavar="KEY=VALUE", help="A parameter of --against's policy."),
]
NoColorOption = Annotated[
    bool, typer.Option("--no-color", help="No colour (as NO_COLOR=1); marks stay readable.")
]
EveryOption = Annotated[
    int,
    typer.Option(
        "--checkpoint-every",
        metavar="STEPS",
        help="Steps between checkpoints at first (they thin out past 32).",
    ),
]
