"""``schedcli check``: every trace of a folder checked against what it records (its
``expect``s) and against its golden, one verdict each, in parallel, in a stable order.

A trace ``DIR/NAME.jsonl`` (or ``.jsonl.gz``) has its golden at
``DIR/golden/NAME.dump.jsonl`` unless ``--golden-dir`` says where goldens live.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.replay import ExpectMismatch, Record
from ..engine.run import open_replay
from ..formats.output import atomic_output
from ..formats.writer import JsonlWriter
from ..model.errors import CheckFailed, SchedcliError, UsageError
from .config import Config

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz")
DUMP_SUFFIX = ".dump.jsonl"
PASS, FAIL, UNCHECKED, ERROR = "pass", "FAIL", "unchecked", "error"


@dataclass
class CheckRequest:
    """What ``schedcli check`` was asked: the command line's options over the project's
    ``[tool.schedcli]`` (``with_config``)."""

    paths: list[str]
    golden_dir: str | None = None
    jobs: int | None = None  # None: every core
    allow_unchecked: bool = False
    strict: bool = False
    update: bool = False
    dry_run: bool = False
    config: Config = field(default_factory=Config)

    def with_config(self, config: Config) -> CheckRequest:
        return CheckRequest(
            self.paths or config.traces or ["traces"],
            golden_dir=self.golden_dir or config.golden_dir,
            jobs=self.jobs or config.jobs or os.cpu_count() or 1,
            allow_unchecked=self.allow_unchecked or config.allow_unchecked,
            strict=self.strict or config.strict,
            update=self.update,
            dry_run=self.dry_run,
            config=config,
        )


@dataclass
class Verdict:
    """One trace's outcome: ``status`` and what was compared (``coverage``); for a failure,
    the first divergence in plain text and the trace line it points at."""

    trace: str
    golden: str | None
    status: str
    coverage: str
    detail: str = ""
    line: int | None = None
    updated: str = ""  # what --update did (or, with --dry-run, would do) to the golden
    exit_code: int = 0  # for ERROR: the error's own exit code (2 bad input, 3 a policy)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "golden": self.golden,
            "status": self.status.lower(),
            "coverage": self.coverage,
            "line": self.line,
            "detail": self.detail or None,
            "updated": self.updated or None,
        }


@dataclass
class Suite:
    """The traces found and the goldens with no trace."""

    traces: list[tuple[str, str | None]] = field(default_factory=list)  # (trace, golden)
    orphans: list[str] = field(default_factory=list)


def find_suite(paths: Sequence[str], golden_dir: str | None) -> Suite:
    """Every trace in ``paths`` and the folders below them, sorted, each with its golden's
    path; goldens in a searched folder's golden folder that no trace claims are orphans.
    A golden given by name stands for its trace (a commit that changes only a golden
    checks the trace it belongs to)."""
    traces: list[Path] = []
    folders: set[Path] = set()
    for given in paths:
        p = Path(given)
        if p.is_dir():
            for folder in _folders(p):
                folders.add(folder)
                traces += [c for c in folder.iterdir() if c.is_file() and _is_trace(c.name)]
        elif p.is_file() and p.name.endswith(DUMP_SUFFIX):
            traces += _traces_of(p, golden_dir)
        elif p.is_file():
            traces.append(p)
        else:
            raise UsageError(f"{given}: no such file or folder")
    suite = Suite()
    claimed: set[Path] = set()
    for trace in sorted(set(traces)):
        golden = _golden_of(trace, golden_dir)
        claimed.add(golden.resolve())
        suite.traces.append((str(trace), str(golden)))
    for where in sorted({Path(golden_dir) if golden_dir else f / "golden" for f in folders}):
        if where.is_dir():
            goldens = sorted(where.glob(f"*{DUMP_SUFFIX}"))
            suite.orphans += [str(g) for g in goldens if g.resolve() not in claimed]
    return suite


def _folders(top: Path) -> Iterator[Path]:
    """``top`` and every folder below it but golden folders and hidden ones."""
    yield top
    for child in sorted(top.iterdir()):
        if child.is_dir() and child.name != "golden" and not child.name.startswith("."):
            yield from _folders(child)


def _traces_of(golden: Path, golden_dir: str | None) -> list[Path]:
    """The trace a golden belongs to, by the default layout (``DIR/golden/NAME.dump.jsonl``
    for ``DIR/NAME.jsonl``); none under ``--golden-dir``, which holds every folder's."""
    if golden_dir is not None:
        return []
    stem = golden.name.removesuffix(DUMP_SUFFIX)
    found = [golden.parent.parent / f"{stem}{suffix}" for suffix in TRACE_SUFFIXES]
    return [t for t in found if t.is_file()][:1]


def _is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith(DUMP_SUFFIX)


def _golden_of(trace: Path, golden_dir: str | None) -> Path:
    stem = trace.name.removesuffix(".gz").removesuffix(".jsonl")
    folder = Path(golden_dir) if golden_dir else trace.parent / "golden"
    return folder / f"{stem}{DUMP_SUFFIX}"


def run_suite(req: CheckRequest, suite: Suite) -> Iterator[Verdict]:
    """Each trace's verdict, in the suite's order, the traces checked on ``req.jobs``
    processes."""
    jobs = suite_jobs(req, suite)
    workers = min(req.jobs or 1, len(jobs))
    if workers < 2:
        yield from map(check_job, jobs)
        return
    pool = multiprocessing.Pool(workers, initializer=_worker_signals)
    answered = False
    try:
        yield from pool.imap(check_job, jobs)
        answered = True
    finally:
        if answered:
            # Every job is answered: the workers are told there is no more work and leave
            # on their own. Not terminate(): its SIGTERM can reach an idle worker just
            # before it blocks on the pool's queue lock, which the pool then holds, and the
            # worker never runs its handler (a hang, seen in the tests).
            pool.close()
        else:
            # Leaving early (a stop signal, an error): the traces being checked stop (each
            # worker's own stop handler cleans up) and no more start.
            pool.terminate()
        pool.join()


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the command (which terminates it), and on termination
    exits quietly through its ``finally`` blocks (a golden being written is not put in
    place: its temporary file goes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_quietly)


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@dataclass
class Job:
    """One trace to check, and how (sent to a worker process)."""

    trace: str
    golden: str | None
    policy: str | None
    params: dict[str, object]
    update: bool
    dry_run: bool


def suite_jobs(req: CheckRequest, suite: Suite) -> list[Job]:
    """Each trace of the suite as a job, under its folder's policy and parameters."""
    jobs = []
    for trace, golden in suite.traces:
        settings = req.config.settings_for(trace)
        jobs.append(Job(trace, golden, settings.policy, settings.params, req.update, req.dry_run))
    return jobs


def check_job(job: Job) -> Verdict:
    trace = job.trace
    try:
        return check_trace(job)
    except CheckFailed as e:  # a submit the recording accepted and the replay refused
        return Verdict(trace, None, FAIL, "a submit outcome differs", str(e), _line_of(e))
    except SchedcliError as e:
        from .usage import error_text

        verdict = Verdict(trace, None, ERROR, "", error_text(e), _line_of(e))
        verdict.exit_code = e.exit_code
        return verdict


def _line_of(e: SchedcliError) -> int | None:
    line = getattr(e, "line", None)
    return line if isinstance(line, int) else None


class _Tee:
    """The replay's records to each sink."""

    def __init__(self) -> None:
        self.sinks: list[Callable[[Record], None]] = []

    def __call__(self, record: Record) -> None:
        for sink in self.sinks:
            sink(record)


def check_trace(job: Job) -> Verdict:
    """One trace replayed once: its expects checked as they come, its dump compared with
    its golden (when there is one) step by step, and on ``update`` written beside it to
    take its place if it differs or is missing."""
    new = _NewGolden(job.golden, job.dry_run) if job.update and job.golden else None
    try:
        return _check(job, new)
    finally:
        if new is not None:
            new.drop()  # unless kept


def _check(job: Job, new: _NewGolden | None) -> Verdict:
    trace, golden = job.trace, job.golden
    tee = _Tee()
    with open_replay(trace, policy=job.policy, params=job.params, note=lambda _: None) as opened:
        opened.policy.explaining = True  # a difference's reasons, kept as it is found
        engine = opened.replayer(tee, check=True)
        comparison = None
        if golden is not None and os.path.exists(golden):
            from .golden import GoldenComparison

            label = f"replay under {opened.policy_name}"
            comparison = GoldenComparison(golden, label, lambda: engine)
            tee.sinks.append(comparison)
        if new is not None:
            tee.sinks.append(new)
        try:
            opened.run(engine)
        except ExpectMismatch as e:
            from .render import mismatch_view

            m = e.mismatch
            text = _plain(mismatch_view(m, m.left))
            return Verdict(trace, None, FAIL, f"expect differs at step {m.step}", text, m.line)
        if comparison is not None:
            comparison.finish()
    coverage = []
    if engine.checked or engine.outcomes_checked:
        from .replaying import checked_text

        coverage.append(checked_text(engine))
    if comparison is not None:
        coverage.append(f"golden: {_count(comparison.result.steps_compared, 'step')} compared")
    verdict = Verdict(trace, None, PASS, "; ".join(coverage))
    if comparison is not None:
        _compared(verdict, job, comparison, new)
    elif new is not None:
        verdict.updated = new.keep(f"new golden, {_count(new.steps, 'step')}")
        if not new.dry_run:
            verdict.golden = golden
            verdict.coverage = "; ".join(filter(None, [verdict.coverage, "golden: written"]))
    if not verdict.coverage:
        verdict.status, verdict.coverage = UNCHECKED, "nothing to check: no expect, no golden"
    return verdict


def _compared(verdict: Verdict, job: Job, comparison: Any, new: _NewGolden | None) -> None:
    verdict.golden = job.golden
    if comparison.same:
        return
    result = comparison.result
    differ = (
        f"{_count(result.steps_differing, 'step')} and "
        f"{_count(result.events_differing, 'other record')} differ"
    )
    if new is not None:
        verdict.updated = new.keep(differ)
        if not new.dry_run:
            return  # the golden is now this replay's dump
    verdict.status = FAIL
    first = comparison.result.first
    verdict.coverage += f"; {differ}" + (f", the first at step {first.step}" if first else "")
    verdict.detail = _golden_detail(job, comparison)
    verdict.line = comparison.first_line


class _Dropped(Exception):
    """Leaves an atomic output unwritten."""


class _NewGolden:
    """``--update``: the replay's dump written beside the golden as it is made (never held
    in memory), put in the golden's place only by ``keep``; with ``dry_run``, only its
    steps counted."""

    def __init__(self, golden: str, dry_run: bool) -> None:
        self.golden, self.dry_run = golden, dry_run
        self.steps = 0
        self._stack = ExitStack()
        self._write: JsonlWriter | None = None
        if not dry_run:
            Path(golden).parent.mkdir(parents=True, exist_ok=True)
            self._write = JsonlWriter(self._stack.enter_context(atomic_output(golden)))

    def __call__(self, record: Record) -> None:
        if "batch" in record:
            self.steps += 1
        if self._write is not None:
            self._write(record)

    def keep(self, what: str) -> str:
        """The golden replaced (atomically); what was (or would be) done, said."""
        if self.dry_run:
            return f"would write {self.golden} ({what})"
        self._stack.close()
        return f"wrote {self.golden} ({what})"

    def drop(self) -> None:
        self._stack.__exit__(_Dropped, _Dropped(), None)


def _golden_detail(job: Job, comparison: Any) -> str:
    def reasons_at(step: int) -> Any:
        from .explain import explain_step

        return explain_step(job.trace, step, job.policy, job.params).left

    return "\n".join(_plain(view) for view in comparison.views(reasons_at))


def _plain(renderable: Any) -> str:
    """A rich renderable as plain text, 100 columns, no colour."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=100, color_system=None, force_terminal=False).print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip().splitlines())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def exit_code(req: CheckRequest, suite: Suite, verdicts: Sequence[Verdict]) -> int:
    """0 when every trace passed; the worst error's code (2 bad input, 3 a broken
    policy); else 1 for a failure, an unchecked trace (unless allowed) or, under
    ``--strict``, an orphaned golden."""
    errors = [v.exit_code for v in verdicts if v.status == ERROR]
    if errors:
        return max(errors)
    failed = any(v.status == FAIL for v in verdicts)
    unchecked = any(v.status == UNCHECKED for v in verdicts) and not req.allow_unchecked
    orphaned = bool(suite.orphans) and req.strict
    return 1 if failed or unchecked or orphaned else 0
