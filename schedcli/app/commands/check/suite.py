"""``schedcli check``: every trace of a folder checked against what it records (its
``expect``s) and against its golden, one verdict each, in parallel, in a stable order.

A trace ``DIR/NAME.jsonl`` (or ``.jsonl.gz``) has its golden at
``DIR/golden/NAME.dump.jsonl`` unless ``--golden-dir`` says where goldens live.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....engine.replay import Record
from ....engine.run import open_replay
from ....formats.writer import JsonlWriter
from ....model.errors import (
    CheckFailed,
    InputError,
    InvariantError,
    SchedcliError,
    StepMismatch,
    UsageError,
)
from ....streams.output import atomic_output
from ...config import Config

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz")
DUMP_SUFFIX = ".dump.jsonl"
PASS, FAIL, UNCHECKED, ERROR = "pass", "FAIL", "unchecked", "error"
BROKEN = "BROKEN"  # the policy broke the Scheduler contract (exit 3): not the trace's fault


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


@dataclass
class Suite:
    """The traces found, the goldens with no trace, and the folders not searched again
    (a link back into the suite)."""

    traces: list[tuple[str, str | None]] = field(default_factory=list)  # (trace, golden)
    orphans: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # --staged: (the folder the index is written out in, the repository it stands for);
    # a path below the first is shown as the same path below the second.
    alias: tuple[str, str] | None = None


def find_suite(paths: Sequence[str], golden_dir: str | None, require_traces: bool = True) -> Suite:
    """Every trace in ``paths`` and the folders below them, sorted, each with its golden's
    path; goldens in a searched folder's golden folder that no trace claims are orphans.
    A golden given by name stands for its trace (a commit that changes only a golden
    checks the trace it belongs to). Each real folder is searched once. A folder given
    with no trace in it or below (unless not ``require_traces``), and two traces claiming
    one golden, are usage errors.

    A trace is named by where it is found, a link too: the golden of ``DIR/NAME.jsonl``
    is ``DIR/golden/NAME.dump.jsonl`` whatever the link points at. A link named as a trace
    that leads to no file (dangling, a loop, a folder) is a trace all the same: its check
    is an error naming the link (``link_trouble``), never a silent skip."""
    suite = Suite()
    traces: list[Path] = []
    folders: list[Path] = []
    searched: dict[tuple[int, int], Path] = {}
    for given in paths:
        p = Path(given)
        if given == "-":
            raise UsageError("check reads trace files and folders, not standard input (-)")
        if p.is_dir() and not _trace_link(p):
            fresh = list(_folders(p, searched, suite.notes))  # none: searched already
            folders += fresh
            found = [c for f in fresh for c in f.iterdir() if _is_trace_entry(c)]
            if fresh and not found and require_traces:
                raise UsageError(
                    f"{given}: no traces (*.jsonl, *.jsonl.gz) in this folder or below: "
                    "nothing to check"
                )
            traces += found
        elif p.is_file() and p.name.endswith(DUMP_SUFFIX):
            traces += _traces_of(p, golden_dir)
        elif p.is_file() or p.is_symlink():
            traces.append(p)
        else:
            raise UsageError(f"{given}: no such file or folder")
    claimed: dict[str, Path] = {}
    # One spelling of each (file, golden) pair: a file given twice is checked once, but a
    # link beside its target is a trace of its own, with a golden of its own.
    unique = {(_real(t), _real(golden_of(t, golden_dir))): t for t in reversed(traces)}
    for trace in sorted(unique.values()):
        golden = golden_of(trace, golden_dir)
        other = claimed.setdefault(_real(golden), trace)
        if other != trace:
            raise UsageError(
                f"{other} and {trace} both claim the golden {golden}: a golden belongs to "
                "one trace (rename one of them, or give each folder its own --golden-dir)"
            )
        suite.traces.append((str(trace), str(golden)))
    for where in sorted({Path(golden_dir) if golden_dir else f / "golden" for f in folders}):
        if where.is_dir():
            goldens = sorted(where.glob(f"*{DUMP_SUFFIX}"))
            suite.orphans += [str(g) for g in goldens if _real(g) not in claimed]
    suite.orphans = sorted(set(suite.orphans))
    return suite


def link_trouble(path: str) -> str | None:
    """Why ``path``, a link, leads to no file a trace could be read from (to nothing, round
    a loop, to a folder); None when it does, or is no link."""
    if not os.path.islink(path):
        return None
    target = os.readlink(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"a link ({target}) in a loop of links: it leads to no file"
        return f"a link to {target}, which does not exist"
    if stat.S_ISDIR(st.st_mode):
        return f"a link to the folder {target}, not to a trace"
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device: reading it could wait forever
        return f"a link to {target}, which is not a regular file"
    return None


def shown_as(alias: tuple[str, str] | None, path: str) -> str:
    """``path`` as the user knows it: below ``alias``'s first folder (a written-out
    index), the same path below its second (the repository)."""
    if alias is None:
        return path
    view, real = alias
    below = os.path.relpath(path, view) if os.path.isabs(path) else os.pardir
    if below == os.curdir:
        return real
    if below == os.pardir or below.startswith(os.pardir + os.sep):
        return path
    return os.path.join(real, below)


def _real(path: Path) -> str:
    """The file ``path`` is, links followed (never raising on a loop, as Path.resolve
    does before Python 3.13)."""
    return os.path.realpath(path)


def _is_trace_entry(entry: Path) -> bool:
    """A folder's entry that is a trace: a file, or any link, named as one."""
    return is_trace(entry.name) and (entry.is_symlink() or entry.is_file())


def _trace_link(path: Path) -> bool:
    """A link named as a trace: taken for a trace (to be checked, or refused naming the
    link), never searched as a folder."""
    return is_trace(path.name) and path.is_symlink()


def _folders(top: Path, searched: dict[tuple[int, int], Path], notes: list[str]) -> Iterator[Path]:
    """``top`` and every folder below it but golden folders and hidden ones, each real
    folder once, in sorted depth-first order (walked with a stack of our own: a tree of
    any depth): a link to a folder searched already, or to one holding the folder it sits
    in (a loop), is noted and not followed."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in searched:
            if folder.is_symlink():
                notes.append(
                    f"{folder}: a link to {searched[key]}, searched already: not searched again"
                )
            continue
        searched[key] = folder
        yield folder
        below = []
        for child in sorted(folder.iterdir()):
            if not child.is_dir() or child.name == "golden" or child.name.startswith("."):
                continue
            if _trace_link(child):
                continue  # a trace, refused as one
            if child.is_symlink() and folder.resolve().is_relative_to(child.resolve()):
                notes.append(f"{child}: a link to a folder holding it (a loop): not followed")
                continue
            below.append(child)
        stack.extend(reversed(below))


def _traces_of(golden: Path, golden_dir: str | None) -> list[Path]:
    """The traces a golden belongs to, by the default layout (``DIR/golden/NAME.dump.jsonl``
    for ``DIR/NAME.jsonl`` and ``DIR/NAME.jsonl.gz``); none under ``--golden-dir``, which
    holds every folder's."""
    if golden_dir is not None:
        return []
    stem = golden.name.removesuffix(DUMP_SUFFIX)
    found = [golden.parent.parent / f"{stem}{suffix}" for suffix in TRACE_SUFFIXES]
    return [t for t in found if _is_trace_entry(t)]


def is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith(DUMP_SUFFIX)


def golden_of(trace: Path, golden_dir: str | None) -> Path:
    """Where the golden of ``trace`` is, by the name and folder the trace is found under."""
    stem = trace.name.removesuffix(".gz").removesuffix(".jsonl")
    folder = Path(golden_dir) if golden_dir else trace.parent / "golden"
    return folder / f"{stem}{DUMP_SUFFIX}"


@dataclass
class Job:
    """One trace to check, and how (sent to a worker process)."""

    trace: str
    golden: str | None
    policy: str | None
    params: dict[str, object]
    update: bool
    dry_run: bool
    golden_required: bool = True
    allow_incomplete: bool = False
    alias: tuple[str, str] | None = None  # Suite.alias: how its paths are shown
    # What the run was given outside the command's arguments (--executorch, or
    # $EXECUTORCH_ROOT, for a C++ policy; --stall-steps): its reproduce command repeats it.
    executorch: str | None = None
    stall_steps: str | None = None


def check_job(job: Job) -> Verdict:
    try:
        verdict = check_trace(job)
    except CheckFailed as e:  # a submit outcome differs, or the recording is incomplete
        verdict = Verdict(job.trace, None, FAIL, _failed(e), str(e), _line_of(e))
        verdict.expects = True
    except SchedcliError as e:
        from ...usage import error_text

        status = BROKEN if isinstance(e, InvariantError) else ERROR
        verdict = Verdict(job.trace, None, status, "", error_text(e), _line_of(e))
        verdict.exit_code = e.exit_code
    verdict.job = job
    if verdict.golden is None and job.golden is not None and os.path.exists(job.golden):
        verdict.golden = job.golden
    return verdict


def _failed(e: CheckFailed) -> str:
    from ....engine.recorded import OutcomeMismatch

    return "a submit outcome differs" if isinstance(e, OutcomeMismatch) else str(e.args[0])


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
    take its place if it differs or is missing. A link that leads to no file is bad
    input naming the link."""
    trouble = link_trouble(job.trace)
    if trouble is not None:
        raise InputError(shown_as(job.alias, job.trace), None, trouble)
    new = _NewGolden(job.golden, job.dry_run) if job.update and job.golden else None
    try:
        return _check(job, new)
    finally:
        if new is not None:
            new.drop()  # unless kept


def _check(job: Job, new: _NewGolden | None) -> Verdict:
    trace, golden = job.trace, job.golden
    tee = _Tee()
    with open_replay(
        job.trace,
        policy=job.policy,
        params=job.params,
        note=lambda _: None,
        allow_incomplete=job.allow_incomplete,
    ) as opened:
        opened.explain()  # a difference's reasons, kept as it is found
        engine = opened.replayer(tee, check=True)
        comparison = None
        unreadable = _unreadable(golden) if new is not None and golden is not None else None
        if golden is not None and os.path.exists(golden) and unreadable is None:
            from ...views.golden import GoldenComparison

            label = f"replay under {opened.policy_name}"
            comparison = GoldenComparison(golden, label, lambda: engine, job.allow_incomplete)
            # Named as the user knows it (rendered, so not rewritten after: lines wrap).
            comparison.result.labels = (f"golden {shown_as(job.alias, golden)}", label)
            tee.sinks.append(comparison)
        if new is not None:
            tee.sinks.append(new)
        pinned = broke = False
        try:
            opened.run(engine)
        except StepMismatch as e:
            return _mismatched(trace, e)
        except InvariantError as e:  # passes only where the golden pins this very break
            from ...views.outputs import ending

            if comparison is None:
                raise
            broke = True
            pinned = comparison.pins(ending(e, engine.totals.steps))
            if not pinned and (not comparison.pins_a_break or new is not None):
                raise  # no golden expected a break (or --update: never blessed in passing)
        if comparison is not None and not broke:
            comparison.finish()
    coverage = [] if engine.nothing_checked else [engine.checked_text()]
    if comparison is not None:
        compared = f"golden: {_count(comparison.result.steps_compared, 'step')} compared"
        coverage.append(f"{compared}, and the contract break it pins" if pinned else compared)
    verdict = Verdict(trace, None, PASS, "; ".join(coverage))
    verdict.expects = not engine.nothing_checked
    if comparison is not None:
        _compared(verdict, job, comparison, new)
    elif new is not None:
        made = f"new golden, {_count(new.steps, 'step')}"
        if unreadable is not None:
            made = f"{made}, in place of one that could not be read: {unreadable}"
        verdict.updated = new.keep(made)
        if not new.dry_run:
            verdict.golden = golden
            verdict.coverage = "; ".join(filter(None, [verdict.coverage, "golden: written"]))
    elif golden is not None and job.golden_required:
        verdict.status, verdict.no_golden = FAIL, True
        verdict.coverage = "; ".join(filter(None, [verdict.coverage, "no golden"]))
        verdict.detail = "no golden: write it from this replay with schedcli check --update"
    if not verdict.coverage:
        verdict.status, verdict.coverage = UNCHECKED, "nothing to check: no expect, no golden"
    return verdict


def _mismatched(trace: str, e: StepMismatch) -> Verdict:
    """The first step that differs from its expect, as a failing verdict."""
    from ...views.check_views import step_mismatch_view

    m = e.mismatch
    text = _plain(step_mismatch_view(e))
    failed = Verdict(trace, None, FAIL, f"expect differs at step {m.step}", text, m.line)
    failed.expects = True
    return failed


def _unreadable(golden: str) -> str | None:
    """Why a golden about to be rewritten cannot be read as a complete dump (cut short,
    malformed), so ``--update`` writes it anew instead of comparing with it; None if it
    reads, or does not exist."""
    if not os.path.exists(golden):
        return None
    from ....formats.dump import read_dump

    try:
        for _ in read_dump(golden, golden=True):
            pass
    except SchedcliError as e:
        return str(e)
    return None


def _compared(verdict: Verdict, job: Job, comparison: Any, new: _NewGolden | None) -> None:
    verdict.golden = job.golden
    result = comparison.result
    if result.reasons_differing:  # shown, never a difference: reasons are not compared
        worded = _count(result.reasons_differing, "rejection")
        verdict.coverage += f", {worded} worded differently (reasons are not compared)"
    if comparison.same:
        return
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
        from ....engine.explain import explain_step, reasons_replayable

        if not reasons_replayable(job.trace):
            return None  # kept as the difference was found, or not derived

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
    policy); else 1 for a failure, an unchecked trace (unless allowed) or, unless
    ``--no-strict``, an orphaned golden."""
    errors = [v.exit_code for v in verdicts if v.status in (ERROR, BROKEN)]
    if errors:
        return max(errors)
    failed = any(v.status == FAIL for v in verdicts)
    unchecked = any(v.status == UNCHECKED for v in verdicts) and not req.allow_unchecked
    orphaned = bool(suite.orphans) and req.strict
    return 1 if failed or unchecked or orphaned else 0
