"""``schedcli check``: its own options and its call (app/commands/check/)."""

from typing import Annotated

import typer

from .. import options as o

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


def check(
    paths: CheckPathsArgument = None,
    golden_dir: GoldenDirOption = None,
    jobs: o.JobsOption = None,
    allow_unchecked: AllowUncheckedOption = False,
    allow_missing_golden: AllowMissingGoldenOption = False,
    allow_incomplete: o.AllowIncompleteOption = False,
    strict: StrictOption = None,
    update: UpdateOption = False,
    dry_run: DryRunOption = False,
    junit_xml: o.JunitOption = None,
    staged: StagedOption = False,
    fmt: o.CheckFormatOption = o.CheckFormat.text,
    policy: CheckPolicyOption = None,
    param: o.ParamOption = None,
) -> None:
    """Check a suite of traces for CI: each against its recorded expects and its golden,
    in parallel; a line each, every failure's first divergence and the command that
    reproduces it, a summary; exit 1 on any failure (a trace without a golden, a golden
    without a trace included).
    """
    from ..commands.check.report import run_check
    from ..commands.check.suite import CheckRequest

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
