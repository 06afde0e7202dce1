"""The options and arguments several commands share, declared once (typer's ``Annotated``
aliases; a command's own are declared in its module in ``commandline/``), and what checks
every command's: ``check_numbers`` against the one table of bounds (``limits.OPTIONS``),
``check_paths`` against the path tables below, ``parse_params`` for ``-P KEY=VALUE``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from ..engine.cost import CostModel
from ..model.errors import UsageError
from ..model.limits import OPTIONS, BoundError
from ..streams.output import refuse_overwriting


class ViewFormat(StrEnum):
    table = "table"
    json = "json"


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
            bound = OPTIONS.get(key)
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
    | {"against", "against_param", "parts", "fail_on"}
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


# More options two or three commands share.

TraceOption = Annotated[
    str,
    typer.Argument(metavar="TRACE", help="Trace file (JSON Lines, .gz ok), or - for stdin."),
]
ExplainTraceOption = Annotated[str, typer.Argument(metavar="TRACE", help="Trace file (.gz ok).")]
GoldenOption = Annotated[
    str | None,
    typer.Option("--golden", metavar="FILE", help="Compare the whole dump with this golden dump."),
]
BParamOption = Annotated[
    list[str] | None,
    typer.Option("--b-param", metavar="KEY=VALUE", help="Side B parameter KEY=VALUE."),
]
JobsOption = Annotated[
    int | None,
    typer.Option("--jobs", "-j", metavar="N", help="Workers (default: every core)."),
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
