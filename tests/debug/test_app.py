"""``schedcli debug`` as a person drives it: every key and breakpoint kind through Textual's
pilot, against traces whose answers the one-shot commands give (the second path), and SVG
snapshots of the main screens at 80x24."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from schedcli.app.commands.debug import DebugRequest, Said, open_debug
from schedcli.app.commands.explain import explain_lives
from schedcli.app.debug.dialogs import HelpScreen, LifeScreen
from schedcli.app.debug.screen import DebugApp
from schedcli.engine.explain import explain_step
from schedcli.engine.travel import Compare
from tests.conftest import Cli
from tests.helpers import write_lines

ROOT = Path(__file__).resolve().parents[2]
ROTATION = ROOT / "traces/rotation-fairness.jsonl"
LONG = ROOT / "traces/long-prompts-and-chat.jsonl"


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run in its own event loop (no asyncio plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def app_for(
    path: Path, compare: Compare | None = None, policy: str | None = None, every: int = 2
) -> DebugApp:
    req = DebugRequest(str(path), policy=policy, compare=compare or Compare(), every=every)
    return DebugApp(
        open_debug(req),
        str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name),
        policy,
        {},
        path=str(path),
    )


async def settle(pilot: Pilot[Any]) -> None:
    """Until the step on screen is the cursor's and no search or life is running."""
    app = pilot.app
    assert isinstance(app, DebugApp)
    for _ in range(750):  # 15 s at most: pure Python on a loaded machine
        await pilot.pause(0.02)
        busy = any(w.is_running for w in app.workers)
        if not busy and app.shown == app.step and not app.loading:
            return
    raise AssertionError(f"never settled at step {app.step}: {app.status_text}")


async def indexed(pilot: Pilot[Any]) -> list[str]:
    """Until the index has reached the trace's end, and the title has caught up; every
    title seen on the way. Waited for by the clock (three minutes at most: pure Python
    beside a busy suite once took more than one), and said plainly if it never ends."""
    app = pilot.app
    assert isinstance(app, DebugApp)
    seen = [str(app.query_one("#title").render())]
    deadline = time.monotonic() + 180
    while app.travel.indexed is None and time.monotonic() < deadline:
        await pilot.pause(0.02)
        seen.append(str(app.query_one("#title").render()))
    assert app.travel.indexed is not None, f"the index never reached the end: {seen[-1]}"
    # The title is redrawn on the app's next refresh: polled, not a fixed pause.
    deadline = time.monotonic() + 10
    while "indexing" in str(app.query_one("#title").render()) and time.monotonic() < deadline:
        await pilot.pause(0.02)
    return seen


@asynccontextmanager
async def driving(app: DebugApp) -> AsyncIterator[Pilot[Any]]:
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            yield pilot
    finally:
        app.travel.close()


async def keys(pilot: Pilot[Any], *pressed: str) -> None:
    for key in pressed:
        await pilot.press(key)
    await settle(pilot)


async def typed(pilot: Pilot[Any], key: str, text: str) -> None:
    await pilot.press(key)
    await pilot.pause(0.05)
    for ch in text:
        await pilot.press(ch)
    await keys(pilot, "enter")


def edited_expect(tmp_path: Path, nth: int) -> tuple[Path, int]:
    """rotation-fairness with its nth expect wrong: the trace and the step it is at."""
    lines = [json.loads(x) for x in ROTATION.read_text().splitlines()]
    gets = [i for i, x in enumerate(lines) if x.get("op") == "get_work"]
    lines[gets[nth]]["expect"] = [999]
    return write_lines(tmp_path / "planted.jsonl", lines), nth


@in_loop
async def test_arrows_page_keys_home_end_and_goto_move_the_cursor() -> None:
    async with driving(app_for(LONG)) as pilot:
        app = pilot.app
        last = app.travel.numbers[-1]
        await keys(pilot, "right")
        assert app.step == 1
        await keys(pilot, "l", "n")
        assert app.step == 3
        await keys(pilot, "left")
        assert app.step == 2
        await keys(pilot, "end")
        assert app.step == last
        await keys(pilot, "home")
        assert app.step == 0
        await keys(pilot, "right_square_bracket")
        assert app.step == last  # +100 stops at the last step
        await keys(pilot, "left_square_bracket")
        assert app.step == 0
        await typed(pilot, "g", "2")
        assert app.step == 2
        assert app.status_text.startswith("step 2:")


@in_loop
async def test_the_queue_pane_shows_what_explain_step_shows() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await keys(pilot, "right", "right")
        table = app.query_one("#queue-table")
        want = explain_step(str(ROTATION), 2).to_json()
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        assert [r[1] for r in rows] == [json.dumps(q["tid"]) for q in want["queue"]]
        reasons = {json.dumps(e["tid"]): e["reason"] for e in want["left"]}
        for r in rows:
            assert (r[6].split(":")[0] if r[6] else None) == reasons.get(r[1])


@in_loop
async def test_next_divergence_lands_where_replay_check_stops(cli: Cli, tmp_path: Path) -> None:
    trace, _nth = edited_expect(tmp_path, 3)
    assert cli("replay", trace, "--check", "-f", "jsonl").code == 1
    said = cli("replay", trace, "--check", "-f", "jsonl").stderr
    step = int(said.split(": step ")[1].split()[0])
    async with driving(app_for(trace, Compare(check=True))) as pilot:
        app = pilot.app
        await keys(pilot, "d")
        assert app.step == step
        assert "div:" in app.status_text
        await keys(pilot, "right", "D")
        assert app.step == step
        await keys(pilot, "home", "F")
        assert app.step == step
        await keys(pilot, "d")
        assert app.step == step and "no divergence after" in app.status_text


@in_loop
async def test_divergence_keys_say_there_is_nothing_to_compare_without_a_comparison() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        await keys(pilot, "d")
        assert "--check, --golden G or --against P" in pilot.app.status_text


@in_loop
async def test_against_a_second_policy_both_batches_show_and_differences_are_marked() -> None:
    async with driving(app_for(LONG, Compare(against="fcfs"))) as pilot:
        app = pilot.app
        await keys(pilot, "d")
        view = app.views[app.step]
        assert view["records"][1] is not None
        batch = app.query_one("#batch").render()
        assert "against:" in str(batch) or app.step in app.nav.mark_steps("div")


def marks_line(app: DebugApp) -> str:
    return str(app.query_one("#timeline").render()).split("\n")[2]


@in_loop
async def test_a_golden_that_differs_only_in_a_cancel_is_a_divergence_and_exit_1(
    cli: Cli, tmp_path: Path
) -> None:
    import schedcli.app.commands.debug as command

    trace = ROOT / "traces/cancel-and-rejoin.jsonl"
    golden = [
        json.loads(x)
        for x in (ROOT / "traces/golden/cancel-and-rejoin.dump.jsonl").read_text().splitlines()
    ]
    cancel = [r for r in golden if r.get("op") == "cancel" and r["dropped"]][-1]
    cancel["dropped"] = []  # a cancel before step 1
    path = write_lines(tmp_path / "g.dump.jsonl", golden)
    assert cli("replay", trace, "--golden", path, "-f", "jsonl").code == 1
    compare = Compare(golden=str(path))
    async with driving(app_for(trace, compare)) as pilot:
        app = pilot.app
        await indexed(pilot)
        await keys(pilot, "d")
        assert app.step == 1
        assert f"div: line {cancel['line']}: cancel differs" in app.status_text
        assert marks_line(app)[len("marks    ") + 1] == "x"  # step 1's column
        assert command.verdict(app.travel, compare) == 1


@in_loop
async def test_against_a_policy_that_drops_a_session_in_another_order_is_exit_1(
    tmp_path: Path,
) -> None:
    import schedcli.app.commands.debug as command

    trace = write_lines(
        tmp_path / "t.jsonl",
        [
            {"schedcli": 1, "policy": "decode-first"},
            {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
            {"op": "submit", "tid": 2, "sid": 1, "kind": "decode", "size": 1},
            {"op": "submit", "tid": 3, "sid": 1, "kind": "prefill", "size": 2},
            {"op": "cancel", "sid": 1},  # decode-first drops [1, 3, 2], fcfs [1, 2, 3]
            {"op": "get_work"},
        ],
    )
    compare = Compare(against="fcfs")
    async with driving(app_for(trace, compare)) as pilot:
        app = pilot.app
        await indexed(pilot)
        await keys(pilot, "F")
        assert app.step == 0 and "div: line 5: cancel differs" in app.status_text
        assert command.verdict(app.travel, compare) == 1


@in_loop
async def test_find_by_tid_then_its_life_shows_explain_task_s_reasons() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await typed(pilot, "slash", "9")
        (life,) = explain_lives(str(ROTATION), tid=9)
        assert app.step == life.step
        table = app.query_one("#queue-table")
        rows = [table.get_row_at(i)[1] for i in range(table.row_count)]
        table.move_cursor(row=rows.index("9"))
        await pilot.press("i")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, LifeScreen) and not any(w.is_running for w in app.workers):
                break
        text = app.screen.life_text
        for _step, code, _ in life.passed_over:
            assert code in text
        await keys(pilot, "escape")
        assert not isinstance(app.screen, LifeScreen)


@in_loop
async def test_find_by_sid_and_a_missing_id_says_so() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await typed(pilot, "s", "30")
        assert "session 30 found" in app.status_text
        await typed(pilot, "slash", "12345")
        assert "not in any step's queue or batch" in app.status_text


@in_loop
async def test_a_wait_breakpoint_continues_forward_and_back_where_a_brute_force_finds(
    tmp_path: Path,
) -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        steps = list(app.travel.numbers)
        ages = {
            s: [s - e["since"] for e in app.travel.view(s)["queues"][0] if not e["ran"]]
            for s in steps
        }
        hits = [s for s in steps if any(a > 1 for a in ages[s])]
        await typed(pilot, "b", "wait>1")
        await keys(pilot, "c")
        assert app.step == hits[0] and "wait>1" in app.status_text
        await keys(pilot, "end", "C")
        assert app.step == (hits[-2] if hits[-1] == steps[-1] else hits[-1])
        await keys(pilot, "B")
        await keys(pilot, "c")
        assert "no breakpoints" in app.status_text


@pytest.mark.parametrize(
    ("breakpoint", "expected"),
    [
        (
            "session=20",
            lambda recs: next(r["step"] for r in recs if any(e["sid"] == 20 for e in r["batch"])),
        ),
        ("reason=no_room", lambda recs: 0),
        (
            "under=90%",
            lambda recs: next(r["step"] for r in recs if r["tokens"] < 9 and r["queued"] > 0),
        ),
    ],
)
@in_loop
async def test_each_breakpoint_kind_stops_at_its_first_step(
    cli: Cli, breakpoint: str, expected: Any
) -> None:
    dump = [json.loads(x) for x in cli("replay", ROTATION, "-f", "jsonl").lines]
    records = [r for r in dump if "batch" in r]
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await typed(pilot, "b", breakpoint)
        await keys(pilot, "home", "c")
        first = expected(records)
        if first == 0:  # the cursor starts on it: continue finds the next
            assert app.step > 0 or "no breakpoint" in app.status_text
        else:
            assert app.step == first, app.status_text


@in_loop
async def test_a_break_breakpoint_stops_where_the_policy_broke_the_contract() -> None:
    app = app_for(LONG, policy="tests.plugin_policies:LosesTasks")
    async with driving(app) as pilot:
        broke = app.travel.indexed["ending"]["step"]
        assert broke > app.travel.numbers[-1]  # it lost a task: found after the last batch
        await typed(pilot, "b", "break")
        await keys(pilot, "c")
        assert app.step == app.travel.numbers[-1]
        assert "break" in app.status_text
        assert f"contract broken at step {broke}" in str(app.query_one("#title").render())


@in_loop
async def test_a_bad_breakpoint_is_said_not_raised() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        await typed(pilot, "b", "sometimes")
        assert "not a breakpoint" in pilot.app.status_text
        await typed(pilot, "b", "under=200%")
        assert "percentage" in pilot.app.status_text
        assert pilot.app.breakpoints == []


@in_loop
async def test_the_copy_key_gives_the_command_that_shows_this_step(cli: Cli) -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await keys(pilot, "right", "right", "y")
        assert app.copied == "schedcli explain traces/rotation-fairness.jsonl --step 2"
        shown = cli(*app.copied.split()[1:], "--format", "json")
        assert shown.code == 0
        assert json.loads(shown.stdout)["step"] == 2


@in_loop
async def test_question_mark_shows_the_keys_and_escape_closes_them() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.05)
        assert isinstance(pilot.app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert not isinstance(pilot.app.screen, HelpScreen)


@in_loop
async def test_q_quits() -> None:
    app = app_for(ROTATION)
    async with driving(app) as pilot:
        await pilot.press("q")
        await pilot.pause(0.05)
        assert app.return_code is not None or not app.is_running


def test_a_bad_trace_is_replay_s_exit_2_message_before_any_screen(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"op":"submit","tid":1,"sid":1,"kind":"prefill","size":3}\n{"op":"get_work"}\n{"op": 7}\n'
    )
    replayed = cli("replay", bad, "-f", "jsonl")
    debugged = cli("debug", bad)
    assert replayed.code == debugged.code == 2
    assert debugged.stderr.strip().splitlines()[-1] == replayed.stderr.strip().splitlines()[-1]
    assert debugged.stdout == b""


def test_stdin_and_two_comparisons_are_usage_errors(cli: Cli) -> None:
    assert cli("debug", "-").code == 2
    both = cli("debug", ROTATION, "--check", "--against", "fcfs")
    assert both.code == 2 and "one thing" in both.stderr
    missing = cli("debug", ROTATION, "--golden", "nope.dump.jsonl")
    assert missing.code == 2 and "nope.dump.jsonl" in missing.stderr


def test_an_unknown_policy_is_the_same_usage_error_as_replay_s(cli: Cli) -> None:
    replayed = cli("replay", ROTATION, "-p", "no-such-policy")
    with pytest.raises(Said) as said:
        open_debug(DebugRequest(str(ROTATION), policy="no-such-policy"))
    assert said.value.exit_code == replayed.code == 2
    assert str(said.value) in replayed.stderr


@in_loop
async def test_a_view_whose_workers_were_killed_says_so_and_r_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a worker killed while it answered left the view asked for forever, and
    no view loaded again. Both workers killed (the server asks twice), the status says so;
    r asks again, and the view comes."""
    monkeypatch.setenv("SCHEDCLI_TEST_DIES", str(tmp_path / "pids"))
    # Three die: the two workers asked for step 0's view, and the process the app finds
    # the findings in (it asks the policy for its reasons too), in whatever order.
    monkeypatch.setenv("SCHEDCLI_TEST_DEATHS", "3")
    submit = {"op": "submit", "kind": "prefill", "size": 4}
    tasks = [{**submit, "tid": t, "sid": t} for t in (1, 2, 3)]
    trace = write_lines(tmp_path / "t.jsonl", [*tasks, *[{"op": "get_work"}] * 3])
    app = app_for(trace, policy="tests.doubles.dying:DiesAnswering")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            deadline = time.monotonic() + 30
            while "r asks again" not in app.status_text and time.monotonic() < deadline:
                await pilot.pause(0.02)
            assert app.status_text == (
                "step 0: no answer about step 0: the worker answering it was killed "
                "(SIGKILL) · r asks again"
            )
            assert app.shown is None and not app.loading
            # A policy that kills its process kills only the findings' own.
            await asyncio.to_thread(app.nav.findings_known.wait, 120)
            assert app.nav.findings_unknown == (
                "findings not known: their replay was killed (SIGKILL)"
            )
            await keys(pilot, "r")
            assert app.shown == 0 and app.status_text.startswith("step 0: 3 queued")
    finally:
        app.travel.close()


# --- snapshots: the main screens at 80x24 ----------------------------------------------


def _snap_app(path: Path, compare: Compare | None = None) -> DebugApp:
    return app_for(path, compare)


def test_snapshot_of_a_step_with_its_queue_and_reasons(snap_compare: Any) -> None:
    app = _snap_app(ROTATION)
    try:
        assert snap_compare(app, run_before=lambda p: _go(p, "right", "right"))
    finally:
        app.travel.close()


def test_snapshot_of_a_divergence_against_the_expect(snap_compare: Any, tmp_path: Path) -> None:
    trace, _ = edited_expect(tmp_path, 3)
    app = app_for(trace, Compare(check=True))
    try:
        assert snap_compare(app, run_before=lambda p: _go(p, "d"))
    finally:
        app.travel.close()


def test_snapshot_of_the_keys(snap_compare: Any) -> None:
    app = _snap_app(ROTATION)
    try:
        assert snap_compare(app, run_before=lambda p: _go(p, "question_mark"))
    finally:
        app.travel.close()


def test_snapshot_without_colour(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = _snap_app(ROTATION)
    assert app.no_color
    try:
        assert snap_compare(app, run_before=lambda p: _go(p, "right"))
    finally:
        app.travel.close()


async def _go(pilot: Pilot[Any], *pressed: str) -> None:
    await settle(pilot)
    for key in pressed:
        await pilot.press(key)
    if isinstance(pilot.app.screen, HelpScreen):
        await pilot.pause(0.1)
        return
    await settle(pilot)


THRASHES = "tests.doubles:Thrashes"  # given with -p: a trace header may only name a policy


def thrashing_trace(tmp_path: Path) -> Path:
    """A request-level trace whose policy preempts one request for the other every step."""
    return write_lines(
        tmp_path / "thrash.jsonl",
        [
            {"schedcli": 1, "level": "request"},  # its policy given: THRASHES
            {"op": "arrive", "rid": "a", "prompt_tokens": 20, "max_tokens": 4},
            {"op": "arrive", "rid": "b", "prompt_tokens": 20, "max_tokens": 4},
            *[{"op": "step"} for _ in range(6)],
        ],
    )


@in_loop
async def test_a_request_level_trace_shows_held_requests_and_stops_at_a_preemption(
    cli: Cli, tmp_path: Path
) -> None:
    trace = thrashing_trace(tmp_path)
    dump = [json.loads(x) for x in cli("replay", trace, "-p", THRASHES, "-f", "jsonl").lines]
    preempted = [r["step"] for r in dump if r.get("preempted")]
    assert preempted
    async with driving(app_for(trace, policy=THRASHES)) as pilot:
        app = pilot.app
        table = app.query_one("#queue-table")
        assert [table.get_row_at(i)[1] for i in range(table.row_count)] == ['"a"', '"b"']
        await typed(pilot, "b", "preempt")
        await keys(pilot, "c")
        assert app.step == preempted[0]
        assert "preempt" in app.status_text
        await keys(pilot, "c")
        assert app.step == preempted[1]
        await keys(pilot, "C")
        assert app.step == preempted[0]


@in_loop
async def test_t_shows_decode_first_s_own_structures_at_the_step() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await keys(pilot, "right", "t")
        assert app.query_one("#state").display and not app.query_one("#queue-table").display
        states = dict(app.views[app.step]["states"][0])
        assert {"_decodes", "_chunks", "_rotation"} <= set(states)
        # The queues as the queues they stand for (sessions, tasks), not their indexes.
        assert states["_rotation"].startswith("[") and states["_decodes"].startswith("[")
        await keys(pilot, "t")
        assert app.query_one("#queue-table").display


def opened_at_once(
    trace: Path, steps: int, monkeypatch: pytest.MonkeyPatch, tail: bytes = b""
) -> DebugApp:
    """The app over a generated trace of ``steps`` (and ``tail``), opened without waiting
    for its index: long enough that the screen opens before its end is read."""
    import schedcli.app.commands.debug as command
    from bench.debug_bench import generate

    monkeypatch.setattr(command, "SETTLE_SECONDS", 0.0)
    generate(trace, steps)
    with trace.open("ab") as f:
        f.write(tail)
    return app_for(trace, every=5000)


@in_loop
async def test_a_long_trace_opens_at_once_and_indexes_behind_the_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = opened_at_once(tmp_path / "long.jsonl", 150_000, monkeypatch)
    async with driving(app) as pilot:
        seen = await indexed(pilot)
        assert any("indexing" in title for title in seen)
        assert "150,000 steps" in str(app.query_one("#title").render())
        await keys(pilot, "end")
        assert app.step == 149_999
        await keys(pilot, "left")
        assert app.step == 149_998 and app.status_text.startswith("step 149998:")


@in_loop
async def test_o_shows_the_second_policy_s_queue_at_the_same_step() -> None:
    async with driving(app_for(LONG, Compare(against="fcfs"))) as pilot:
        app = pilot.app
        await keys(pilot, "right", "o")
        view = app.views[app.step]
        table = app.query_one("#queue-table")
        shown = [table.get_row_at(i)[1] for i in range(table.row_count)]
        assert shown == [json.dumps(e["tid"]) for e in view["queues"][1]]
        assert "(fcfs's queue)" in app.status_text
        await keys(pilot, "o")
        shown = [table.get_row_at(i)[1] for i in range(table.row_count)]
        assert shown == [json.dumps(e["tid"]) for e in view["queues"][0]]
        await keys(pilot, "o")
        await pilot.press("o")


@in_loop
async def test_a_bad_line_found_behind_the_screen_is_in_the_title_and_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import schedcli.app.commands.debug as command

    trace = tmp_path / "bad.jsonl"
    app = opened_at_once(trace, 60_000, monkeypatch, b'{"op": "get_work", "expect": 5}\n')
    async with driving(app) as pilot:
        await indexed(pilot)
        assert "(exit 2)" in str(app.query_one("#title").render())
        assert str(trace) in app.travel.indexed["ending"]["message"]
        assert command.verdict(app.travel, Compare()) == 2


@in_loop
async def test_every_other_spelling_of_a_key_does_what_its_first_does() -> None:
    async with driving(app_for(LONG)) as pilot:
        app = pilot.app
        await keys(pilot, "pagedown")
        assert app.step == app.travel.numbers[-1]
        await keys(pilot, "pageup")
        assert app.step == 0
        await keys(pilot, "right", "right", "h")
        assert app.step == 1
        await keys(pilot, "p")
        assert app.step == 0
        await typed(pilot, "colon", "3")
        assert app.step == 3
        await typed(pilot, "g", "x")
        assert "a step is a number" in app.status_text and app.step == 3


@in_loop
async def test_enter_follows_the_selected_task_and_capital_i_its_session() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await keys(pilot, "right")
        entry = app.views[app.step]["queues"][0][0]
        for key, what in (("enter", f"task {entry['tid']}"), ("I", f"session {entry['sid']}")):
            await pilot.press(key)
            for _ in range(250):
                await pilot.pause(0.02)
                if isinstance(app.screen, LifeScreen) and app.screen.life_text:
                    break
            assert f"life of {what}" in app.screen.life_text
            lives = explain_lives(
                str(ROTATION),
                **({"tid": entry["tid"]} if key == "enter" else {"sid": entry["sid"]}),
            )
            for life in lives:
                assert f"line {life.line}" in app.screen.life_text
            await keys(pilot, "escape")


def test_a_batch_pane_title_counts_one_decode_and_one_chunk_in_the_singular() -> None:
    from schedcli.app.debug.panes import _title

    one = {"step": 4, "tokens": 5, "batch": [{"kind": "decode"}, {"kind": "prefill"}]}
    assert _title(one, 8, "now") == "step 4: 1 decode, 1 chunk, 5/8 tokens"
    two = {"step": 5, "tokens": 2, "batch": [{"kind": "decode"}, {"kind": "decode"}]}
    assert _title(two, None, "now") == "step 5: 2 decodes, 0 chunks, 2 tokens"


# --- findings: a breakpoint finding=KIND and their marks ---------------------------------

FINDINGS = ROOT / "docs" / "examples" / "findings"


async def findings_known(pilot: Pilot[Any]) -> None:
    """Until the app's findings are known and drawn (they are found on a thread of their
    own, which ``settle`` does not wait for)."""
    app = pilot.app
    assert isinstance(app, DebugApp)
    await asyncio.to_thread(app.nav.findings_known.wait, 120)
    await pilot.pause(0.1)
    await settle(pilot)


def _marks_line(app: DebugApp) -> str:
    timeline = str(app.query_one("#timeline").render())
    return next(line for line in timeline.splitlines() if line.startswith("marks"))


@in_loop
async def test_a_finding_breakpoint_stops_where_findings_finds_one_forward_and_back(
    cli: Cli,
) -> None:
    trace = FINDINGS / "starvation.jsonl"
    [found] = [json.loads(x) for x in cli("findings", trace, "-f", "json").lines]
    async with driving(app_for(trace)) as pilot:
        app = pilot.app
        await typed(pilot, "b", "finding=starvation")
        assert app.breakpoints[-1].text == "finding=starvation"
        await keys(pilot, "home", "c")
        assert app.step == found["step"], app.status_text
        assert 'finding=starvation: starvation waiting "L0" ran "s16a", "s16b"' in app.status_text
        await keys(pilot, "c")
        assert app.step == found["step"] and "no breakpoint holds" in app.status_text
        await keys(pilot, "end", "C")
        assert app.step == found["step"], app.status_text


@in_loop
async def test_the_timeline_marks_each_finding_by_its_kind_and_its_step_says_it() -> None:
    trace = FINDINGS / "hol_blocking.jsonl"
    async with driving(app_for(trace)) as pilot:
        app = pilot.app
        await findings_known(pilot)
        assert app.nav.findings_unknown is None
        marks = _marks_line(app)
        assert marks.count("h") == 1, marks  # one hol_blocking, at step 0
        assert "finding: hol_blocking waiting" in app.status_text
    async with driving(app_for(ROTATION)) as pilot:  # a calm trace: no finding marked
        await findings_known(pilot)
        assert set(_marks_line(pilot.app)[len("marks") :].strip()) <= set("!xprcC")


@in_loop
async def test_a_finding_breakpoint_at_the_request_level_stops_at_the_thrash(
    tmp_path: Path,
) -> None:
    app = app_for(thrashing_trace(tmp_path), policy=THRASHES)
    async with driving(app) as pilot:
        await typed(pilot, "b", "finding=preemption_thrash")
        await keys(pilot, "home", "c")
        assert app.step == 5 and 'preemption_thrash waiting "a"' in app.status_text


@in_loop
async def test_a_finding_breakpoint_of_an_unknown_kind_is_refused_with_the_kinds() -> None:
    async with driving(app_for(ROTATION)) as pilot:
        await typed(pilot, "b", "finding=hol")
        said = pilot.app.status_text
        assert "'hol' is not a kind of finding" in said and "hol_blocking, " in said
        await typed(pilot, "b", "finding=")
        assert "not a kind of finding" in pilot.app.status_text
        assert pilot.app.breakpoints == []


@in_loop
async def test_shift_y_copies_the_step_from_its_state_as_a_trace_that_checks(
    cli: Cli, tmp_path: Path
) -> None:
    async with driving(app_for(ROTATION)) as pilot:
        app = pilot.app
        await keys(pilot, "right", "right", "Y")
        for _ in range(100):
            if app.copied and app.copied.startswith("{"):
                break
            await pilot.pause(0.05)
        assert app.copied is not None
        assert "copied step 2 from its state" in app.status_text
        lines = [json.loads(line) for line in app.copied.splitlines()]
        assert [line.get("op") for line in lines] == [None, "state", "get_work"]
        assert lines[1]["step"] == 2 and "expect" in lines[2]
        trace = tmp_path / "step-2.jsonl"
        trace.write_text(app.copied)
        checked = cli("replay", trace, "--check", "-f", "jsonl")
        assert checked.code == 0, checked.stderr
        assert json.loads(checked.lines[0])["step"] == 2
