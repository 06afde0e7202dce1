"""``schedcli replay``: a trace through a policy, to a view, a dump, a golden or a check."""

from __future__ import annotations

import io
import shlex
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rich.console import Console

from ..engine.replay import ExpectMismatch, Record, Replayer, Totals
from ..engine.run import OpenTrace, open_replay
from ..formats.dump import RecordFilter, Tee, partial_record
from ..formats.interrupt import Stopped
from ..formats.output import atomic_output, output_stream
from ..formats.source import WaitHook
from ..formats.writer import JsonlWriter
from ..model.errors import CheckFailed, InputError, SchedcliError, UsageError
from ..model.records import Left
from ..model.task import Id
from .console import data_console
from .golden import GoldenComparison
from .parsing import StepRange
from .perfetto import PerfettoWriter
from .progress import TraceProgress
from .render import TableView, diff_view, mismatch_view, summary_table, why_left


class OutputFormat(StrEnum):
    table = "table"
    jsonl = "jsonl"


@dataclass
class ReplayRequest:
    """What the command line asked of one replay."""

    trace: str
    policy: str | None = None
    params: dict[str, str] | None = None
    fmt: OutputFormat | None = None
    output: str | None = None
    steps: StepRange | None = None
    session: Id | None = None
    drain: bool = False
    check: bool = False
    require_all: bool = False
    golden: str | None = None
    update_golden: bool = False
    max_line_bytes: int = 64 * 1024 * 1024
    perfetto: str | None = None
    follow: bool = False
    allow_incomplete: bool = False

    def view_format(self) -> OutputFormat | None:
        """The view on stdout or -o: asked for, else none beside --golden, else by terminal."""
        if self.fmt is not None:
            return self.fmt
        if self.golden and self.output is None:
            return None  # a golden run writes nothing to stdout unless asked
        to_terminal = self.output is None and sys.stdout.isatty()
        return OutputFormat.table if to_terminal else OutputFormat.jsonl


@dataclass
class _Sinks:
    emit: Callable[[Record], None]
    console: Console | None
    table: TableView | None
    filtered: RecordFilter | None
    golden: GoldenComparison | None
    timeline: PerfettoWriter | None
    dump: JsonlWriter | None = None  # the JSONL view, which a stopped replay marks partial

    def on_left(self) -> Callable[[int, Left], None] | None:
        listeners = [s.left for s in (self.table, self.timeline) if s is not None]
        if not listeners:
            return None

        def tell(step: int, left: Left) -> None:
            for listener in listeners:
                listener(step, left)

        return tell


def run_replay(req: ReplayRequest, err: Console, progress: TraceProgress) -> None:
    """Replay ``req.trace``; raises CheckFailed (exit 1) when a check finds a difference."""
    if req.update_golden and not req.golden:
        raise UsageError("--update-golden needs --golden FILE")
    if req.require_all and not req.check:
        raise UsageError("--require-all applies to --check")
    flush_before_wait = WaitHook()  # live input: write each record out before waiting
    with ExitStack() as stack:
        opened = stack.enter_context(
            open_replay(
                req.trace,
                policy=req.policy,
                params=req.params or {},
                max_line_bytes=req.max_line_bytes,
                on_wait=flush_before_wait,
                follow=req.follow,
                allow_incomplete=req.allow_incomplete,
            )
        )
        sinks = _sinks(stack, req, opened, flush_before_wait, lambda: engine)
        if req.check:
            opened.policy.explaining = True  # a mismatch's reasons, kept as it happens
        progress.position = opened.reader.position
        engine = opened.replayer(
            sinks.emit,
            check=req.check,
            drain=req.drain,
            on_step=progress.on_step,
            # The table and the timeline show why tasks were left behind; the dump never
            # carries reasons.
            on_left=sinks.on_left(),
        )
        try:
            totals = opened.run(engine)
        except ExpectMismatch as e:
            _mark_partial(sinks, e, engine)
            progress.stop()
            err.print(mismatch_view(e.mismatch, e.mismatch.left))
            raise
        except (SchedcliError, Stopped) as e:
            _mark_partial(sinks, e, engine)
            raise
        finally:
            progress.stop()
        _finish(req, opened, engine, totals, sinks, err)


def _sinks(
    stack: ExitStack,
    req: ReplayRequest,
    opened: OpenTrace,
    flush_before_wait: WaitHook,
    engine: Callable[[], Replayer],
) -> _Sinks:
    """Where the records go: the view (filtered), the golden, the timeline."""
    fmt = req.view_format()
    dump: JsonlWriter | None = None
    console: Console | None = None
    table: TableView | None = None
    emitters: list[Callable[[Record], None]] = []
    filtered: RecordFilter | None = None
    if fmt is not None:
        out = stack.enter_context(output_stream(req.output))
        flush_before_wait.add(out.flush)
        flush_before_wait.add(sys.stdout.flush)
        view: Callable[[Record], None]
        if fmt is OutputFormat.table:
            console = _table_console(stack, out, req.output)
            view = table = TableView(console, opened.policy.token_budget)
        else:
            view = dump = JsonlWriter(out)
        if req.steps is not None or req.session is not None:
            view = filtered = RecordFilter(
                view,
                steps=req.steps,
                session=req.session,
                upcoming_step=lambda: engine().upcoming_step,
            )
        emitters.append(view)
    elif req.steps is not None or req.session is not None:
        raise UsageError("--steps and --session choose what the view shows; there is no view")
    golden: GoldenComparison | None = None
    if req.golden and req.update_golden:
        emitters.append(JsonlWriter(stack.enter_context(atomic_output(req.golden))))
    elif req.golden:
        golden = _golden(req, req.golden, opened.policy_name, engine)
        opened.policy.explaining = True  # reasons kept for the first difference
        emitters.append(golden)
    timeline: PerfettoWriter | None = None
    if req.perfetto:
        timeline = PerfettoWriter(
            stack.enter_context(atomic_output(req.perfetto)),
            title=f"schedcli replay {opened.name} ({opened.policy_name})",
            budget=opened.policy.token_budget,
        )
        emitters.append(timeline)
    emit = emitters[0] if len(emitters) == 1 else Tee(*emitters)
    if not emitters:
        emit = _discard
    return _Sinks(emit, console, table, filtered, golden, timeline, dump)


def _mark_partial(sinks: _Sinks, e: BaseException, engine: Replayer) -> None:
    """A replay that stopped before its end leaves a dump that says so, as its last
    record, instead of one a reader might take for the whole schedule."""
    if sinks.dump is None:
        return
    if isinstance(e, Stopped):
        reason = "interrupted" if e.exit_code == 130 else "terminated"
    else:
        reason = str(e)
    sinks.dump(partial_record(reason, engine.totals.steps))


def _reasons_at(req: ReplayRequest, step: int) -> Left:
    """The policy's reasons at ``step``, by replaying the file again with them on (a
    replay is deterministic); None from a pipe, which cannot be read twice."""
    if req.trace == "-" or req.follow:
        return None
    from .explain import explain_step

    return explain_step(req.trace, step, req.policy, req.params).left


def _check_coverage(req: ReplayRequest, name: str, engine: Replayer, err: Console) -> None:
    """What ``--check`` compared, said; nothing compared is bad input, and a batch left
    unchecked fails ``--require-all``."""
    if engine.checked == 0 and engine.outcomes_checked == 0:
        raise InputError(
            name,
            None,
            "nothing to check: no get_work in this trace records an expect "
            "(record one, or drop --check)",
        )
    total = engine.get_work_events
    said = f"checked {engine.checked} of {total} batches"
    if engine.outcomes_checked:
        said += f" and {engine.outcomes_checked} submit outcomes"
    err.print(f"{name}: {said}", soft_wrap=True, highlight=False)
    if req.require_all and engine.checked < total:
        raise CheckFailed(
            f"{name}: {total - engine.checked} of {total} batches record no expect (--require-all)"
        )


def _discard(record: Record) -> None:
    pass


def _table_console(stack: ExitStack, out: Any, output: str | None) -> Console:
    if output and output != "-":
        text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        stack.callback(text.detach)  # leaves `out` open for its own context
        return data_console(text, width=120)
    return data_console()


def update_command(req: ReplayRequest) -> str:
    """The command line that writes this replay's golden: everything that shapes the dump
    (trace, policy, parameters, --drain), then ``--golden G --update-golden``."""
    words = ["schedcli", "replay", req.trace]
    if req.policy is not None:
        words += ["-p", req.policy]
    for key, value in (req.params or {}).items():
        words += ["-P", f"{key}={value}"]
    if req.drain:
        words.append("--drain")
    words += ["--golden", str(req.golden), "--update-golden"]
    return shlex.join(words)


def _golden(
    req: ReplayRequest, golden: str, label: str, engine: Callable[[], Replayer]
) -> GoldenComparison:
    try:
        with open(golden, "rb"):
            pass
    except FileNotFoundError:
        raise UsageError(
            f"{golden}: no such golden file; to create it from this replay, run: "
            f"{update_command(req)}"
        ) from None
    except OSError as e:
        raise UsageError(f"{golden}: cannot read golden: {e.strerror or e}") from None
    return GoldenComparison(golden, f"replay under {label}", engine)


def _finish(
    req: ReplayRequest,
    opened: OpenTrace,
    engine: Replayer,
    totals: Totals,
    sinks: _Sinks,
    err: Console,
) -> None:
    """After the last record: summaries, notes and the verdicts of the checks."""
    if sinks.timeline is not None:
        sinks.timeline.close()
    if sinks.console is not None:
        sinks.console.print(f"\n[bold]{opened.name}[/] under [bold]{opened.policy_name}[/]")
        sinks.console.print(summary_table(totals, "summary"))
    if sinks.filtered is not None and sinks.filtered.passed == 0:
        what = " and ".join(
            o for o, v in (("--steps", req.steps), ("--session", req.session)) if v is not None
        )
        err.print(f"note: {what} selected nothing: no record of this replay matches")
    if req.check:
        _check_coverage(req, opened.name, engine, err)
    golden = sinks.golden
    if golden is not None:
        golden.finish()
        if not golden.same:
            err.print(diff_view(golden.result), soft_wrap=True)
            first = golden.result.first
            if first is not None:
                only_golden, _ = first.moved()
                if only_golden:
                    left = golden.first_left
                    if not golden.first_left_known:  # found past the step: replay to it
                        left = _reasons_at(req, first.step)
                    err.print(why_left("the replay", left, only_golden))
            raise CheckFailed(f"{opened.name}: dump differs from golden {req.golden}")
    elif req.golden:
        err.print(f"updated golden {req.golden}")
