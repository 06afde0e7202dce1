"""``schedcli debug``'s full-screen app: the timeline, the step's batch (and the other
side's), the queue with every reason, a status line. Keys move the cursor; each answer
comes from the time machine's server (``engine/travel``) on a worker thread."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Static

from ...engine.levels.table import DEFAULT, level_named
from ...engine.travel import ServerGone, Travel, Unanswered
from ...model.errors import SchedcliError, UsageError
from ...model.task import show_id
from . import panes
from .dialogs import HelpScreen, LifeScreen, Prompt
from .navigation import (
    BREAKPOINT_SYNTAX,
    Breakpoint,
    Navigator,
    find_apart,
    finding_said,
    parse_breakpoint,
    parse_id,
    reproduce,
)

CACHED_VIEWS = 256

CSS = """
#title { height: 1; background: $boost; }
#timeline { height: 4; }
#body { height: 1fr; }
#batch { width: 40%; }
#queue { width: 1fr; }
#state { display: none; }
#status { height: 2; }
Prompt, HelpScreen, LifeScreen { align: center middle; }
#question { width: 70; background: $panel; padding: 0 1; }
#answer { width: 70; }
#help, #life { width: 90%; height: 90%; background: $panel; }
"""


def _p(keys: str, action: str, label: str, show: bool = True) -> Binding:
    return Binding(keys, action, label, show=show, priority=True)


class DebugApp(App[None]):
    CSS = CSS
    TITLE = "schedcli debug"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        _p("right,l,n", "step(1)", "next"),
        _p("left,h,p", "step(-1)", "prev", show=False),
        _p("right_square_bracket,pagedown", "step(100)", "+100", show=False),
        _p("left_square_bracket,pageup", "step(-100)", "-100", show=False),
        _p("home", "edge(0)", "first", show=False),
        _p("end", "edge(1)", "last", show=False),
        _p("g,colon", "ask('goto')", "goto"),
        _p("d", "divergence(1)", "div"),
        _p("D", "divergence(-1)", "prev div", show=False),
        _p("F", "divergence(0)", "first div", show=False),
        _p("slash", "ask('tid')", "find tid"),
        _p("s", "ask('sid')", "find sid", show=False),
        Binding("i", "inspect('tid')", "life"),
        Binding("I", "inspect('sid')", "session life", show=False),
        _p("b", "ask('break')", "break"),
        _p("B", "clear_breakpoints", "clear bps", show=False),
        _p("c", "go(1)", "cont", show=False),
        _p("C", "go(-1)", "rev", show=False),
        _p("y", "copy", "copy"),
        _p("Y", "copy_trace", "copy as trace", show=False),
        _p("r", "retry", "ask again", show=False),
        _p("t", "state", "state", show=False),
        _p("o", "other_side", "other side", show=False),
        _p("question_mark", "help", "keys"),
        _p("q,ctrl+c", "quit", "quit"),
    ]

    def __init__(
        self,
        travel: Travel,
        trace: str,
        policy: str | None,
        params: Mapping[str, object],
        *,
        path: str | None = None,
        allow_incomplete: bool = False,
    ) -> None:
        """``trace``: the trace as the title names it; ``path``: where it is read from for
        the findings (``trace`` if not given)."""
        super().__init__()
        self.travel, self.trace, self.policy, self.params = travel, trace, policy, params
        self.path, self.allow_incomplete = path or trace, allow_incomplete
        self.closing = threading.Event()  # set as the app ends
        self.nav = Navigator(travel)
        self.row = 0
        self.views: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self.shown: int | None = None  # the step whose view is on screen
        self.loading = False
        self.breakpoints: list[Breakpoint] = []
        self.copied: str | None = None
        self.busy = threading.Event()  # set to stop a running search
        self.status_text = ""
        self.note = ""  # said with the next view shown (why the cursor moved there)
        self.select: dict[str, Any] | None = None  # the queue row to select there (found)
        self.side = 0  # whose queue and state the right pane shows (1: --against's policy)

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="timeline")
        with Horizontal(id="body"):
            yield Static(id="batch")
            with Vertical(id="queue"):
                yield DataTable(id="queue-table", cursor_type="row", zebra_stripes=False)
                yield Static(id="state")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#queue-table", DataTable)
        for name in panes.QUEUE_COLUMNS:
            table.add_column(name, key=name or "ran")
        table.focus()
        self.refresh_index()
        self.ticking = self.set_interval(0.25, self.tick) if self.travel.indexed is None else None
        self.load_view()
        self.find_findings()

    def find_findings(self) -> None:
        """The replay's findings, found beside the index by a process of their own
        (``find_apart``), waited for on a thread (not a worker: nothing waits for them but
        a ``finding=`` search): marked on the timeline and answering ``finding=KIND``."""
        threading.Thread(target=self._find_findings, daemon=True).start()

    def _find_findings(self) -> None:
        try:
            found, unknown = find_apart(
                self.path,
                self.policy,
                self.params,
                allow_incomplete=self.allow_incomplete,
                stop=self.closing,
            )
        except OSError as e:  # no process to find them in
            found, unknown = [], f"findings not known: {e}"
        self.nav.found(found, unknown)
        if not self.closing.is_set():
            with contextlib.suppress(RuntimeError):  # the app ended meanwhile
                self.call_from_thread(self.findings_arrived)

    def on_unmount(self) -> None:
        self.closing.set()  # the findings' replay stops at its next step

    def findings_arrived(self) -> None:
        """The timeline marks them; the step on screen adds its own to what the status
        line says (which a key may have said: kept)."""
        self.refresh_index()
        if self.shown is not None and self.shown == self.step:
            here = [f"finding: {finding_said(f)}" for f in self.nav.findings_at(self.shown)]
            if here:
                self.say(" · ".join([self.status_text, *here]))

    def tick(self) -> None:
        """While indexing: the title's progress, the timeline, and the first view once
        the first step is in."""
        # Read before the refresh, which then shows at least this: an index that ended
        # between the refresh and a later read would stop the ticks with the title left
        # at "indexing 94%" (a loaded CI run saw it).
        whole = self.travel.indexed is not None
        self.refresh_index()
        if self.shown is None and self.travel.steps and not self.loading:
            self.load_view()
        if whole and self.ticking is not None:
            self.ticking.stop()  # the index is whole, and the title says so: nothing more

    @property
    def step(self) -> int:
        t = self.travel
        return t.numbers[self.row] if self.row < t.steps else 0

    def refresh_index(self) -> None:
        t = self.travel
        hello = t.hello or {}
        policies = hello.get("policies") or ["?"]
        other = hello.get("other")
        versus = f" · vs {self._versus()}" if other else ""
        if t.indexed is None:
            pos, size = t.position
            state = f"indexing {100 * pos // size if size else 0}% ({t.steps:,} steps)"
        else:
            state = f"{t.steps:,} steps" + self._ending()
        bps = f" · bp: {', '.join(b.text for b in self.breakpoints)}" if self.breakpoints else ""
        if hello.get("checkpoints") is False:
            state += " · no checkpoints: each answer replays from the start"
        name = self.trace.rsplit("/", 1)[-1]
        self.query_one("#title", Static).update(f"{name} · {policies[0]}{versus} · {state}{bps}")
        width = self.size.width or 80
        findings = [(f.step, f.kind) for f in self.nav.findings]
        self.query_one("#timeline", Static).update(panes.timeline(t, self.row, width, findings))

    def _versus(self) -> str | None:
        """What the other side is called on screen: the expect, the golden, a policy."""
        hello = self.travel.hello or {}
        other = hello.get("other")
        policies = hello.get("policies") or []
        return policies[1] if other == "against" and len(policies) > 1 else other

    def _ending(self) -> str:
        ending = (self.travel.indexed or {}).get("ending")
        if not ending:
            return ""
        if ending.get("broke"):
            return f" · contract broken at step {ending['step']}"
        return f" · stopped at step {ending['step']} (exit {ending['exit']})"

    def say(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text)

    # --- the view --------------------------------------------------------------------------

    def load_view(self) -> None:
        step = self.step
        self.refresh_index()
        if self.travel.steps == 0:
            self.say("no steps" + self._ending())
            return
        if step in self.views:
            self.views.move_to_end(step)
            self.show_view(self.views[step])
            return
        if not self.loading:
            self.loading = True
            self.fetch(step)

    @work(thread=True, group="view")
    def fetch(self, step: int) -> None:
        try:
            view = self.travel.view(step)
        except ServerGone as e:
            self.call_from_thread(self.say, f"the replay's process ended: {e}")
            return
        except Unanswered as e:
            self.call_from_thread(self.unanswered, step, str(e))
            return
        self.call_from_thread(self.arrived, step, view)

    def unanswered(self, step: int, why: str) -> None:
        """The view of ``step`` lost (its worker ended twice): said, and asked for again
        by ``r`` or by coming back to it; never waited for."""
        self.loading = False
        if step == self.step:
            self.say(f"step {step}: {why} · r asks again")
        else:
            self.load_view()  # the cursor moved on while this one was asked for

    def action_retry(self) -> None:
        """The view at the cursor asked for again, if it was lost (a view is cached only
        once answered)."""
        self.load_view()

    def arrived(self, step: int, view: dict[str, Any]) -> None:
        self.loading = False
        self.views[step] = view
        if len(self.views) > CACHED_VIEWS:
            self.views.popitem(last=False)
        if step == self.step:
            self.show_view(view)
        else:
            self.load_view()  # the cursor moved on while this one was asked for

    def show_view(self, view: dict[str, Any]) -> None:
        if "ended" in view:
            self.say(f"step {self.step}: the replay stopped before it{self._ending()}")
            return
        hello = self.travel.hello or {}
        label = (hello.get("policies") or ["?"])[0]
        key = level_named(hello.get("level") or DEFAULT).batch_key
        self.query_one("#batch", Static).update(
            panes.batch_table(
                view, hello.get("budget"), label, hello.get("other"), self._versus(), key
            )
        )
        side = self.side if len(view["queues"]) > self.side else 0
        table = self.query_one("#queue-table", DataTable)
        table.clear()
        for row in panes.queue_rows(view, side):
            table.add_row(*row)
        if self.select is not None:
            key, value = next(iter(self.select.items()))
            rows = [i for i, e in enumerate(view["queues"][side] or []) if e[key] == value]
            if rows:
                table.move_cursor(row=rows[0])
            self.select = None
        self.query_one("#state", Static).update(panes.state_table(view, side))
        self.shown = view["step"]
        marks = self.nav.marks_at(view["step"])
        whose = f" ({self._versus()}'s queue)" if side else ""
        said = [f"step {view['step']}: {len(view['queues'][side] or [])} queued{whose}"]
        said += [f"{kind}: {text}" for kind, text in marks]
        said += [f"finding: {finding_said(f)}" for f in self.nav.findings_at(view["step"])]
        if self.note:
            said.insert(0, self.note)
            self.note = ""
        self.say(" · ".join(said))

    # --- moving ------------------------------------------------------------------------------

    def move_to_row(self, row: int) -> None:
        last = max(self.travel.steps - 1, 0)
        self.row = min(max(row, 0), last)
        self.load_view()

    def move_to_step(self, step: int) -> None:
        self.move_to_row(self.travel.row_of(step))

    def action_step(self, delta: int) -> None:
        self.move_to_row(self.row + delta)

    def action_edge(self, end: int) -> None:
        self.move_to_row(self.travel.steps - 1 if end else 0)

    def action_divergence(self, direction: int) -> None:
        if (self.travel.hello or {}).get("other") is None:
            self.say("nothing to diverge from: start with --check, --golden G or --against P")
            return
        at = self.nav.divergence(self.step, direction)
        if at is None:
            where = {1: "after", -1: "before", 0: "in"}[direction]
            span = f"step {self.step}" if direction else "the steps indexed"
            self.say(f"no divergence {where} {span}")
            return
        self.move_to_step(at)

    def action_ask(self, what: str) -> None:
        questions = {
            "goto": "go to step:",
            "tid": "find the task with tid:",
            "sid": "find the session with sid:",
            "break": f"breakpoint ({BREAKPOINT_SYNTAX}):",
        }
        self.push_screen(Prompt(questions[what]), lambda answer: self.answered(what, answer))

    def answered(self, what: str, answer: str | None) -> None:
        if not answer:
            return
        try:
            if what == "goto":
                step = parse_id(answer)
                if not isinstance(step, int):
                    raise UsageError(f"a step is a number, not {answer!r}")
                self.move_to_step(step)
            elif what == "break":
                self.breakpoints.append(parse_breakpoint(answer))
                self.refresh_index()
                self.say(f"breakpoint {self.breakpoints[-1].text} set: c continues, C goes back")
            else:
                self.find({what: parse_id(answer)})
        except UsageError as e:
            self.say(str(e))

    def action_clear_breakpoints(self) -> None:
        self.breakpoints.clear()
        self.refresh_index()
        self.say("breakpoints cleared")

    def action_go(self, direction: int) -> None:
        if not self.breakpoints:
            self.say("no breakpoints: b sets one")
            return
        self.say("continuing…" if direction > 0 else "going back…")
        self.search(lambda stop: self.nav.hit(self.breakpoints, self.step, direction > 0, stop))

    def find(self, key: dict[str, Any]) -> None:
        what = f"{'task' if 'tid' in key else 'session'} {show_id(next(iter(key.values())))}"
        self.say(f"finding {what}…")

        def found(stop: threading.Event) -> tuple[int, str] | None:
            at = self.nav.find(key, self.step, stop)
            if at is None:
                return None
            self.select = key
            return at, f"{what} found"

        self.search(found, f"{what}: not in any step's queue or batch")

    def search(
        self, how: Callable[[threading.Event], tuple[int, str] | None], none: str = ""
    ) -> None:
        self.busy.set()  # a search still running stops at its next segment
        self.busy = threading.Event()
        self._search(how, none, self.busy)

    @work(thread=True, group="search")
    def _search(
        self, how: Callable[[threading.Event], Any], none: str, stop: threading.Event
    ) -> None:
        try:
            hit = how(stop)
        except ServerGone as e:
            self.call_from_thread(self.say, f"the replay's process ended: {e}")
            return
        except Unanswered as e:
            self.call_from_thread(self.say, f"{e} · the same key asks again")
            return
        if stop.is_set():
            return
        self.call_from_thread(self._hit, hit, none)

    def _hit(self, hit: tuple[int, str] | None, none: str) -> None:
        if hit is None:
            unknown = self.nav.findings_unknown
            if unknown and any(b.kind == "finding" for b in self.breakpoints):
                none = f"{none or 'no breakpoint holds that way'} · {unknown}"
            self.say(none or "no breakpoint holds that way")
            return
        step, why = hit
        self.note = why
        self.move_to_step(step)

    # --- lives, copying, help ------------------------------------------------------------

    def action_inspect(self, by: str) -> None:
        view = self.views.get(self.shown) if self.shown is not None else None
        table = self.query_one("#queue-table", DataTable)
        if view is None or not (view["queues"][0] or []):
            self.say("no queued task here to follow: / finds one by tid")
            return
        if self.side:
            self.say("a life follows the replay's own policy: o shows its queue again")
            return
        entry = view["queues"][0][min(table.cursor_row, len(view["queues"][0]) - 1)]
        key = {by: entry[by]}
        screen = LifeScreen()
        self.push_screen(screen)
        self._life(
            screen,
            key,
            entry["since"],
            f"{'task' if by == 'tid' else 'session'} {show_id(entry[by])}",
        )

    def on_data_table_row_selected(self, _: DataTable.RowSelected) -> None:
        """Enter on a queued task: its life (the table takes Enter before the app)."""
        self.action_inspect("tid")

    @work(thread=True, group="life")
    def _life(self, screen: LifeScreen, key: dict[str, Any], since: int, what: str) -> None:
        try:
            events = self.travel.life(key, since)
        except ServerGone as e:
            self.call_from_thread(self.say, f"the replay's process ended: {e}")
            return
        except Unanswered as e:
            self.call_from_thread(screen.lost, f"{e} · close, then i asks again")
            return
        self.call_from_thread(screen.show, panes.life_table(what, events, True))

    def action_copy(self) -> None:
        command = reproduce(self.trace, self.step, self.policy, self.params)
        self.copied = command
        self.copy_to_clipboard(command)
        self.say(f"copied: {command}")

    def action_copy_trace(self) -> None:
        """The step shown, from its state, as a standalone trace with its expect (what
        ``explain --step N --as-trace`` writes): a regression test to paste into a file."""
        if self.trace == "-":
            self.say("the trace came from standard input: explain --as-trace needs its file")
            return
        self.say(f"taking step {self.step}'s state ...")
        self._copy_trace(self.step)

    @work(thread=True, group="copy")
    def _copy_trace(self, step: int) -> None:
        from ...engine.levels.task.states import step_as_trace

        try:
            lines = step_as_trace(self.trace, step, policy=self.policy, params=self.params)
        except SchedcliError as e:
            self.call_from_thread(self.say, f"step {step} as a trace: {e}")
            return
        self.call_from_thread(self._copied_trace, step, b"".join(lines).decode())

    def _copied_trace(self, step: int, text: str) -> None:
        self.copied = text
        self.copy_to_clipboard(text)
        self.say(
            f"copied step {step} from its state as a trace: paste it into a file "
            "(replay --check passes on it)"
        )

    def action_state(self) -> None:
        """The right pane: the queue with its reasons, or the policy's own structures."""
        table = self.query_one("#queue-table", DataTable)
        state = self.query_one("#state", Static)
        table.display, state.display = state.display, table.display
        if table.display:
            table.focus()

    def action_other_side(self) -> None:
        """With --against: the right pane shows the other policy's queue and state."""
        if (self.travel.hello or {}).get("other") != "against":
            self.say("one policy here: --against POLICY replays a second one beside it")
            return
        self.side = 1 - self.side
        if self.shown is not None and self.shown in self.views:
            self.show_view(self.views[self.shown])

    def action_help(self) -> None:
        self.push_screen(HelpScreen(BREAKPOINT_SYNTAX))
