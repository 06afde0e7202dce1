"""schedcli explain (why a task waited) and schedcli shrink (a failing trace made small)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.model.requests import Arrival
from tests.conftest import Cli
from tests.doubles.requests import ToyRequests
from tests.helpers import REQUEST_HEADER, TRACES, run_cli, run_process, write_lines

CHAT = TRACES / "long-prompts-and-chat.jsonl"


def test_explain_step_shows_the_queue_the_batch_and_every_reason() -> None:
    r = run_cli("explain", str(CHAT), "--step", "1", "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    view = orjson.loads(r.stdout)
    assert view["step"] == 1 and view["line"] == 21 and view["policy"] == "decode-first"
    taken = {e["tid"] for e in view["batch"]}
    left = {e["tid"]: e["reason"] for e in view["left"]}
    queued = [e["tid"] for e in view["queue"]]
    assert set(queued) == taken | set(left)  # every queued task is taken or has a reason
    assert left["p1.3"] == "no_room" and left["p3.3"] == "behind_own_chunk"
    assert [e["tid"] for e in view["left"]] == [t for t in queued if t in left]  # queue order
    first = view["queue"][0]
    assert (first["line"], first["step"], first["age"]) == (10, 0, 1)


def test_explain_task_follows_a_task_from_submit_to_dispatch() -> None:
    r = run_cli("explain", str(CHAT), "--task", "p1.3", "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    (life,) = orjson.loads(r.stdout)
    assert life["submitted"] == {"line": 10, "step": 0}
    assert [p["reason"] for p in life["passed_over"]] == ["behind_own_chunk", "no_room"]
    assert life["outcome"] == {"what": "dispatched", "step": 2}


def test_explain_session_shows_each_of_its_tasks() -> None:
    r = run_cli("explain", str(CHAT), "--session", "doc3")
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out.count("task ") == 3 and "passed over, no_room" in out


def test_explain_names_what_it_cannot_find() -> None:
    r = run_cli("explain", str(CHAT), "--step", "99")
    assert r.returncode == 2 and b"there is no step 99: the replay has 4 steps (0 to 3)" in r.stderr
    r = run_cli("explain", str(CHAT), "--task", "nosuch")
    assert r.returncode == 2 and b"no submit in this trace holds task 'nosuch'" in r.stderr
    r = run_cli("explain", str(CHAT), "--step", "1", "--task", "p1.3")
    assert r.returncode == 2 and b"exactly one of --step, --task, --session" in r.stderr


def test_a_plugin_without_reasons_is_shown_as_giving_none() -> None:
    r = run_cli("explain", str(CHAT), "--step", "0", "-p", "tests.plugin_policies:OnePerBatch")
    assert r.returncode == 0, r.stderr.decode()
    assert b"no reasons given" in r.stdout


def planted(tmp_path: Path) -> Path:
    """A simulated trace of some 2,000 lines with one recorded batch put out of order."""
    w, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    w.write_text(
        "".join(
            json.dumps(
                {"sid": i, "arrival": i * 0.02, "prompt_tokens": 100 + 37 * i, "output_tokens": 30}
            )
            + "\n"
            for i in range(40)
        )
    )
    assert run_cli("simulate", str(w), "-o", str(trace), "-f", "json").returncode == 0
    lines = trace.read_text().splitlines()
    busy = [i for i, x in enumerate(lines) if '"expect":[' in x and x.count(",") > 8]
    k = busy[len(busy) // 2]
    event = json.loads(lines[k])
    event["expect"].reverse()
    lines[k] = json.dumps(event)
    trace.write_text("\n".join(lines) + "\n")
    assert len(lines) > 1000
    return trace


@pytest.mark.slow
def test_shrink_reduces_a_planted_wrong_expect_to_a_few_lines_that_still_fail(
    tmp_path: Path,
) -> None:
    trace, small = planted(tmp_path), tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    assert b"lines to" in r.stderr and b"replays" in r.stderr
    lines = small.read_text().splitlines()
    assert 2 <= len(lines) <= 40
    assert run_cli("replay", str(small), "--check", "-o", str(tmp_path / "d")).returncode == 1
    again = tmp_path / "again.jsonl"
    run_cli("shrink", str(trace), "--until", "check", "-o", str(again))
    assert again.read_bytes() == small.read_bytes()  # deterministic


def test_shrink_keeps_a_contract_break(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    events = [
        {"op": "submit", "tid": i, "sid": i % 3, "kind": "decode", "size": 1} for i in range(30)
    ]
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    plugin = "tests.plugin_policies:LosesTasks"
    assert run_cli("replay", str(trace), "-p", plugin).returncode == 3
    small = tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "--until", "contract", "-p", plugin, "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    assert len(small.read_text().splitlines()) == 2  # two submits: the second is lost
    assert run_cli("replay", str(small), "-p", plugin).returncode == 3


def test_shrink_keeps_two_policies_parting_ways(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    r = run_cli("shrink", str(CHAT), "--until", "diff:fcfs", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    assert len(small.read_text().splitlines()) < len(CHAT.read_text().splitlines())
    assert run_cli("diff", str(small), "--b", "fcfs").returncode == 1


def test_shrink_with_a_command(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    r = run_cli("shrink", str(CHAT), "--until", "cmd:! grep -q p3.3 {}", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    kept = small.read_text()
    assert "p3.3" in kept and len(kept.splitlines()) <= 3


def test_shrink_refuses_a_trace_that_does_not_fail(tmp_path: Path) -> None:
    r = run_cli("shrink", str(TRACES / "rotation-fairness.jsonl"), "--until", "check")
    assert r.returncode == 2 and b"does not fail --until check: nothing to shrink" in r.stderr
    r = run_cli("shrink", str(CHAT), "--until", "sometimes")
    assert r.returncode == 2 and b"one of check, contract, diff:POLICY" in r.stderr


def test_the_replay_table_counts_left_behind_tasks_by_reason() -> None:
    r = run_cli("replay", str(CHAT), "-f", "table")
    assert r.returncode == 0, r.stderr.decode()
    assert b"left behind" in r.stdout and b"no_room:3" in r.stdout


def test_the_check_view_says_why_the_replay_left_out_a_recorded_task(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"schedcli": 1, "params": {"max_batch_tokens": 8, "max_decode_sequences": 1, '
        '"max_prefill_chunk_size": 4}}\n'
        + "".join(
            f'{{"op": "submit", "tid": {i}, "sid": {i}, "kind": "prefill", "size": 4}}\n'
            for i in (1, 2, 3)
        )
        + '{"op": "get_work", "expect": [1, 3]}\n'
    )
    r = run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 1
    assert "3: budget_spent  8 of 8 tokens were spent before its turn" in r.stderr.decode()


def test_diff_says_why_each_side_left_out_what_the_other_dispatched() -> None:
    r = run_cli("diff", str(CHAT), "--b", "fcfs")
    out = r.stdout.decode()
    assert r.returncode == 1
    assert '"p1.2": no_room  256 tokens, 24 left' in out
    assert '"p2.1": head_of_line  task "p1.3" ahead of it did not fit' in out


DIFFS = [
    (trace.name, policy)
    for trace in sorted(TRACES.glob("*.jsonl"))
    for policy in ("fcfs", "prefill-first", "priority", "fair")
]


@pytest.mark.parametrize(("trace", "policy"), DIFFS)
def test_diff_finds_each_sides_reasons_as_it_compares_without_a_second_replay(
    trace: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stepped traces and --drain run several steps a line (or at the close): the sides
    take them in turns, so the reasons are those a replay to the step gives."""
    import schedcli.app.commands.diff as diff_command
    import schedcli.engine.diff as diff

    args = ("diff", str(TRACES / trace), "--b", policy, "--drain")
    with monkeypatch.context() as patched:
        patched.setattr(diff, "_reasons_now", lambda *_: None)  # always replay to the step
        replayed_to_it = run_cli(*args)

    def no_second_replay(*_: object) -> None:
        raise AssertionError("diff replayed the trace again for its reasons")

    monkeypatch.setattr(diff_command, "reasons_at", no_second_replay)
    found = run_cli(*args)
    assert found.returncode == replayed_to_it.returncode
    assert found.stdout == replayed_to_it.stdout


def test_stats_names_the_worst_session_and_the_longest_wait() -> None:
    r = run_cli("stats", str(CHAT), "-f", "json")
    summary = orjson.loads(r.stdout)
    assert summary["worst_session"] == "doc3"
    assert summary["longest_wait"] == {
        "tid": "p2.2",
        "sid": "doc2",
        "dispatched_at_step": 2,
        "waited_steps": 2,
    }


def test_shrink_keeps_the_failure_signature_and_the_expect_as_recorded(tmp_path: Path) -> None:
    trace, small = planted(tmp_path), tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    original = {json.dumps(json.loads(x).get("expect")) for x in trace.read_text().splitlines()}
    kept = [json.loads(x) for x in small.read_text().splitlines()]
    expects = [e["expect"] for e in kept if "expect" in e]
    assert expects and all(json.dumps(x) in original for x in expects)  # never edited
    assert [] not in expects
    assert any(len(x) > 1 for x in expects)  # the reversed batch itself, as recorded
    # its tasks: submitted, or queued in the state it begins from (decode-first's rotation
    # there decides the order)
    queued = [t for e in kept if e.get("op") == "state" for g in e["state"]["queued"] for t in g]
    assert len({e["tid"] for e in [*kept, *queued] if "tid" in e}) >= 2


def test_shrink_keeps_each_kept_tasks_prepared_input(tmp_path: Path) -> None:
    # Groups of chunks of one opaque prepared input, a batch recorded in the wrong order.
    events: list[dict[str, object]] = []
    for sid in range(12):
        chunks = [
            {"tid": f"{sid}.{c}", "sid": sid, "kind": "prefill", "size": 10,
             "prepared": {"size": 30, "offset": 10 * c}}
            for c in range(3)
        ]  # fmt: skip
        events.append({"op": "submit", "tasks": chunks})
        events.append({"op": "get_work", "expect": [f"{sid}.{c}" for c in range(3)]})
    events[5] = {"op": "get_work", "expect": ["2.2", "2.1", "2.0"]}
    trace, small = tmp_path / "t.jsonl", tmp_path / "small.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    kept = [t for e in map(json.loads, small.read_text().splitlines()) for t in e.get("tasks", [])]
    assert kept
    for t in kept:
        assert t["prepared"] == {"size": 30, "offset": 10 * int(t["tid"].split(".")[1])}
    assert run_cli("replay", str(small), "--check", "-o", str(tmp_path / "d")).returncode == 1


def test_shrink_does_not_cut_to_a_repro_that_fails_for_another_reason(tmp_path: Path) -> None:
    # The policy orders the batch wrongly; an expect-less submit + empty expect would also
    # "fail --check", but not the same way.
    lines = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1},
        {"op": "submit", "tid": 2, "sid": 2, "kind": "decode", "size": 1},
        {"op": "get_work", "expect": [2, 1]},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    small = tmp_path / "s.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-p", "fcfs", "-o", str(small))
    assert r.returncode == 0, r.stderr.decode()
    assert [json.loads(x) for x in small.read_text().splitlines()] == lines


def test_shrink_says_its_progress_on_stderr(tmp_path: Path) -> None:
    trace, small = planted(tmp_path), tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(small), "--max-time", "30")
    assert r.returncode == 0
    said = re.findall(rb"shrinking: (\d+) tried, (\d+) events", r.stderr)
    assert said and int(said[0][1]) > 500  # the first: the trace up to its failing line


def test_shrink_at_max_time_writes_the_smallest_failing_trace_so_far(tmp_path: Path) -> None:
    trace, small = planted(tmp_path), tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(small), "--max-time", "0.01")
    assert r.returncode == 0, r.stderr.decode()
    assert b"--max-time ran out: this is the smallest failing trace found so far" in r.stderr
    assert run_cli("replay", str(small), "--check", "-o", str(tmp_path / "d")).returncode == 1
    r = run_cli("shrink", str(trace), "--until", "check", "--max-time", "nan")
    assert r.returncode == 2 and b"--max-time must be a number > 0" in r.stderr


def few_tasks_left(tmp_path: Path, policy: str) -> Path:
    """Twelve queued decodes, three steps, the third step's expect wrong (4 where the
    policy, one task a batch in order, takes 3). ``policy`` (HangsWhenFew and its kin)
    misbehaves when asked for work with fewer than eight tasks queued: the trace does not,
    but the candidates that drop five sessions of the ten queued at the failing step do."""
    header = {"schedcli": 1, "policy": policy, "params": {"max_batch_tokens": 64, "few": 8}}
    submits = [{"op": "submit", "tid": i, "sid": i, "kind": "decode", "size": 1}
               for i in range(1, 13)]  # fmt: skip
    steps = [{"op": "get_work", "expect": [tid]} for tid in (1, 2, 4)]
    return write_lines(tmp_path / "t.jsonl", [header, *submits, *steps])


def shrink_bounded(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """``schedcli shrink ARGS`` in a process of its own, killed if it runs a minute: a
    shrink that does not hold --max-time fails the test instead of hanging the suite."""
    try:
        return run_process("shrink", *args, cwd=cwd, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("shrink ran on past --max-time (killed after 60 s)")


def took(stderr: bytes) -> float:
    found = re.search(rb" in ([0-9.]+) s \(\d+ replays\)", stderr)
    assert found, stderr.decode()
    return float(found.group(1))


def test_shrink_at_max_time_abandons_a_candidate_whose_policy_never_returns(
    tmp_path: Path,
) -> None:
    """A policy that loops forever on some candidates (and swallows any exception a timer
    could raise in it) holds shrink no longer than --max-time: the candidate is abandoned,
    and what was found before it is written."""
    from schedcli.engine.shrink.reduce import GRACE

    hangs = "tests.plugin_policies:HangsWhenFew"  # given with -p: a header may only name it
    trace = few_tasks_left(tmp_path, hangs)
    small = tmp_path / "small.jsonl"
    r = shrink_bounded(
        str(trace), "-p", hangs, "--until", "check", "-o", str(small), "--max-time", "1.5"
    )
    assert r.returncode == 0, r.stderr.decode()
    assert took(r.stderr) <= 1.5 + GRACE, r.stderr.decode()
    said = r.stderr.decode()
    assert "--max-time ran out while a candidate was being replayed: it was abandoned" in said
    assert "--max-time ran out: this is the smallest failing trace found so far" in said
    kept = [json.loads(x) for x in small.read_text().splitlines()]
    assert 1 < len(kept) < len(trace.read_text().splitlines())  # the window was found first
    assert kept[-1] == {"op": "get_work", "expect": [4]}
    # A second path to the verdict: replay --check of what was written (it queues enough
    # tasks not to hang) finds the same difference, 4 expected and 3 dispatched.
    check = run_process(
        "replay", str(small), "-p", hangs, "--check", "-o", str(tmp_path / "d"), timeout=60
    )
    assert check.returncode == 1, check.stderr.decode()
    assert b"moved out (expected, not dispatched): [4]" in check.stderr
    assert b"moved in (dispatched, not expected): [3]" in check.stderr


def test_shrink_at_max_time_ends_a_command_that_never_ends(tmp_path: Path) -> None:
    """--until cmd: a command that never returns on small candidates is abandoned at
    --max-time, and ended with what it started."""
    from schedcli.engine.shrink.reduce import GRACE

    command = "cmd:[ $(wc -l < {}) -ge 20 ] && exit 1; echo $$ >> pids; exec sleep 300"
    small = tmp_path / "small.jsonl"
    r = shrink_bounded(str(CHAT), "--until", command, "-o", str(small), "--max-time", "1.5",
                       cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert took(r.stderr) <= 1.5 + GRACE, r.stderr.decode()
    assert b"it was abandoned" in r.stderr
    assert 20 <= len(small.read_text().splitlines()) < len(CHAT.read_text().splitlines())
    (pid,) = map(int, (tmp_path / "pids").read_text().split())
    state = Path(f"/proc/{pid}/stat")
    for _ in range(50):  # ended (or a zombie its new parent has not reaped yet)
        if not state.exists() or state.read_text().split(") ")[-1].startswith("Z"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the command's sleep ({pid}) outlived shrink")


@pytest.mark.slow
def test_shrink_at_max_time_says_when_the_trace_itself_never_finishes_replaying(
    tmp_path: Path,
) -> None:
    from schedcli.engine.shrink.reduce import GRACE

    hangs = "tests.plugin_policies:HangsWhenFew"  # given with -p: a header may only name it
    trace = few_tasks_left(tmp_path, hangs)
    start = time.monotonic()
    r = shrink_bounded(
        str(trace), "-p", hangs, "--until", "check", "-P", "few=20", "--max-time", "0.5"
    )
    assert time.monotonic() - start < 0.5 + GRACE + 30  # a process's start included
    assert r.returncode == 2, r.stderr.decode()
    assert b"was still running at the time limit" in r.stderr
    assert b"no failure found to shrink" in r.stderr


def test_shrink_at_max_time_says_a_policy_that_ends_the_process_broke_the_contract(
    tmp_path: Path,
) -> None:
    """Under --max-time candidates are replayed in a process of their own: a policy that
    ends it is a broken contract (exit 3), never a shrink that ends without a word."""
    ends = "tests.plugin_policies:EndsWhenFew"
    trace = few_tasks_left(tmp_path, ends)
    small = tmp_path / "small.jsonl"
    r = shrink_bounded(
        str(trace), "-p", ends, "--until", "check", "-o", str(small), "--max-time", "30"
    )
    assert r.returncode == 3, r.stderr.decode()
    assert b"ended during a replay (exit status 0)" in r.stderr


def test_shrink_interrupted_writes_the_smallest_failing_trace_so_far(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    trace, small = planted(tmp_path), tmp_path / "small.jsonl"
    argv = [sys.executable, "-m", "schedcli", "shrink", str(trace), "--until", "check"]
    proc = subprocess.Popen(
        [*argv, "-o", str(small)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # said once the first candidate is tried
    assert first.startswith(b"shrinking:"), first
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err = first + rest
    assert proc.returncode == 130, err
    assert b"interrupted: this is the smallest failing trace found so far" in err
    assert run_cli("replay", str(small), "--check", "-o", str(tmp_path / "d")).returncode == 1


@pytest.mark.slow
def test_sh2_a_flaky_command_is_a_clear_error_not_an_internal_one(tmp_path: Path) -> None:
    # Fails (exit 1) on its first three calls, then passes.
    flaky = "cmd:n=$(cat count 2>/dev/null || echo 0); echo $((n+1)) > count; [ $n -ge 3 ]"
    r = run_cli("shrink", str(CHAT), "--until", flaky, "-o", "small.jsonl", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert b"the failure did not reproduce on the final check" in r.stderr
    assert b"internal error" not in r.stderr


def test_sh1_an_invalid_expect_is_located_not_an_internal_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"op":"submit","tid":1,"sid":1,"kind":"decode","size":1}\n'
        '{"op":"get_work","expect":[[2]]}\n'
    )
    r = run_cli("shrink", str(trace), "--until", "check")
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:2: ")


def test_explain_step_of_a_request_trace_drained_at_its_end(cli: Cli, tmp_path: Path) -> None:
    """Regression: a request-level trace of arrivals only runs every step in its drain;
    explain --step said there was no such step."""
    from tests.helpers import write_lines

    trace = write_lines(
        tmp_path / "drained.jsonl",
        [
            {
                "schedcli": 1,
                "level": "request",
                "policy": "toy-requests",
                "params": {"max_num_batched_tokens": 16, "max_num_seqs": 2},
            },
            {"op": "arrive", "rid": "a", "prompt_tokens": 20, "max_tokens": 2},
            {"op": "arrive", "rid": "b", "prompt_tokens": 20, "max_tokens": 2},
        ],
    )
    shown = cli("explain", trace, "--step", "1", "--format", "json")
    assert shown.code == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert [q["sid"] for q in view["queue"]] == ["a", "b"]
    assert view["step"] == 1 and view["batch"]


def test_explain_of_a_step_a_trace_skips_counts_the_steps_it_has(cli: Cli) -> None:
    """Regression: for a trace whose get_work events number their steps 0 and 2, explain
    --step 1 said the replay had 3 steps, where its end record says 2."""
    trace = TRACES / "clear-shutdown.jsonl"
    end = json.loads(cli("replay", trace, "-f", "jsonl").lines[-1])["end"]
    shown = cli("explain", trace, "--step", "1")
    assert shown.code == 2
    assert shown.stderr.strip().endswith(
        f"there is no step 1: the replay has {end['steps']} steps, numbered 0 to 2 with 1 skipped"
    )


TOY = "tests.doubles:ToyRequests"  # given with -p: a trace header may only name it


def _held_twice(tmp_path: Path) -> Path:
    """b arrives at line 3, step 0, and again at line 5, step 1, while it is still held
    (ToyRequests, one request running, refuses the second)."""
    params = {"max_num_batched_tokens": 8, "max_num_seqs": 1}
    header = {"schedcli": 1, "level": "request", "policy": TOY, "params": params}
    return write_lines(
        tmp_path / "again.jsonl",
        [
            header,
            {"op": "arrive", "rid": "a", "prompt_tokens": 20, "max_tokens": 2},
            {"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 2},
            {"op": "step"},
            {"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 2},
            {"op": "step"},
            {"op": "step"},
        ],
    )


def test_a_rejected_rearrival_leaves_the_held_request_s_arrival_in_explain(
    cli: Cli, tmp_path: Path
) -> None:
    """Regression: explain --step showed b at the rejected arrival's line 5, step 1, and
    explain --session b began its life there."""
    trace = _held_twice(tmp_path)
    dump = [json.loads(x) for x in cli("replay", trace, "-p", TOY, "-f", "jsonl").lines]
    refused = {"op": "arrive", "accepted": False, "rid": "b"}
    assert {"line": 5, **refused, "reason": "request 'b' is already held"} in dump
    shown = cli("explain", trace, "-p", TOY, "--step", "2", "-f", "json")
    assert shown.code == 0, shown.stderr
    queue = {q["sid"]: (q["line"], q["step"], q["age"]) for q in json.loads(shown.stdout)["queue"]}
    assert queue == {"a": (2, 0, 2), "b": (3, 0, 2)}
    shown = cli("explain", trace, "-p", TOY, "--session", "b", "-f", "json")
    (life,) = json.loads(shown.stdout)
    assert life["submitted"] == {"line": 3, "step": 0}
    assert [p["step"] for p in life["passed_over"]] == [0, 1, 2]
    assert life["outcome"]["what"] == "still queued"


class RefusesLong(ToyRequests):
    """ToyRequests that also refuses a prompt of more than 100 tokens."""

    def add(self, arrival: Arrival) -> str | None:
        return "too long" if arrival.prompt_tokens > 100 else super().add(arrival)


def test_explain_session_of_a_refused_request_says_it_was_rejected(
    cli: Cli, tmp_path: Path
) -> None:
    """Regression: a request whose only arrival was refused was shown as still queued."""
    header = {"schedcli": 1, "level": "request", "policy": TOY}
    trace = write_lines(
        tmp_path / "refused.jsonl",
        [
            header,
            {"op": "step"},
            {"op": "arrive", "rid": "c", "prompt_tokens": 400, "max_tokens": 2},
            {"op": "step"},
        ],
    )
    policy = f"{__name__}:RefusesLong"
    (life,) = json.loads(cli("explain", trace, "-p", policy, "--session", "c", "-f", "json").stdout)
    assert life["submitted"] == {"line": 3, "step": 1}
    assert life["outcome"] == {"what": "rejected", "step": 1, "reason": "too long"}


@st.composite
def rearrivals(draw: st.DrawFn) -> list[dict[str, object]]:
    """Random request traces over four ids, so that ids often arrive again while held."""
    params = {"max_num_batched_tokens": 8, "max_num_seqs": 2}
    lines: list[dict[str, object]] = [
        {"schedcli": 1, "level": "request", "policy": TOY, "params": params}
    ]
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["arrive", "arrive", "step", "step", "abort"]))
        rid = draw(st.sampled_from(["r0", "r1", "r2", "r3"]))
        if op == "arrive":
            size, most = draw(st.integers(1, 20)), draw(st.integers(1, 3))
            lines.append({"op": "arrive", "rid": rid, "prompt_tokens": size, "max_tokens": most})
        elif op == "abort":
            lines.append({"op": "abort", "rid": rid})
        else:
            lines.append({"op": "step"})
    lines.append({"op": "step"})
    return lines


def _arrivals_from_the_dump(
    lines: list[dict[str, object]], dump: list[dict[str, object]]
) -> list[list[tuple[object, int, int]]]:
    """The second path: per step, the requests held as it began, each with the line and
    step of its accepted arrival; from the trace and the dump's records (an arrival with
    no rejection record at its line was accepted; an abort record says what it dropped;
    a batch record what finished)."""
    rejected = {r["line"] for r in dump if r.get("op") == "arrive"}
    aborted = {r["line"] for r in dump if r.get("op") == "abort" and r["was"] is not None}
    batches = [r for r in dump if "batch" in r]
    held: dict[object, tuple[int, int]] = {}  # in arrival order, as the policy holds them
    per_step = []
    for line, event in enumerate(lines[1:], start=2):
        rid = event.get("rid")
        if event["op"] == "arrive" and line not in rejected:
            held[rid] = (line, len(per_step))
        elif event["op"] == "abort" and line in aborted:
            del held[rid]
        elif event["op"] == "step":
            per_step.append([(r, *at) for r, at in held.items()])
            for r in batches[len(per_step) - 1]["finished"]:  # type: ignore[attr-defined]
                del held[r]
    return per_step


@settings(max_examples=40, deadline=None)
@given(lines=rearrivals())
def test_explain_step_gives_each_held_request_the_arrival_that_was_accepted(
    tmp_path_factory: pytest.TempPathFactory, lines: list[dict[str, object]]
) -> None:
    from schedcli.engine.explain import explain_step

    trace = write_lines(tmp_path_factory.mktemp("r") / "r.jsonl", lines)
    replayed = run_cli("replay", str(trace), "-p", TOY, "-f", "jsonl")
    assert replayed.returncode == 0, replayed.stderr
    dump = [json.loads(x) for x in replayed.stdout.splitlines()]
    for step, want in enumerate(_arrivals_from_the_dump(lines, dump)):
        view = explain_step(str(trace), step, TOY).to_json()
        assert [(q["sid"], q["line"], q["step"]) for q in view["queue"]] == want, step
        assert all(q["age"] == step - q["step"] for q in view["queue"])


ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 10, "max_tokens": 3, "t": 0.0}


def test_shrink_until_check_at_an_update_keeps_it(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl",
        [REQUEST_HEADER, ARRIVE, {"op": "schedule"},
         {"op": "update", "expect": {"finished": ["a"]}}, {"op": "schedule"}, {"op": "update"}],
    )  # fmt: skip
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 1
    out = tmp_path / "s.jsonl"
    r = run_cli("shrink", str(trace), "--until", "check", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert run_cli("replay", str(out), "--check", "-o", os.devnull).returncode == 1


def test_explain_on_an_empty_trace_says_it_has_no_steps(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    r = run_cli("explain", str(trace), "--step", "3")
    assert r.returncode == 2
    assert r.stderr.decode().strip() == f"{trace}: there is no step 3: the replay has no steps"


def test_explain_task_explains_a_rejection(cli: Cli) -> None:
    r = cli("explain", TRACES / "rejections.jsonl", "--task", "2", "-f", "json")
    assert r.code == 0, r.stderr
    (life,) = orjson.loads(r.stdout)
    assert life["outcome"] == {"what": "rejected", "step": 0, "reason": "task 2 has size 0"}


# --- explain --step N --as-trace ------------------------------------------------------------


def test_explain_as_trace_writes_the_step_from_its_state_and_check_passes(
    cli: Cli, tmp_path: Path
) -> None:
    trace = TRACES / "cancel-and-rejoin.jsonl"
    for step, expect in ((0, [2, 4]), (1, [3, 5]), (2, [])):
        out = tmp_path / f"step-{step}.jsonl"
        r = cli("explain", trace, "--step", str(step), "--as-trace", "-o", out)
        assert r.code == 0, r.stderr
        header, state, get_work = (orjson.loads(line) for line in out.read_bytes().splitlines())
        assert header["policy"] == "decode-first" and header["params"]["compat"] == "fixed"
        assert (state["op"], state["step"]) == ("state", step)
        assert get_work == {"op": "get_work", "expect": expect}
        checked = cli("replay", out, "--check", "-f", "jsonl")
        assert checked.code == 0, checked.stderr
        assert orjson.loads(checked.lines[0])["step"] == step
    stdout = cli("explain", trace, "--step", "1", "--as-trace")
    assert stdout.stdout == (tmp_path / "step-1.jsonl").read_bytes()


def test_explain_as_trace_of_a_policy_that_changed_fails_its_check(
    cli: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "step.jsonl"
    trace = TRACES / "rotation-fairness.jsonl"
    assert cli("explain", trace, "--step", "1", "--as-trace", "-o", out).code == 0
    lines = out.read_text().splitlines()
    get_work = json.loads(lines[2])
    get_work["expect"] = list(reversed(get_work["expect"])) or [999]
    out.write_text("\n".join([*lines[:2], json.dumps(get_work)]) + "\n")
    assert cli("replay", out, "--check").code == 1


def test_explain_as_trace_refuses_what_it_cannot_write(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes((TRACES / "cancel-and-rejoin.jsonl").read_bytes())
    aliased = cli("explain", trace, "--step", "1", "--as-trace", "-o", trace)
    assert aliased.code == 2 and "is the same file as TRACE" in aliased.stderr
    unsnapshotted = cli(
        "explain", trace, "--step", "1", "--as-trace", "-p", "tests.plugin_policies:OnePerBatch"
    )
    assert unsnapshotted.code == 2
    assert "policy one-per-batch has no snapshots" in unsnapshotted.stderr
    stepped = cli("explain", TRACES / "clear-shutdown.jsonl", "--step", "0", "--as-trace")
    assert stepped.code == 2 and "a state is taken in explicit traces only" in stepped.stderr
    alone = cli("explain", trace, "--task", "1", "--as-trace")
    assert alone.code == 2 and "give --step N --as-trace" in alone.stderr
    request = write_lines(
        tmp_path / "r.jsonl",
        [REQUEST_HEADER, {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 2}],
    )
    refused_request = cli("explain", request, "--step", "0", "--as-trace")
    assert refused_request.code == 2
    assert "request-level policies have no snapshots" in refused_request.stderr
    assert not list(tmp_path.glob("*.tmp*"))
