"""``schedcli check``: every trace of a folder checked against what it records (its
``expect``s) and against its golden, one verdict each, in parallel, in a stable order.

The engine finds the suite and checks it (``engine/check/``); here are what the command
was asked (``CheckRequest``), the jobs it makes of the suite, and each verdict in words
(``Said``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ....engine.check.suite import Suite
from ....engine.check.trace import BROKEN, ERROR, FAIL, PASS, UNCHECKED, Job, Verdict
from ....engine.stall import STALL_STEPS_ENV
from ....runtimes.executorch.spec import ENV_ROOT
from ...config import Config

__all__ = ["BROKEN", "ERROR", "FAIL", "PASS", "UNCHECKED", "CheckRequest", "Said", "said"]


@dataclass
class CheckRequest:
    """What ``schedcli check`` was asked: the command line's options over the project's
    ``[tool.schedcli]`` (``with_config``)."""

    paths: list[str]
    golden_dir: str | None = None
    jobs: int | None = None  # None: every core
    allow_unchecked: bool = False
    allow_missing_golden: bool = False
    allow_incomplete: bool = False
    strict: bool | None = None  # None: as configured (by default, strict)
    update: bool = False
    dry_run: bool = False
    staged: bool = False  # the traces and goldens git says the staged commit touches
    # -p: every trace's policy, in place of its folder's (and its folder's params) and its
    # header's; -P: parameters over whatever else applies.
    policy: str | None = None
    params: dict[str, object] = field(default_factory=dict)
    config: Config = field(default_factory=Config)

    def with_config(self, config: Config) -> CheckRequest:
        return CheckRequest(
            self.paths or config.traces or ["traces"],
            golden_dir=self.golden_dir or config.golden_dir,
            jobs=self.jobs or config.jobs or os.cpu_count() or 1,
            allow_unchecked=self.allow_unchecked or config.allow_unchecked,
            allow_missing_golden=self.allow_missing_golden,
            allow_incomplete=self.allow_incomplete or config.allow_incomplete,
            strict=config.strict if self.strict is None else self.strict,
            update=self.update,
            dry_run=self.dry_run,
            staged=self.staged,
            policy=self.policy,
            params=self.params,
            config=config,
        )

    def golden_required(self, trace: str) -> bool:
        return not self.allow_missing_golden and not self.config.golden_optional(trace)


def suite_jobs(req: CheckRequest, suite: Suite) -> list[Job]:
    """Each trace of the suite as a job, under its folder's policy and parameters, or the
    command line's: -p replaces a folder's policy and its parameters (they were set for
    that policy), -P goes over what applies. Each carries what the run was given outside
    the command's arguments (``Job.executorch``, ``Job.stall_steps``): the checkout only
    for a job that builds a C++ policy, whose reproduce command needs it."""
    from ....engine.check.runner import may_end_the_process

    jobs = []
    for trace, golden in suite.traces:
        settings = req.config.settings_for(trace)
        folder = {} if req.policy is not None else settings.params
        job = Job(
            trace,
            golden,
            req.policy if req.policy is not None else settings.policy,
            {**folder, **req.params},
            req.update,
            req.dry_run,
            req.golden_required(trace),
            req.allow_incomplete,
            suite.alias,
            stall_steps=os.environ.get(STALL_STEPS_ENV) or None,
        )
        if may_end_the_process(job):
            job.executorch = os.environ.get(ENV_ROOT) or None
        jobs.append(job)
    return jobs


@dataclass
class Said:
    """One trace's verdict in words: ``status`` and what was compared (``coverage``); for a
    failure, the first divergence in plain text and the trace line it points at."""

    trace: str
    golden: str | None
    status: str
    coverage: str
    detail: str = ""
    line: int | None = None
    updated: str = ""  # what --update did (or, with --dry-run, would do) to the golden
    exit_code: int = 0  # for ERROR 2 (bad input), for BROKEN 3
    job: Job | None = None  # how it was checked: what reproduces it
    expects: bool = False  # the trace records expects (--check had something to check)
    no_golden: bool = False  # it failed for want of a golden

    def to_json(self, shown: Callable[[str], str] = str) -> dict[str, Any]:
        return {
            "trace": shown(self.trace),
            "golden": shown(self.golden) if self.golden else None,
            "status": self.status.lower(),
            "coverage": self.coverage,
            "line": self.line,
            "detail": self.detail or None,
            "updated": self.updated or None,
            "command": self.command(shown) if self.status in (FAIL, ERROR, BROKEN) else None,
        }

    def command(self, shown: Callable[[str], str] = str) -> str | None:
        """The replay that shows this failure on its own: the trace under the policy and
        parameters it was checked with, against what was compared."""
        job = self.job
        if job is None:
            return None
        import shlex

        given = ["--executorch", shown(job.executorch)] if job.executorch else []
        given += ["--stall-steps", job.stall_steps] if job.stall_steps else []
        if self.no_golden:
            return shlex.join(["schedcli", "check", "--update", shown(job.trace), *given])
        words = ["schedcli", "replay", shown(job.trace), *given]
        if job.policy is not None:
            words += ["-p", job.policy]
        for key, value in job.params.items():
            words += ["-P", f"{key}={value}"]
        if self.expects or self.golden is None:
            words.append("--check")
        if self.golden is not None:
            words += ["--golden", shown(self.golden)]
        if job.allow_incomplete:
            words.append("--allow-incomplete")
        return shlex.join(words)


def said(verdict: Verdict) -> Said:
    """``verdict`` in words (where it was reached: its failure's views are drawn from the
    replay's objects)."""
    job = verdict.job
    words = Said(job.trace, verdict.golden, verdict.status, "", line=verdict.line)
    words.exit_code, words.job = verdict.exit_code, job
    words.expects, words.no_golden = verdict.expects, verdict.no_golden
    error = verdict.error
    if verdict.ended is not None:
        words.detail = (
            f"{job.trace}: the process checking it ended ({verdict.ended.how}) without a "
            "verdict: its policy ended the process (a C++ scheduler must return from every "
            "call)"
        )
    elif verdict.mismatch is not None:
        from ...views.check_views import step_mismatch_view

        words.coverage = f"expect differs at step {verdict.mismatch.mismatch.step}"
        words.detail = _plain(step_mismatch_view(verdict.mismatch))
    elif verdict.status == FAIL and error is not None:  # a submit outcome, an incomplete one
        from ....engine.recorded import OutcomeMismatch
        from ...usage import said

        words.coverage = (
            "a submit outcome differs" if isinstance(error, OutcomeMismatch) else said(error)
        )
        words.detail = said(error)
    elif error is not None:
        from ...usage import error_text

        words.detail = error_text(error)
    else:
        _said_checked(verdict, words)
    return words


def _said_checked(verdict: Verdict, words: Said) -> None:
    """What a replay that ran to its end checked, and found."""
    coverage = [] if verdict.checked is None else [verdict.checked]
    compared, updated = verdict.compared, verdict.updated
    differ = ""
    if compared is not None:
        steps = f"golden: {_count(compared.steps, 'step')} compared"
        coverage.append(f"{steps}, and the contract break it pins" if compared.pinned else steps)
        if compared.reasons_differing:  # shown, never a difference: reasons are not compared
            worded = _count(compared.reasons_differing, "rejection")
            coverage[-1] += f", {worded} worded differently (reasons are not compared)"
        differ = (
            f"{_count(compared.steps_differing, 'step')} and "
            f"{_count(compared.events_differing, 'other record')} differ"
        )
    words.coverage = "; ".join(coverage)
    if updated is not None:
        what = differ
        if updated.steps is not None:
            what = f"new golden, {_count(updated.steps, 'step')}"
            if updated.unreadable is not None:
                what = f"{what}, in place of one that could not be read: {updated.unreadable}"
        verb = "would write" if updated.dry_run else "wrote"
        words.updated = f"{verb} {updated.golden} ({what})"
        if updated.steps is not None and not updated.dry_run:
            words.coverage = "; ".join(filter(None, [words.coverage, "golden: written"]))
    if verdict.no_golden:
        words.coverage = "; ".join(filter(None, [words.coverage, "no golden"]))
        words.detail = "no golden: write it from this replay with schedcli check --update"
    if compared is not None and verdict.status == FAIL:
        first = compared.first_step
        words.coverage += f"; {differ}" + (
            f", the first at step {first}" if first is not None else ""
        )
        words.detail = _golden_detail(verdict)
    if verdict.status == UNCHECKED:
        words.coverage = "nothing to check: no expect, no golden"


def _golden_detail(verdict: Verdict) -> str:
    from ...views.golden import golden_views

    assert verdict.diff is not None
    return "\n".join(_plain(view) for view in golden_views(verdict.diff, verdict.left_out))


def _plain(renderable: Any) -> str:
    """A rich renderable as plain text, 100 columns, no colour."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=100, color_system=None, force_terminal=False).print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip().splitlines())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def exit_code(req: CheckRequest, suite: Suite, verdicts: Sequence[Said]) -> int:
    """0 when every trace passed; the worst error's code (2 bad input, 3 a broken
    policy); else 1 for a failure, an unchecked trace (unless allowed) or, unless
    ``--no-strict``, an orphaned golden."""
    errors = [v.exit_code for v in verdicts if v.status in (ERROR, BROKEN)]
    if errors:
        return max(errors)
    failed = any(v.status == FAIL for v in verdicts)
    unchecked = any(v.status == UNCHECKED for v in verdicts) and not req.allow_unchecked
    orphaned = bool(suite.orphans) and req.strict
    return 1 if failed or unchecked or orphaned else 0
