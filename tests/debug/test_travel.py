"""The debugger's time machine answers as the one-shot commands do: every view is
``explain --step``'s, every life ``explain --task``'s, every divergence where ``replay
--check``, ``replay --golden`` or ``diff`` finds one; from any checkpoint, compiled or pure."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.app.commands.explain import explain_lives
from schedcli.engine.diff import Side, diff_trace
from schedcli.engine.explain import explain_step
from schedcli.engine.travel import Compare, Travel, Unanswered
from tests.conftest import Cli
from tests.helpers import TOY, TOY_NAME, write_lines

ROOT = Path(__file__).resolve().parents[2]
TASK_TRACES = sorted((ROOT / "traces").glob("*.jsonl"))


def views_agree(path: Path, every: int, policy: str | None = None) -> int:
    """Every step's view against explain --step's; the steps compared."""
    with Travel(str(path), policy=policy, every=every) as travel:
        assert travel.wait("indexed", 60)
        assert travel.failed is None and travel.indexed["ending"] is None
        for step in travel.numbers:
            view = travel.view(step)
            want = explain_step(str(path), step, policy).to_json()
            queue = view["queues"][0]
            assert [(e["tid"], e["line"], e["step"]) for e in want["queue"]] == [
                (e["tid"], e["line"], e["since"]) for e in queue
            ], step
            assert sorted(
                (json.dumps(e["tid"]), e["reason"], e["detail"]) for e in want["left"] or []
            ) == sorted(
                (json.dumps(e["tid"]), e["reason"], e["detail"]) for e in queue if e["reason"]
            ), step
            ran = [e["sid"] for e in view["records"][0]["batch"]]
            assert ran == [e["sid"] for e in want["batch"]], step
        return travel.steps


@pytest.mark.parametrize("every", [1, 2, 5])
@pytest.mark.parametrize("trace", TASK_TRACES, ids=lambda p: p.stem)
def test_each_step_shows_the_queue_and_reasons_explain_gives(trace: Path, every: int) -> None:
    assert views_agree(trace, every) > 0


@pytest.fixture(scope="module")
def request_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated request-level trace: 175 steps of tests.doubles:ToyRequests."""
    from schedcli.app.entry import main

    out = tmp_path_factory.mktemp("r") / "toy.jsonl"
    workload = ROOT / "docs/examples/vllm-kv-deadlock.workload.jsonl"
    with pytest.raises(SystemExit) as done:
        main(
            [
                "simulate",
                str(workload),
                "-p",
                "tests.doubles:ToyRequests",
                "-o",
                str(out),
                "-f",
                "json",
            ]
        )
    assert done.value.code in (0, None)
    return out


def test_a_request_level_step_shows_the_requests_held_and_why_each_waits(
    request_trace: Path,
) -> None:
    assert views_agree(request_trace, 7, TOY) > 100  # the server is a process of its own


def _trace_lines(draw: st.DrawFn) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = [
        {
            "schedcli": 1,
            "policy": "decode-first",
            "params": {
                "max_batch_tokens": 8,
                "max_decode_sequences": 2,
                "max_prefill_chunk_size": 4,
            },
        }
    ]
    tid = 0
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from(["submit", "submit", "get_work", "get_work", "cancel", "clear"]))
        if op == "submit":
            tid += 1
            kind = draw(st.sampled_from(["prefill", "decode"]))
            size = 1 if kind == "decode" else draw(st.integers(1, 4))
            lines.append(
                {
                    "op": "submit",
                    "tid": tid,
                    "sid": draw(st.integers(1, 4)),
                    "kind": kind,
                    "size": size,
                }
            )
        elif op == "cancel":
            lines.append({"op": "cancel", "sid": draw(st.integers(1, 4))})
        elif op == "clear":
            if draw(st.booleans()):
                lines.append({"op": "clear"})
        else:
            lines.append({"op": "get_work"})
    lines.append({"op": "get_work"})
    return lines


@st.composite
def traces(draw: st.DrawFn) -> list[dict[str, object]]:
    return _trace_lines(draw)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=traces(), every=st.integers(1, 4))
def test_any_trace_any_checkpoint_spacing_answers_as_explain(
    tmp_path: Path, lines: list[dict[str, object]], every: int
) -> None:
    views_agree(write_lines(tmp_path / "t.jsonl", lines), every)


DECODE_FIRST = {
    "schedcli": 1,
    "policy": "decode-first",
    "params": {"max_batch_tokens": 8, "max_decode_sequences": 2, "max_prefill_chunk_size": 4},
}


def reasons_agree(path: Path, every: int) -> list[str]:
    """Every reason explain --step gives, the debugger gives too: in each step's view, to a
    ``reason=`` breakpoint forward and backward from every step number (those the replay
    never ran included), and in the life of each task from the step it was submitted at.
    The reason codes found."""
    views_agree(path, every)
    with Travel(str(path), every=every) as travel:
        assert travel.wait("indexed", 60)
        steps = list(travel.numbers)
        given = {s: explain_step(str(path), s).to_json()["left"] or [] for s in steps}
        codes = sorted({e["reason"] for left in given.values() for e in left})
        for code in codes:
            at = [s for s in steps if any(e["reason"] == code for e in given[s])]
            for start in range(steps[-1] + 2):
                found = travel.scan([{"kind": "reason", "code": code}], start, True)
                first = next((s for s in at if s >= start), None)
                assert (found or {}).get("step") == first, (code, start)
                found = travel.scan([{"kind": "reason", "code": code}], start, False)
                last = next((s for s in reversed(at) if s <= start), None)
                assert (found or {}).get("step") == last, (code, start)
        tids = {e["tid"] for left in given.values() for e in left}
        for tid in sorted(tids):
            for life in explain_lives(str(path), tid=tid):
                events = travel.life({"tid": tid}, life.step)
                passed = [(s, d.split(":")[0]) for s, what, _, d in events if what == "passed over"]
                assert passed == [(s, code) for s, code, _ in life.passed_over], tid
        return codes


def _with_gaps(draw: st.DrawFn, explicit: bool) -> list[dict[str, object]]:
    """A trace whose step numbers skip some: stepped (a step's events carry its number, and
    the numbers of steps without work are never run) or explicit (each get_work carries
    its own number)."""
    lines: list[dict[str, object]] = [DECODE_FIRST]
    step = tid = 0
    for _ in range(draw(st.integers(1, 8))):
        step += draw(st.integers(0, 5))
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 5)) == 0:
                line: dict[str, object] = {"op": "cancel", "sid": draw(st.integers(1, 4))}
            else:
                tid += 1
                kind = draw(st.sampled_from(["prefill", "decode"]))
                line = {
                    "op": "submit",
                    "tid": tid,
                    "sid": draw(st.integers(1, 4)),
                    "kind": kind,
                    "size": 1 if kind == "decode" else draw(st.integers(1, 4)),
                }
            if not explicit:
                line["step"] = step
            lines.append(line)
        if explicit:
            lines.append({"op": "get_work", "step": step})
    return lines


def test_a_step_after_numbers_the_replay_skipped_shows_its_reasons(tmp_path: Path) -> None:
    """Regression: reasons were turned on after step N - 1; in a stepped trace that skips
    numbers (no work between its events), step 5 follows step 0, and showed none, nor did
    a reason= breakpoint or a task's life find them."""
    prefill = {"op": "submit", "kind": "prefill", "size": 4}
    lines = [
        DECODE_FIRST,
        {**prefill, "step": 0, "tid": 1, "sid": 1},
        *({**prefill, "step": 5, "tid": t, "sid": t} for t in (2, 3, 4)),
        {**prefill, "step": 9, "tid": 5, "sid": 5},
    ]
    trace = write_lines(tmp_path / "gaps.jsonl", lines)
    with Travel(str(trace)) as travel:
        assert travel.wait("indexed", 60)
        assert list(travel.numbers) == [0, 5, 6, 9]
        (waiting,) = [e for e in travel.view(5)["queues"][0] if not e["ran"]]
        assert (waiting["tid"], waiting["reason"]) == (4, "budget_spent")
    for every in (1, 2, 1000):
        assert reasons_agree(trace, every) == ["budget_spent"]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), explicit=st.booleans(), every=st.sampled_from([1, 3, 1000]))
def test_any_trace_whose_step_numbers_skip_gives_explain_s_reasons_at_every_step(
    tmp_path: Path, data: st.DataObject, explicit: bool, every: int
) -> None:
    lines = data.draw(st.composite(lambda draw: _with_gaps(draw, explicit))())
    reasons_agree(write_lines(tmp_path / "t.jsonl", lines), every)


def test_a_task_s_life_is_what_explain_task_says(tmp_path: Path) -> None:
    trace = ROOT / "traces/rotation-fairness.jsonl"
    with Travel(str(trace), every=1) as travel:
        travel.wait("indexed", 60)
        for tid in (3, 4, 9):
            (life,) = explain_lives(str(trace), tid=tid)
            events = travel.life({"tid": tid}, life.step)
            passed = [
                (s, what, d.split(":")[0]) for s, what, _, d in events if what == "passed over"
            ]
            assert passed == [(s, "passed over", code) for s, code, _ in life.passed_over]
            assert [e[0] for e in events if e[1] == "dispatched"] == [life.outcome_step]
            assert events[0][:2] == [life.step, "submitted"]


def test_a_cancelled_task_s_life_ends_cancelled(tmp_path: Path) -> None:
    trace = ROOT / "traces/cancel-and-rejoin.jsonl"
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    sessions = {x["sid"] for x in lines if x.get("op") == "submit"}
    with Travel(str(trace), every=1) as travel:
        travel.wait("indexed", 60)
        for sid in sessions:
            want = explain_lives(str(trace), sid=sid)
            events = travel.life({"sid": sid}, 0)
            cancelled = sorted(
                json.dumps(life.task.tid) for life in want if life.outcome == "cancelled"
            )
            assert sorted(json.dumps(e[2]) for e in events if e[1] == "cancelled") == cancelled


def _divergences(path: Path, compare: Compare, policy: str | None = None) -> list[int]:
    with Travel(str(path), policy=policy, compare=compare, every=2) as travel:
        assert travel.wait("indexed", 60)
        return sorted({s for s, kind, _ in travel.marks if kind == "div"})


def test_under_check_the_first_divergence_is_where_replay_check_stops(
    cli: Cli, tmp_path: Path
) -> None:
    lines = [
        json.loads(x) for x in (ROOT / "traces/rotation-fairness.jsonl").read_text().splitlines()
    ]
    gets = [i for i, x in enumerate(lines) if x.get("op") == "get_work" and "expect" in x]
    edited = lines[gets[2]]
    edited["expect"] = [*list(reversed(edited["expect"])), 999]
    path = write_lines(tmp_path / "edited.jsonl", lines)
    replayed = cli("replay", path, "--check", "-f", "jsonl")
    assert replayed.code == 1
    said = replayed.stderr.split(f"{path}:{gets[2] + 1}: step ")[1].split()[0]
    assert _divergences(path, Compare(check=True)) == [int(said)]
    assert _divergences(ROOT / "traces/rotation-fairness.jsonl", Compare(check=True)) == []


def test_against_a_second_policy_every_step_diff_finds_is_marked(tmp_path: Path) -> None:
    trace = ROOT / "traces/long-prompts-and-chat.jsonl"
    result = diff_trace(str(trace), Side(None, {}), Side("fcfs", {}))
    marked = _divergences(trace, Compare(against="fcfs"))
    assert len(marked) == result.steps_differing > 0
    assert result.first is not None and marked[0] == result.first.step


def test_against_a_golden_the_steps_it_differs_at_are_marked(cli: Cli, tmp_path: Path) -> None:
    trace = ROOT / "traces/rotation-fairness.jsonl"
    golden = ROOT / "traces/golden/rotation-fairness.dump.jsonl"
    assert _divergences(trace, Compare(golden=str(golden))) == []
    records = [json.loads(x) for x in golden.read_text().splitlines()]
    steps = [r for r in records if "batch" in r]
    steps[3]["queued"] += 1
    edited = write_lines(tmp_path / "g.dump.jsonl", records)
    assert cli("replay", trace, "--golden", edited, "-f", "jsonl").code == 1
    assert _divergences(trace, Compare(golden=str(edited))) == [steps[3]["step"]]


def test_a_broken_contract_ends_the_index_where_replay_says(cli: Cli, tmp_path: Path) -> None:
    trace = ROOT / "traces/long-prompts-and-chat.jsonl"
    replayed = cli("replay", trace, "-p", "tests.plugin_policies:LosesTasks", "-f", "jsonl")
    assert replayed.code == 3
    with Travel(str(trace), policy="tests.plugin_policies:LosesTasks") as travel:
        travel.wait("indexed", 60)
        ending = travel.indexed["ending"]
    assert ending["broke"] and ending["exit"] == 3
    assert ending["message"] in replayed.stderr


def test_a_trace_deleted_while_debugged_still_travels(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes((ROOT / "traces/rotation-fairness.jsonl").read_bytes())
    with Travel(str(trace), every=1) as travel:
        travel.wait("indexed", 60)
        before = [travel.view(s) for s in travel.numbers]
        trace.unlink()
        assert [travel.view(s) for s in reversed(travel.numbers)] == list(reversed(before))


def test_checkpoints_thin_out_past_the_cap_and_answers_stay_exact(tmp_path: Path) -> None:
    lines: list[dict[str, object]] = [{"schedcli": 1, "policy": "fcfs"}]
    for i in range(300):
        lines.append({"op": "submit", "tid": i, "sid": i % 5, "kind": "prefill", "size": 1 + i % 7})
        lines.append({"op": "get_work"})
    path = write_lines(tmp_path / "long.jsonl", lines)
    with Travel(str(path), every=1) as travel:
        travel.wait("indexed", 60)
        assert len(travel.checkpoints) <= 32
    views_agree(path, 1)


def test_a_breakpoint_scan_finds_the_first_and_the_last_step_a_brute_force_finds(
    tmp_path: Path,
) -> None:
    trace = ROOT / "traces/rotation-fairness.jsonl"
    with Travel(str(trace), every=1) as travel:
        travel.wait("indexed", 60)
        steps = list(travel.numbers)
        queues = {s: travel.view(s)["queues"][0] for s in steps}
        for k in (0, 1, 2, 3):
            waited = [
                s for s in steps if any(not e["ran"] and s - e["since"] > k for e in queues[s])
            ]
            first = travel.scan([{"kind": "wait", "k": k}], 0, True)
            assert (first or {}).get("step") == (waited[0] if waited else None), k
            last = travel.scan([{"kind": "wait", "k": k}], steps[-1], False)
            assert (last or {}).get("step") == (waited[-1] if waited else None), k
        for code in ("no_room", "behind_own_chunk", "never_given"):
            given_at = [s for s in steps if any(e["reason"] == code for e in queues[s])]
            found = travel.scan([{"kind": "reason", "code": code}], 0, True)
            assert (found or {}).get("step") == (given_at[0] if given_at else None), code


def test_closing_the_client_ends_the_server_its_checkpoints_and_workers() -> None:
    travel = Travel(str(ROOT / "traces/rotation-fairness.jsonl"), every=1)
    travel.wait("indexed", 60)
    travel.view(3)
    group = travel._process.pid
    travel.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # nobody left in the group, not even a zombie


def test_a_policy_that_cannot_be_forked_is_answered_by_replays_from_the_start() -> None:
    trace = ROOT / "traces/long-prompts-and-chat.jsonl"
    policy = "tests.plugin_policies:StaysHome"
    with Travel(str(trace), policy=policy, every=1) as travel:
        travel.wait("indexed", 60)
        assert travel.hello is not None and travel.hello["checkpoints"] is False
        assert travel.checkpoints == [-1]
    assert views_agree(trace, 1, policy) > 0


def test_a_request_trace_drained_at_its_end_shows_each_step_s_held_requests(
    tmp_path: Path,
) -> None:
    """Regression: a trace of arrivals only (its steps all in the drain) showed empty
    queues, the held requests being taken at step events only."""
    lines: list[dict[str, object]] = [
        {
            "schedcli": 1,
            "level": "request",
            "policy": TOY_NAME,
            "params": {"max_num_batched_tokens": 16, "max_num_seqs": 2},
        },
    ]
    for i in range(5):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 10 + 7 * i, "max_tokens": 3})
    path = write_lines(tmp_path / "drained.jsonl", lines)
    # The server is a process of its own, where the toy has no name: given, as -p gives it.
    assert views_agree(path, 2, TOY) > 5
    with Travel(str(path), policy=TOY, every=2) as travel:
        travel.wait("indexed", 60)
        assert all(travel.view(s)["queues"][0] for s in travel.numbers[:3])


def _request_trace(tmp_path: Path, policy: str = TOY_NAME) -> Path:
    lines: list[dict[str, object]] = [
        {
            "schedcli": 1,
            "level": "request",
            "policy": policy,
            "params": {"max_num_batched_tokens": 16, "max_num_seqs": 2},
        }
    ]
    for i in range(4):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 9 + 5 * i, "max_tokens": 2})
        lines += [{"op": "step"}, {"op": "step"}]
    lines += [{"op": "step"} for _ in range(8)]
    return write_lines(tmp_path / "r.jsonl", lines)


def test_at_the_request_level_check_marks_where_replay_check_stops(
    cli: Cli, tmp_path: Path
) -> None:
    trace = _request_trace(tmp_path)
    dump = [json.loads(x) for x in cli("replay", trace, "-f", "jsonl").lines]
    steps = [r for r in dump if "batch" in r]
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    step_lines = [i for i, x in enumerate(lines) if x.get("op") == "step"]
    for record, i in zip(steps, step_lines, strict=False):
        lines[i]["expect"] = {
            "batch": [[e["sid"], e["size"]] for e in record["batch"]],
            "preempted": record["preempted"],
            "finished": record["finished"],
        }
    good = write_lines(tmp_path / "expected.jsonl", lines)
    assert cli("replay", good, "--check", "-f", "jsonl").code == 0
    assert _divergences(good, Compare(check=True), TOY) == []
    lines[step_lines[5]]["expect"]["batch"] = [["r9", 1]]
    bad = write_lines(tmp_path / "planted.jsonl", lines)
    replayed = cli("replay", bad, "--check", "-f", "jsonl")
    assert replayed.code == 1
    said = int(replayed.stderr.split(": step ")[1].split()[0])
    assert _divergences(bad, Compare(check=True), TOY) == [said]


def test_at_the_request_level_against_a_second_policy_diff_s_steps_are_marked(
    tmp_path: Path,
) -> None:
    trace = _request_trace(tmp_path)
    b = ("tests.doubles:Thrashes", {"max_num_batched_tokens": 8, "max_num_seqs": 1})
    result = diff_trace(str(trace), Side(None, {}), Side(*b))
    against = Compare(against=b[0], against_params=b[1])
    with Travel(str(trace), policy=TOY, compare=against, every=3) as t:
        t.wait("indexed", 60)
        marked = sorted({s for s, kind, _ in t.marks if kind == "div"})
    assert len(marked) == result.steps_differing > 0
    assert result.first is not None and marked[0] == result.first.step


def test_a_request_s_life_is_what_explain_session_says(tmp_path: Path) -> None:
    trace = _request_trace(tmp_path)
    with Travel(str(trace), policy=TOY, every=2) as travel:
        travel.wait("indexed", 60)
        for rid in ("r1", "r3"):
            (life,) = explain_lives(str(trace), sid=rid)
            events = travel.life({"sid": rid}, 0)
            passed = [(s, d.split(":")[0]) for s, what, _, d in events if what == "passed over"]
            assert passed == [(s, code) for s, code, _ in life.passed_over]
            assert events[0][:2] == [life.step, "submitted"]
            assert any(what == "finished" for _, what, _, _ in events) == (
                life.outcome == "finished"
            )


@pytest.mark.parametrize("every", [1, 2])
def test_a_rejected_rearrival_leaves_the_held_request_s_arrival_in_the_view(
    tmp_path: Path, every: int
) -> None:
    """Regression: b, still held, showed line 0 once its id arrived again and was refused
    (the refusal's record erased its arrival); its life began a second time there."""
    toy = "tests.doubles:ToyRequests"  # given as the policy: a trace header may only name it
    params = {"max_num_batched_tokens": 8, "max_num_seqs": 1}
    header = {"schedcli": 1, "level": "request", "policy": toy, "params": params}
    b = {"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 2}
    lines = [header, {**b, "rid": "a", "prompt_tokens": 20}, b, {"op": "step"}, b]
    trace = write_lines(tmp_path / "again.jsonl", [*lines, {"op": "step"}, {"op": "step"}])
    assert views_agree(trace, every, toy) == 3
    with Travel(str(trace), policy=toy, every=every) as travel:
        travel.wait("indexed", 60)
        for step in travel.numbers:
            queue = travel.view(step)["queues"][0]
            assert [(e["tid"], e["line"], e["since"]) for e in queue] == [
                ("a", 2, 0),
                ("b", 3, 0),
            ], step
        events = travel.life({"sid": "b"}, 0)
        assert [e for e in events if e[1] == "submitted"] == [[0, "submitted", "b", "line 3"]]
        assert [1, "rejected", "b", "request 'b' is already held"] in events


def test_a_gzipped_trace_travels_as_the_plain_one(tmp_path: Path) -> None:
    """A checkpoint holds the decompressor's state in its memory and the file's offset
    in its own descriptor: both go on from there."""
    import gzip

    plain = ROOT / "traces/long-prompts-and-chat.jsonl"
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert views_agree(packed, 1) == views_agree(plain, 1)


# --- a worker that ends without answering ------------------------------------------------

DIES = "tests.doubles.dying:DiesAnswering"
SMALL = [{"op": "submit", "tid": t, "sid": t, "kind": "prefill", "size": 4} for t in (1, 2, 3)]


def _dying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deaths: int, how: str) -> Path:
    """A trace for DiesAnswering, whose first ``deaths`` workers end ``how``; the file its
    workers' pids are added to."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("SCHEDCLI_TEST_DIES", str(pids))
    monkeypatch.setenv("SCHEDCLI_TEST_DEATHS", str(deaths))
    monkeypatch.setenv("SCHEDCLI_TEST_HOW", how)
    write_lines(tmp_path / "t.jsonl", [*SMALL, *[{"op": "get_work"}] * 3])
    return pids


def _view(travel: Travel, step: int) -> dict[str, Any]:
    """The view of ``step``, waited for 30 s at most (a question must never wait on)."""
    return travel.ask({"op": "view", "step": step, "at": step}, timeout=30)["view"]


def _pid_in(pids: Path, nth: int) -> int:
    """The pid of the ``nth`` worker to have given reasons, once it has."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = pids.read_text().split() if pids.exists() else []
        if len(seen) > nth:
            return int(seen[nth])
        time.sleep(0.01)
    raise AssertionError(f"no worker {nth} in {pids}")


def test_a_worker_killed_while_answering_is_asked_again_and_the_view_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a worker killed while it answered left its question unanswered for good
    (the app asks with no timeout: the view never loaded again)."""
    pids = _dying(tmp_path, monkeypatch, 1, "wait")
    with Travel(str(tmp_path / "t.jsonl"), policy=DIES, every=1) as travel:
        assert travel.wait("indexed", 60)
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(_view, travel, 1)
            os.kill(_pid_in(pids, 0), signal.SIGKILL)
            view = asked.result()
    assert len(pids.read_text().split()) == 2  # asked again: a second worker answered
    want = explain_step(str(tmp_path / "t.jsonl"), 1, DIES).to_json()
    assert [e["tid"] for e in view["records"][0]["batch"]] == [e["tid"] for e in want["batch"]]
    assert [e["tid"] for e in view["queues"][0]] == [e["tid"] for e in want["queue"]]


@pytest.mark.parametrize(
    ("how", "said"),
    [("kill", "was killed (SIGKILL)"), ("exit", "ended (exit status 0) without an answer")],
)
def test_a_question_whose_workers_all_end_is_an_error_and_asking_again_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, said: str
) -> None:
    """Asked twice, both workers ended: the loss is the answer (never a wait), and the
    next question is asked afresh."""
    pids = _dying(tmp_path, monkeypatch, 2, how)
    with Travel(str(tmp_path / "t.jsonl"), policy=DIES, every=1) as travel:
        assert travel.wait("indexed", 60)
        with pytest.raises(Unanswered, match=rf"step 1: the worker answering it {re.escape(said)}"):
            _view(travel, 1)
        assert len(pids.read_text().split()) == 2
        assert [e["tid"] for e in _view(travel, 1)["records"][0]["batch"]] == [2]
        found = travel.scan([{"kind": "reason", "code": "any"}], 0, True)
        assert found is None  # a scan's workers answer as well


def test_a_checkpoint_killed_while_its_worker_answers_has_the_question_asked_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = _dying(tmp_path, monkeypatch, 1, "wait")
    with Travel(str(tmp_path / "t.jsonl"), policy=DIES, every=1) as travel:
        assert travel.wait("indexed", 60)
        assert 1 in travel.checkpoints
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(_view, travel, 2)
            worker = _pid_in(pids, 0)
            checkpoint = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(checkpoint, signal.SIGKILL)
            os.kill(worker, signal.SIGKILL)
            view = asked.result()
        assert [e["tid"] for e in view["records"][0]["batch"]] == [3]
