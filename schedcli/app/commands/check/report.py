"""What ``schedcli check`` says: a line per trace, each failure's first divergence and the
command that reproduces it, a summary (or a JSON record per trace); a JUnit report;
GitHub annotations. Paths are shown relative to the project's root."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import orjson

from ....engine.check.runner import checked
from ....engine.check.suite import Suite, find_suite
from ....formats.junit import ERROR, FAILURE, SKIPPED, Case, write_junit
from ....model.errors import CheckFailed, UsageError
from ....streams.output import atomic_output, refuse_overwriting
from ...config import Config, load_config
from .suite import BROKEN, FAIL, PASS, UNCHECKED, CheckRequest, Said, exit_code, said, suite_jobs
from .suite import ERROR as ERRORED

ORPHANED = "orphaned"
BROKE = "broke the Scheduler contract"  # a BROKEN verdict, in the report and its summary
ORPHAN_TEXT = "a golden no trace claims"
Shown = Callable[[str], str]


def relative_to(root: Path) -> Shown:
    """A path as shown: relative to ``root`` when it lies below it (symlinks kept as
    spelt), else absolute."""

    def shown(path: str) -> str:
        full = os.path.abspath(path)
        try:
            return printable(Path(full).relative_to(root).as_posix())
        except ValueError:
            return printable(full)

    return shown


def printable(text: str) -> str:
    """Text any output can carry: a file name's bytes that are not UTF-8 (held as lone
    surrogates) shown as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def show_text(
    out: IO[str], req: CheckRequest, suite: Suite, verdicts: Sequence[Said], shown: Shown
) -> None:
    names = [shown(v.trace) for v in verdicts]
    orphans = [shown(g) for g in suite.orphans]
    width = max([len(n) for n in names + orphans] + [1])
    for v, name in zip(verdicts, names, strict=True):
        said = v.coverage if v.status not in (ERRORED, BROKEN) else v.detail.splitlines()[0]
        said = printable(said)
        out.write(f"{v.status:<9}  {name:<{width}}  {said}\n")
        if v.updated:
            out.write(f"{'':<9}  {'':<{width}}  {printable(v.updated)}\n")
    for golden in orphans:
        out.write(f"{ORPHANED:<9}  {golden:<{width}}  {ORPHAN_TEXT}\n")
    for v, name in zip(verdicts, names, strict=True):
        if v.status == FAIL and v.detail:
            where = f"{name}:{v.line}" if v.line else name
            out.write(f"\n--- {where}: first divergence ---\n{printable(v.detail)}\n")
            out.write(f"reproduce: {v.command(shown)}\n")
        elif v.status == ERRORED:
            out.write(f"\n--- {name}: could not be checked ---\nreproduce: {v.command(shown)}\n")
        elif v.status == BROKEN:
            out.write(f"\n--- {name}: {BROKE} ---\nreproduce: {v.command(shown)}\n")
    out.write("\n" + summary(req, suite, verdicts) + "\n")


def summary(req: CheckRequest, suite: Suite, verdicts: Sequence[Said]) -> str:
    statuses = [v.status for v in verdicts]
    counts = {s: statuses.count(s) for s in (PASS, FAIL, BROKEN, UNCHECKED, ERRORED)}
    traces = f"{len(verdicts)} trace{'s' * (len(verdicts) != 1)}"
    said = (
        f"{traces}: {counts[PASS]} passed, {counts[FAIL]} failed, "
        f"{counts[BROKEN]} {BROKE}, "
        f"{counts[UNCHECKED]} unchecked{' (allowed)' if req.allow_unchecked else ''}, "
        f"{counts[ERRORED]} could not be read"
    )
    if suite.orphans:
        said += f"; {len(suite.orphans)} orphaned golden{'s' * (len(suite.orphans) > 1)}"
        said += " (failing)" if req.strict else " (not failing: --no-strict)"
    updated = sum(1 for v in verdicts if v.updated)
    if updated:
        said += f"; {updated} golden{'s' * (updated > 1)} " + (
            "would be written (--dry-run)" if req.dry_run else "written"
        )
    return said


def show_json(out: IO[bytes], suite: Suite, verdicts: Sequence[Said], shown: Shown) -> None:
    for v in verdicts:
        record = {k: printable(x) if isinstance(x, str) else x for k, x in v.to_json(shown).items()}
        out.write(orjson.dumps(record) + b"\n")
    for golden in suite.orphans:
        orphan = {"trace": None, "golden": shown(golden), "status": ORPHANED}
        out.write(orjson.dumps(orphan) + b"\n")


def junit_cases(
    req: CheckRequest, suite: Suite, verdicts: Sequence[Said], shown: Shown = str
) -> list[Case]:
    """A testcase per trace (classname its folder, name its file), and per orphaned golden
    (failing unless --no-strict)."""
    cases = []
    for v in verdicts:
        path = Path(shown(v.trace))
        case = Case(str(path.parent), path.name)
        if v.status == FAIL:
            case.outcome, case.message = FAILURE, v.coverage
            case.text = f"{v.detail}\nreproduce: {v.command(shown)}"
        elif v.status == BROKEN:  # the policy's failure, as a FAIL is
            case.outcome, case.message = FAILURE, v.detail.splitlines()[0]
            case.text = f"{v.detail}\nreproduce: {v.command(shown)}"
        elif v.status == ERRORED:
            case.outcome, case.message, case.text = ERROR, v.detail.splitlines()[0], v.detail
        elif v.status == UNCHECKED:
            case.outcome = SKIPPED if req.allow_unchecked else FAILURE
            case.message = v.coverage
        cases.append(case)
    for golden in suite.orphans:
        path = Path(shown(golden))
        outcome = FAILURE if req.strict else SKIPPED
        cases.append(Case(str(path.parent), path.name, outcome, ORPHAN_TEXT))
    return cases


def write_report(
    path: str, req: CheckRequest, suite: Suite, verdicts: Sequence[Said], shown: Shown
) -> None:
    with atomic_output(path) as out:
        write_junit(out, "schedcli check", junit_cases(req, suite, verdicts, shown))


def annotate(req: CheckRequest, suite: Suite, verdicts: Sequence[Said], shown: Shown) -> None:
    """Under GitHub Actions, an error annotation at the trace line of each failure's first
    divergence, and on each orphaned golden (workflow commands are read from stderr as
    from stdout)."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    failing = {FAIL, BROKEN, ERRORED} | (set() if req.allow_unchecked else {UNCHECKED})
    title = {
        FAIL: "schedcli check failed",
        BROKEN: f"the policy {BROKE}",
        ERRORED: "schedcli could not read this trace",
    }
    for v in verdicts:
        if v.status in failing:
            message = v.detail or v.coverage
            if v.status in (FAIL, BROKEN, ERRORED):
                message += f"\nreproduce: {v.command(shown)}"
            _annotation(shown(v.trace), v.line, title.get(v.status, "unchecked"), message)
    if req.strict:
        for golden in suite.orphans:
            _annotation(shown(golden), None, "orphaned golden", ORPHAN_TEXT)


def _annotation(file: str, line: int | None, title: str, message: str) -> None:
    where = f"file={_escape_property(file)}" + (f",line={line}" if line else "")
    sys.stderr.write(f"::error {where},title={_escape_property(title)}::{_escape_data(message)}\n")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def refuse_aliases(req: CheckRequest, suite: Suite, junit_xml: str | None) -> None:
    """Nothing check writes (the JUnit report; goldens under --update) is a file it
    reads."""
    traces = [("trace", trace) for trace, _ in suite.traces]
    goldens = [("the golden", g) for _, g in suite.traces if g is not None]
    writes_goldens = req.update and not req.dry_run
    inputs = traces + ([] if writes_goldens else goldens)
    outputs = (goldens if writes_goldens else []) + (
        [("--junit-xml", junit_xml)] if junit_xml else []
    )
    refuse_overwriting(inputs + [("orphaned golden", g) for g in suite.orphans], outputs)


def run_check(
    req: CheckRequest, fmt: str, junit_xml: str | None, config: Config | None = None
) -> None:
    """Check every trace of the suite and say so; CheckFailed (exit 1) on a failure,
    the worst error's code on a trace that could not be checked. ``config``: the suite's
    own settings, in place of the project's ``[tool.schedcli]``."""
    if req.dry_run and not req.update:
        raise UsageError("--dry-run applies to --update")
    if req.staged:
        _run_staged(req, fmt, junit_xml)
        return
    if config is None:
        config = load_config()
    req = req.with_config(config)
    _run(req, find_suite(req.paths, req.golden_dir), relative_to(config.root), fmt, junit_xml)


def _run_staged(req: CheckRequest, fmt: str, junit_xml: str | None) -> None:
    """``--staged``: the traces and goldens the staged commit touches, checked as the
    index holds them (and its ``[tool.schedcli]``), not as the working tree does."""
    from ....engine.check.staged import staged_view
    from .staged import staged_config, staged_root

    if req.paths:
        raise UsageError("--staged checks what git says the commit changes: give no PATH")
    if req.update:
        raise UsageError(
            "--staged checks the commit as staged; --update writes the working tree: run "
            "check --update, then stage the goldens it writes"
        )
    with staged_view() as view:
        if not view.relevant():
            print("note: the staged commit touches no trace or golden", file=sys.stderr)
            return
        config = staged_config(view)
        req = req.with_config(config)
        suite = view.suite(req.paths if config.traces else None, req.golden_dir)
        if not suite.traces and not suite.orphans:
            print(
                "note: the staged commit touches no trace or golden left to check (deleted "
                "with its golden, or outside the suite's folders)",
                file=sys.stderr,
            )
            return
        shown = relative_to(staged_root(view, config))
        for path in view.differing(suite):
            print(
                f"note: {shown(path)} is checked as staged; the working tree's copy differs "
                "(a reproduce command reads that one)",
                file=sys.stderr,
            )
        _run(req, suite, shown, fmt, junit_xml)


def _run(req: CheckRequest, suite: Suite, shown: Shown, fmt: str, junit_xml: str | None) -> None:
    """Check the suite's traces and say so (a suite written out from the index: its
    verdicts said with the repository's paths)."""
    refuse_aliases(req, suite, junit_xml)
    for note in suite.notes:
        print(f"note: {note.replace(*suite.alias) if suite.alias else note}", file=sys.stderr)
    if not suite.traces and not suite.orphans:
        where = ", ".join(req.paths)
        raise UsageError(f"no traces (*.jsonl, *.jsonl.gz) in {where}: nothing to check")
    cores = os.cpu_count() or 1
    if req.jobs is not None and req.jobs > cores:
        print(f"note: --jobs {req.jobs}: checking on the {cores} cores there are", file=sys.stderr)
    verdicts = list(checked(suite_jobs(req, suite), req.jobs or 1, said))
    if suite.alias is not None:
        from ....engine.check.staged import real_suite
        from .staged import real_verdict

        verdicts = [real_verdict(suite.alias, v) for v in verdicts]
        suite = real_suite(suite)
    if fmt == "json":
        show_json(sys.stdout.buffer, suite, verdicts, shown)
    else:
        show_text(sys.stdout, req, suite, verdicts, shown)
    sys.stdout.flush()
    if junit_xml is not None:
        write_report(junit_xml, req, suite, verdicts, shown)
    annotate(req, suite, verdicts, shown)
    code = exit_code(req, suite, verdicts)
    if code:
        # On a terminal, the report's summary is on the screen already: said once.
        on_screen = fmt != "json" and sys.stdout.isatty()
        error = CheckFailed("" if on_screen else summary(req, suite, verdicts))
        error.exit_code = code
        raise error
