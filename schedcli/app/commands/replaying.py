"""``schedcli replay``: a trace through a policy, to a view, a dump, a golden or a check."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from msgspec import Struct

from ...engine.replay import Totals
from ...engine.run import Driver, OpenReplay, open_replay
from ...formats.writer import JsonlWriter
from ...model.errors import (
    CheckFailed,
    InputError,
    InvariantError,
    Option,
    SchedcliError,
    StepMismatch,
    UsageError,
)
from ...model.records import Left
from ...model.steps import Emitted
from ...model.task import Id
from ...streams.interrupt import Stopped
from ...streams.output import atomic_output, output_stream
from ...streams.source import WaitHook
from ..views.outputs import (
    VIEWS,
    Fanout,
    Filtered,
    Opened,
    Output,
    OutputFormat,
    Timeline,
    ending,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ...engine.check.golden import GoldenComparison
    from ..parsing import StepRange
    from ..views.progress import TraceProgress
# rich's views, the golden comparison and the reasons' views load where they are used:
# a replay that dumps needs none of them.


class ReplayRequest(Struct):
    """What the command line asked of one replay. (A msgspec struct, which the reader has
    loaded by now, for a dataclass's fields at a fortieth of its 0.8 ms start-up cost.)"""

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

    def view_format(self) -> str | None:
        """The view on stdout or -o: asked for, else none beside --golden, else by terminal."""
        if self.fmt is not None:
            return str(self.fmt)
        if self.golden and self.output is None:
            return None  # a golden run writes nothing to stdout unless asked
        to_terminal = self.output is None and sys.stdout.isatty()
        return "table" if to_terminal else "jsonl"


def run_replay(req: ReplayRequest, err: Callable[[], Console], progress: TraceProgress) -> None:
    """Replay ``req.trace``; raises CheckFailed (exit 1) when a check finds a difference."""
    if req.update_golden and not req.golden:
        raise UsageError("--update-golden needs --golden FILE")
    if req.require_all and not req.check:
        raise UsageError("--require-all applies to --check")
    flush_before_wait = WaitHook()  # live input: write each record out before waiting
    with ExitStack() as stack:
        # Every output, from the options alone, before the trace is opened.
        outputs = _outputs(stack, req, flush_before_wait, lambda: engine, err)
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
        trace = Opened(
            opened.name,
            opened.policy_name,
            opened.token_budget,
            lambda: engine.totals.steps,
        )
        for output in outputs:
            output.opened(trace)
        if req.check or req.golden:
            opened.explain()  # a difference's reasons, kept as it is found
        fan = Fanout(outputs)
        progress.position = opened.reader.position
        engine = opened.replayer(
            fan.emit,
            check=req.check,
            drain=req.drain,
            on_step=progress.on_step,
            on_left=fan.on_left,
            dump=fan.dump,
        )
        try:
            totals = engine.replay()
        except StepMismatch as e:
            _close(outputs, None, e)
            progress.stop()
            from ..views.check_views import step_mismatch_view

            err().print(step_mismatch_view(e))
            _said_checked(req, opened.name, engine, err, "the first difference included")
            raise
        except (SchedcliError, Stopped) as e:
            _close(outputs, None, e)
            progress.stop()
            _said_checked(req, opened.name, engine, err, "before it stopped")
            if isinstance(e, InvariantError) and _pinned(outputs, err):
                return  # the break the golden pins: the answer asked for is yes
            if isinstance(e, InvariantError):
                _differs_from_pinned(outputs)  # the golden expected a break, not this one
            raise
        finally:
            progress.stop()
        _close(outputs, totals, None)
        _finish(req, opened, engine, outputs, err)


def _pinned(outputs: list[Output], err: Callable[[], Console]) -> bool:
    """A contract break that a golden pins (``--golden``, every step the same and the
    break too) or now pins (``--update-golden``): said, and not an error."""
    for output in outputs:
        if isinstance(output, GoldenUpdate | GoldenCheck) and output.pinned is not None:
            err().print(output.pinned, soft_wrap=True, highlight=False)
            return True
    return False


def _differs_from_pinned(outputs: list[Output]) -> None:
    """A golden that pins a contract break, and the replay broke the contract otherwise:
    the difference shown, exit 1 (a golden that pins none leaves the break exit 3)."""
    for output in outputs:
        golden = output.comparison if isinstance(output, GoldenCheck) else None
        if isinstance(output, GoldenCheck) and golden is not None and golden.pins_a_break:
            output.verdict()


def _close(outputs: list[Output], totals: Totals | None, stopped: BaseException | None) -> None:
    for output in outputs:
        output.close(totals, stopped)


def _outputs(
    stack: ExitStack,
    req: ReplayRequest,
    flush_before_wait: WaitHook,
    engine: Callable[[], Driver],
    err: Callable[[], Console],
) -> list[Output]:
    """Where the records go, from the options: the view (filtered), the golden, the
    timeline. Each is told the rest when the trace is opened."""
    fmt = req.view_format()
    outputs: list[Output] = []
    if fmt is not None:
        out = stack.enter_context(output_stream(req.output))
        flush_before_wait.add(out.flush)
        flush_before_wait.add(sys.stdout.flush)
        view = VIEWS[fmt](out, stack, bool(req.output and req.output != "-"))
        if req.steps is not None or req.session is not None:
            view = Filtered(view, req.steps, req.session, lambda: engine().upcoming_step)
        outputs.append(view)
    elif req.steps is not None or req.session is not None:
        raise UsageError("--steps and --session choose what the view shows; there is no view")
    if req.golden and req.update_golden:
        outputs.append(GoldenUpdate(req.golden, stack, err))
    elif req.golden:
        outputs.append(GoldenCheck(req, engine, err))
    if req.perfetto:
        outputs.append(Timeline(req.perfetto, stack))
    return outputs


class GoldenUpdate(Output):
    """``--golden G --update-golden``: the dump written to G, atomically (on success only)."""

    pinned: str | None = None  # the break this golden now pins, said

    def __init__(self, path: str, stack: ExitStack, err: Callable[[], Console]) -> None:
        self._path, self._err = path, err
        self._write = JsonlWriter(stack.enter_context(atomic_output(path)))
        self._steps: Callable[[], int] = lambda: 0

    def opened(self, trace: Opened) -> None:
        self._steps = trace.steps

    def record(self, record: Emitted) -> None:
        self._write(record)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        if totals is not None:
            self._err().print(f"updated golden {self._path}")
        elif isinstance(stopped, InvariantError):
            self._write(ending(stopped, self._steps()))
            self.pinned = (
                f"updated golden {self._path}: it pins this contract break (exit 3); a "
                "replay against it passes while the policy breaks the contract the same way"
            )


class GoldenCheck(Output):
    """``--golden G``: the dump compared with G step by step as it is made; at the end, the
    first difference side by side, with the replay's reasons there."""

    def __init__(
        self, req: ReplayRequest, engine: Callable[[], Driver], err: Callable[[], Console]
    ) -> None:
        assert req.golden is not None
        self._req, self._err = req, err
        self._engine = engine
        self._golden = req.golden
        _readable(req, req.golden)
        self.comparison: GoldenComparison | None = None
        self.pinned: str | None = None  # the golden pins this replay's contract break, said
        self._steps: Callable[[], int] = lambda: 0

    def opened(self, trace: Opened) -> None:
        self._steps = trace.steps
        label = f"replay under {trace.policy_name}"
        from ...engine.check.golden import GoldenComparison

        self.comparison = GoldenComparison(
            self._golden, label, self._engine, self._req.allow_incomplete
        )
        self._name = trace.name

    def record(self, record: Emitted) -> None:
        assert self.comparison is not None
        self.comparison(record)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        golden = self.comparison
        if golden is None:
            return
        if totals is not None:
            golden.finish()
        elif isinstance(stopped, InvariantError) and golden.pins(ending(stopped, self._steps())):
            steps = golden.result.steps_compared
            self.pinned = (
                f"{self._name}: matches golden {self._golden} ({steps} steps compared), "
                "including the contract break it pins (exit 3 expected)"
            )

    def verdict(self) -> None:
        """After every output closed: the difference shown, and CheckFailed (exit 1)."""
        golden = self.comparison
        if golden is None:
            return
        if golden.same:
            worded = golden.result.reasons_differing  # shown, never a difference
            if worded:
                self._err().print(
                    f"note: {self._name}: matches golden {self._golden}; {worded} "
                    "rejection(s) worded differently there (reasons are not compared)",
                    soft_wrap=True,
                    highlight=False,
                )
            return
        err = self._err()
        from ..views.golden import golden_views

        left_out = golden.left_out(lambda step: _reasons_at(self._req, step))
        diff, *why = golden_views(golden.result, left_out)
        err.print(diff, soft_wrap=True)
        for view in why:
            err.print(view)
        raise CheckFailed(f"{self._name}: dump differs from golden {self._golden}")


def _reasons_at(req: ReplayRequest, step: int) -> Left:
    """The policy's reasons at ``step`` (``engine.explain.reasons_at``)."""
    from ...engine.explain import reasons_at

    found = reasons_at(req.trace, step, req.policy, req.params, follow=req.follow)
    return found.left if found is not None else None


def _check_coverage(
    req: ReplayRequest, name: str, engine: Driver, err: Callable[[], Console]
) -> None:
    """What ``--check`` compared, said; nothing compared is bad input, and a recorded call
    left unchecked fails ``--require-all``."""
    if engine.nothing_checked:
        nothing = f"no {engine.expect_call} in this trace records an expect (record one, or drop "
        raise InputError(name, None, ("nothing to check: ", nothing, Option("check"), ")"))
    err().print(f"{name}: {engine.checked_text()}", soft_wrap=True, highlight=False)
    if req.require_all and engine.checked < engine.check_total:
        total = engine.check_total
        unchecked = f"{total - engine.checked} of {total} {engine.check_unit} record no expect ("
        raise CheckFailed(f"{name}: {unchecked}", Option("require_all"), ")")


def _said_checked(
    req: ReplayRequest, name: str, engine: Driver, err: Callable[[], Console], when: str
) -> None:
    """What --check had compared when the replay ended early (a difference, an error,
    Ctrl-C): said on every exit, not only on success."""
    if req.check:
        err().print(f"{name}: {engine.checked_text()}, {when}", soft_wrap=True, highlight=False)


def update_command(req: ReplayRequest) -> str:
    """The command line that writes this replay's golden: everything that shapes the dump
    (trace, policy, parameters, --drain), then ``--golden G --update-golden``."""
    import shlex  # only a golden run that fails says this

    words = ["schedcli", "replay", req.trace]
    if req.policy is not None:
        words += ["-p", req.policy]
    for key, value in (req.params or {}).items():
        words += ["-P", f"{key}={value}"]
    if req.drain:
        words.append("--drain")
    words += ["--golden", str(req.golden), "--update-golden"]
    return shlex.join(words)


def _readable(req: ReplayRequest, golden: str) -> None:
    """A golden to compare with exists and can be read; else the command that makes it."""
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


def _finish(
    req: ReplayRequest,
    opened: OpenReplay,
    engine: Driver,
    outputs: list[Output],
    err: Callable[[], Console],
) -> None:
    """After the last record: notes and the verdict of --check (the outputs gave theirs)."""
    for output in outputs:
        if isinstance(output, Filtered) and output.passed == 0:
            what = " and ".join(
                o for o, v in (("--steps", req.steps), ("--session", req.session)) if v is not None
            )
            err().print(f"note: {what} selected nothing: no record of this replay matches")
    if req.check:
        _check_coverage(req, opened.name, engine, err)
    for output in outputs:
        if isinstance(output, GoldenCheck):
            output.verdict()
