"""What ``schedcli check`` says: a line per trace, each failure's first divergence, a
summary (or a JSON record per trace); a JUnit report; GitHub annotations."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import orjson

from ..formats.junit import ERROR, FAILURE, SKIPPED, Case, write_junit
from ..formats.output import atomic_output
from ..model.errors import CheckFailed, UsageError
from .checking import ERROR as ERRORED
from .checking import (
    FAIL,
    PASS,
    UNCHECKED,
    CheckRequest,
    Suite,
    Verdict,
    exit_code,
    find_suite,
    run_suite,
)
from .config import load_config

ORPHANED = "orphaned"


def show_text(out: IO[str], req: CheckRequest, suite: Suite, verdicts: Sequence[Verdict]) -> None:
    width = max([len(v.trace) for v in verdicts] + [len(g) for g in suite.orphans] + [1])
    for v in verdicts:
        said = v.coverage if v.status != ERRORED else v.detail.splitlines()[0]
        out.write(f"{v.status:<9}  {v.trace:<{width}}  {said}\n")
        if v.updated:
            out.write(f"{'':<9}  {'':<{width}}  {v.updated}\n")
    for golden in suite.orphans:
        out.write(f"{ORPHANED:<9}  {golden:<{width}}  a golden no trace claims\n")
    for v in verdicts:
        if v.status == FAIL and v.detail:
            where = f"{v.trace}:{v.line}" if v.line else v.trace
            out.write(f"\n--- {where}: first divergence ---\n{v.detail}\n")
    out.write("\n" + summary(req, suite, verdicts) + "\n")


def summary(req: CheckRequest, suite: Suite, verdicts: Sequence[Verdict]) -> str:
    statuses = [v.status for v in verdicts]
    counts = {s: statuses.count(s) for s in (PASS, FAIL, UNCHECKED, ERRORED)}
    said = (
        f"{len(verdicts)} traces: {counts[PASS]} passed, {counts[FAIL]} failed, "
        f"{counts[UNCHECKED]} unchecked{' (allowed)' if req.allow_unchecked else ''}, "
        f"{counts[ERRORED]} could not be read"
    )
    if suite.orphans:
        said += f"; {len(suite.orphans)} orphaned golden{'s' * (len(suite.orphans) > 1)}"
        said += " (failing: --strict)" if req.strict else " (not failing without --strict)"
    updated = sum(1 for v in verdicts if v.updated)
    if updated:
        said += f"; {updated} golden{'s' * (updated > 1)} " + (
            "would be written (--dry-run)" if req.dry_run else "written"
        )
    return said


def show_json(out: IO[bytes], suite: Suite, verdicts: Sequence[Verdict]) -> None:
    for v in verdicts:
        out.write(orjson.dumps(v.to_json()) + b"\n")
    for golden in suite.orphans:
        out.write(orjson.dumps({"trace": None, "golden": golden, "status": ORPHANED}) + b"\n")


def junit_cases(req: CheckRequest, suite: Suite, verdicts: Sequence[Verdict]) -> list[Case]:
    """A testcase per trace (classname its folder, name its file), and per orphaned golden
    under --strict."""
    cases = []
    for v in verdicts:
        path = Path(v.trace)
        case = Case(str(path.parent), path.name)
        if v.status == FAIL:
            case.outcome, case.message = FAILURE, v.coverage
            case.text = v.detail
        elif v.status == ERRORED:
            case.outcome, case.message, case.text = ERROR, v.detail.splitlines()[0], v.detail
        elif v.status == UNCHECKED:
            case.outcome = SKIPPED if req.allow_unchecked else FAILURE
            case.message = v.coverage
        cases.append(case)
    if req.strict:
        for golden in suite.orphans:
            path = Path(golden)
            cases.append(Case(str(path.parent), path.name, FAILURE, "a golden no trace claims"))
    return cases


def write_report(path: str, req: CheckRequest, suite: Suite, verdicts: Sequence[Verdict]) -> None:
    with atomic_output(path) as out:
        write_junit(out, "schedcli check", junit_cases(req, suite, verdicts))


def annotate(req: CheckRequest, verdicts: Sequence[Verdict]) -> None:
    """Under GitHub Actions, an error annotation at the trace line of each failure's first
    divergence (workflow commands are read from stderr as from stdout)."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    failing = {FAIL, ERRORED} | (set() if req.allow_unchecked else {UNCHECKED})
    for v in verdicts:
        if v.status not in failing:
            continue
        where = f"file={_escape_property(v.trace)}"
        if v.line:
            where += f",line={v.line}"
        title = {FAIL: "schedcli check failed", ERRORED: "schedcli could not read this trace"}
        message = v.detail or v.coverage
        sys.stderr.write(
            f"::error {where},title={_escape_property(title.get(v.status, 'unchecked'))}::"
            f"{_escape_data(message)}\n"
        )


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def run_check(req: CheckRequest, fmt: str, junit_xml: str | None) -> None:
    """Check every trace of the suite and say so; CheckFailed (exit 1) on a failure,
    the worst error's code on a trace that could not be checked."""
    if req.dry_run and not req.update:
        raise UsageError("--dry-run applies to --update")
    req = req.with_config(load_config())
    suite = find_suite(req.paths, req.golden_dir)
    if not suite.traces:
        where = ", ".join(req.paths)
        raise UsageError(f"no traces (*.jsonl, *.jsonl.gz) in {where}: nothing to check")
    verdicts = list(run_suite(req, suite))
    if fmt == "json":
        show_json(sys.stdout.buffer, suite, verdicts)
    else:
        show_text(sys.stdout, req, suite, verdicts)
    sys.stdout.flush()
    if junit_xml is not None:
        write_report(junit_xml, req, suite, verdicts)
    annotate(req, verdicts)
    code = exit_code(req, suite, verdicts)
    if code:
        error = CheckFailed(summary(req, suite, verdicts))
        error.exit_code = code
        raise error
