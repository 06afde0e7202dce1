"""Third-party policies (import string, entry points), `schedcli policies`, `schedcli diff`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from schedcli import BUILTIN_POLICIES
from tests.helpers import EXAMPLES, ROOT, TRACES, run_cli, write_lines

PLUGIN = "tests.plugin_policies:OnePerBatch"
REWORDED = "tests.plugin_policies:RewordedDecodeFirst"


def make_dist(tmp_path: Path, entries: dict[str, str], module: str | None = None) -> dict[str, str]:
    """An installed distribution (dist-info on PYTHONPATH) declaring schedcli.policies."""
    info = tmp_path / "fakeplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[schedcli.policies]\n{lines}")
    if module is not None:
        (tmp_path / "fakeplug.py").write_text(module)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


def test_import_string_loads_a_policy_class() -> None:
    r = run_cli("replay", str(TRACES / "rejections.jsonl"), "-p", PLUGIN)
    assert r.returncode == 0, r.stderr.decode()
    batches = [orjson.loads(x) for x in r.stdout.splitlines() if b'"batch"' in x]
    assert all(len(b["batch"]) == 1 for b in batches)
    assert r.stderr.decode().splitlines() == [
        "note: 'one-per-batch' does not take the trace header's max_decode_sequences, "
        "max_prefill_chunk_size; not applied"
    ]


def test_import_string_errors_name_the_plugin() -> None:
    cases = {
        "no_such_module_xyz:Thing": "failed to import",
        "tests.plugin_policies:Missing": "has no 'Missing'",
        "tests.plugin_policies:NotAPolicy": "is not a class implementing schedcli.Scheduler",
        "tests.plugin_policies": "package.module:ClassName",
    }
    for spec, message in cases.items():
        r = run_cli("replay", str(TRACES / "rejections.jsonl"), "-p", spec)
        assert r.returncode == 2, spec
        err = r.stderr.decode()
        assert message in err and b"Traceback" not in r.stderr, err
        if ":" in spec:
            assert spec in err


def test_entry_point_registers_a_policy_by_name(tmp_path: Path) -> None:
    env = make_dist(tmp_path, {"one-per-batch": PLUGIN})
    listed = run_cli("policies", "--format", "json", env=env)
    assert listed.returncode == 0, listed.stderr.decode()
    names = [p["name"] for p in orjson.loads(listed.stdout)]
    assert names[: len(BUILTIN_POLICIES)] == list(BUILTIN_POLICIES)
    assert "one-per-batch" in names
    r = run_cli("replay", str(TRACES / "deferral-order.jsonl"), "-p", "one-per-batch", env=env)
    assert r.returncode == 0, r.stderr.decode()


def test_entry_point_name_clash_is_an_error_naming_the_plugin(tmp_path: Path) -> None:
    env = make_dist(tmp_path, {"fcfs": PLUGIN})
    r = run_cli("replay", str(TRACES / "deferral-order.jsonl"), env=env)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "policy name 'fcfs' is registered twice" in err
    assert "fakeplug" in err and PLUGIN in err


def test_entry_point_import_failure_names_the_plugin(tmp_path: Path) -> None:
    env = make_dist(tmp_path, {"broken": "fakeplug:Policy"}, module="raise ImportError('nope')\n")
    r = run_cli("replay", str(TRACES / "deferral-order.jsonl"), "-p", "broken", env=env)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "policy plugin 'broken' (fakeplug:Policy) failed to import: ImportError: nope" in err


def test_entry_point_that_is_not_a_scheduler_is_refused(tmp_path: Path) -> None:
    env = make_dist(tmp_path, {"bogus": "tests.plugin_policies:NotAPolicy"})
    r = run_cli("policies", env=env)
    assert r.returncode == 2
    assert b"'bogus'" in r.stderr and b"not a class implementing" in r.stderr


def test_policy_that_raises_is_reported_with_its_name_and_step() -> None:
    r = run_cli(
        "replay",
        str(TRACES / "deferral-order.jsonl"),
        "-p",
        "tests.plugin_policies:RaisesInGetWork",
    )
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "policy 'raises' raised in get_work at step 0 (line 7): RuntimeError: boom" in err
    assert "Traceback" not in err


def test_policy_that_returns_a_task_twice_is_a_contract_breach_exit_3() -> None:
    r = run_cli(
        "replay", str(TRACES / "rejections.jsonl"), "-p", "tests.plugin_policies:DoublesDispatch"
    )
    assert r.returncode == 3
    assert b"broke the Scheduler contract" in r.stderr
    assert b"returned twice, or never accepted" in r.stderr


@pytest.mark.slow
def test_policies_lists_parameters_defaults_and_rules() -> None:
    r = run_cli("policies")
    assert r.returncode == 0
    out = r.stdout.decode()
    for name in BUILTIN_POLICIES:
        assert name in out
    assert "max_num_seqs=64" in out and "decode_weight=2.0" in out
    data = orjson.loads(run_cli("policies", "-f", "json").stdout)
    fair = next(p for p in data if p["name"] == "fair")
    assert {
        "name": "prefill_weight",
        "type": "float",
        "default": 1.0,
        "help": "counter charge per prefill token",
    } in fair["params"]
    assert "lowest counter" in fair["rule"]


def test_diff_of_decode_first_and_fcfs_shows_where_they_part() -> None:
    trace = TRACES / "long-prompts-and-chat.jsonl"
    r = run_cli("diff", str(trace), "--b", "fcfs")
    assert r.returncode == 1
    out = r.stdout.decode()
    assert "first difference: step 0" in out
    assert 'only in A: ["p2.1"]' in out and 'only in B: ["p1.2"]' in out
    data = orjson.loads(run_cli("diff", str(trace), "--b", "fcfs", "-f", "json").stdout)
    assert data["identical"] is False
    assert data["first_difference"]["step"] == 0
    assert data["steps_differing"] >= 1
    for side in ("a", "b"):
        m = data[side]["metrics"]
        for key in (
            "steps_to_drain",
            "mean_tokens_per_batch",
            "mean_wait_steps",
            "max_wait_steps",
            "worst_session_mean_wait_steps",
            "jain_fairness",
        ):
            assert m[key] is not None, key
    # Each side's whole configuration, defaults included.
    assert data["a"]["label"] == (
        "decode-first max_batch_tokens=544 max_decode_sequences=32 max_prefill_chunk_size=256 "
        "compat=fixed"
    )
    assert (
        data["b"]["label"] == "fcfs max_batch_tokens=544 max_num_seqs=64 max_prefill_chunk_size=256"
    )


def test_diff_of_a_policy_with_itself_is_identical_exit_0() -> None:
    r = run_cli("diff", str(TRACES / "rotation-fairness.jsonl"), "-f", "json")
    assert r.returncode == 0
    assert orjson.loads(r.stdout)["identical"] is True


def test_diff_params_per_side() -> None:
    trace = TRACES / "rotation-fairness.jsonl"
    r = run_cli("diff", str(trace), "--b-param", "max_batch_tokens=12", "-f", "json")
    assert r.returncode == 1
    data = orjson.loads(r.stdout)
    assert data["b"]["params"]["max_batch_tokens"] == 12
    assert data["a"]["params"]["max_batch_tokens"] == 10


def test_diff_of_two_dumps(tmp_path: Path) -> None:
    golden = TRACES / "golden" / "rotation-fairness.dump.jsonl"
    assert run_cli("diff", str(golden), str(golden)).returncode == 0
    other = tmp_path / "other.jsonl"
    run_cli("replay", str(TRACES / "rotation-fairness.jsonl"), "-p", "fcfs", "-o", str(other))
    r = run_cli("diff", str(golden), str(other), "-f", "json")
    assert r.returncode == 1
    data = orjson.loads(r.stdout)
    assert data["first_difference"]["step"] == 0
    assert data["a"]["metrics"]["mean_wait_steps"] is None  # a dump has no submit times


def test_diff_golden_and_check_pass_a_policy_that_rejects_alike_in_other_words(
    tmp_path: Path,
) -> None:
    """The same decisions, each rejection worded otherwise (as a C++ scheduler's, which
    gives no reason): diff, diff of the dumps, replay --golden and check all pass, with
    both sides' words shown beside the verdict."""
    trace = TRACES / "rejections.jsonl"
    r = run_cli("diff", str(trace), "--b", REWORDED)
    assert r.returncode == 0, r.stdout.decode()
    out = r.stdout.decode()
    assert "identical: all 1 steps match; 6 rejection(s) worded differently" in out
    assert 'submit (line 3): A "tid 7 is already queued"  B "refused"' in out
    data = orjson.loads(run_cli("diff", str(trace), "--b", REWORDED, "-f", "json").stdout)
    assert data["identical"] is True and data["records_differing"] == []
    assert data["reasons_differing"] == 6
    assert data["reasons_worded_differently"][0]["fields"] == [
        {"field": "reason", "a": "tid 7 is already queued", "b": "refused"}
    ]
    ours, theirs = tmp_path / "ours.dump.jsonl", tmp_path / "theirs.dump.jsonl"
    assert run_cli("replay", str(trace), "-o", str(ours)).returncode == 0
    assert run_cli("replay", str(trace), "-p", REWORDED, "-o", str(theirs)).returncode == 0
    assert ours.read_bytes() != theirs.read_bytes()  # the words differ
    assert run_cli("diff", str(ours), str(theirs)).returncode == 0
    golden = run_cli("replay", str(trace), "-p", REWORDED, "--golden", str(ours))
    assert golden.returncode == 0, golden.stderr.decode()
    assert "6 rejection(s) worded differently there (reasons are not compared)" in (
        golden.stderr.decode()
    )
    # A suite whose folder replays under the plugin, its golden written by decode-first.
    suite = tmp_path / "suite"
    (suite / "golden").mkdir(parents=True)
    (suite / "rejections.jsonl").write_bytes(trace.read_bytes())
    (suite / "golden" / "rejections.dump.jsonl").write_bytes(ours.read_bytes())
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli]\ntraces = ["suite"]\n'
        f'[tool.schedcli.folders.suite]\npolicy = "{REWORDED}"\n'
    )
    checked = run_cli("check", cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert "6 rejections worded differently (reasons are not compared)" in checked.stdout.decode()


def test_diff_still_counts_a_rejection_the_other_side_accepts_and_shows_the_words() -> None:
    trace = TRACES / "rejections.jsonl"
    r = run_cli("diff", str(trace), "--b", REWORDED, "--b-param", "max_prefill_chunk_size=3")
    assert r.returncode == 1
    out = r.stdout.decode()
    assert "2 other record(s) differ; 6 rejection(s) worded differently" in out
    assert "submit (line 10, only in B):" in out and '"reason":"refused"' in out


def test_a_side_with_no_batch_at_the_first_difference_is_a_difference_not_bad_input(
    tmp_path: Path,
) -> None:
    """B refuses the only submit, so it never runs a step: there is nothing it left out at
    step 0 to explain (it said "there is no step 0", exit 2), in diff and --golden alike."""
    header = {"schedcli": 1, "params": {"max_prefill_chunk_size": 4}}
    submit = {"op": "submit", "tid": 1, "sid": 0, "kind": "prefill", "size": 4}
    trace = write_lines(tmp_path / "t.jsonl", [header, submit])
    smaller = ["max_prefill_chunk_size=3"]
    for sides in (["--b-param", *smaller], ["--a-param", *smaller]):
        r = run_cli("diff", str(trace), "--b", REWORDED, *sides)
        assert r.returncode == 1, r.stderr.decode()
        assert "(no batch)" in r.stdout.decode()
    golden = tmp_path / "g.dump.jsonl"
    assert run_cli("replay", str(trace), "-o", str(golden)).returncode == 0
    r = run_cli("replay", str(trace), "-P", *smaller, "--golden", str(golden))
    assert r.returncode == 1, r.stderr.decode()
    assert "dump differs from golden" in r.stderr.decode()


# A policy that decides as decode-first (in other words, or with other limits), or not.
SIDES = [
    ("decode-first", []),
    (REWORDED, []),
    (REWORDED, ["-P", "max_prefill_chunk_size=3"]),
    ("decode-first", ["-P", "max_batch_tokens=9"]),
    ("fcfs", []),
]


@st.composite
def traffic(draw: st.DrawFn) -> list[dict[str, object]]:
    """Submits that are often refused (a size 0, a taken or repeated tid, a chunk over
    the limit, a wide decode), get_works, cancels and clears."""
    ops: list[dict[str, object]] = []
    tid = 0
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["submit"] * 5 + ["get_work"] * 3 + ["cancel", "clear"]))
        if op == "submit":
            sid = draw(st.integers(0, 3))
            tasks = []
            for _ in range(draw(st.integers(1, 3))):
                decode = draw(st.integers(0, 3)) == 0
                tid = draw(st.integers(0, 6)) if draw(st.booleans()) else tid + 1
                size = draw(st.integers(1, 2)) if decode else draw(st.integers(0, 5))
                kind = "decode" if decode else "prefill"
                tasks.append({"tid": tid, "sid": sid, "kind": kind, "size": size})
            ops.append({"op": "submit", "tasks": tasks})
        elif op == "cancel":
            ops.append({"op": "cancel", "sid": draw(st.integers(0, 3))})
        else:
            ops.append({"op": op})
    return ops


def _decisions(dump: Path) -> list[bytes]:
    """A dump's records with each rejection's words taken out, as exact JSON."""
    records = [orjson.loads(line) for line in dump.read_bytes().splitlines()]
    for r in records:
        if r.get("accepted") is False:
            del r["reason"]
    return [orjson.dumps(r) for r in records]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=traffic(), a=st.sampled_from(SIDES[:2]), b=st.sampled_from(SIDES[1:]))
def test_diff_golden_and_dumps_pass_exactly_when_the_decisions_agree(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[dict[str, object]],
    a: tuple[str, list[str]],
    b: tuple[str, list[str]],
) -> None:
    """The verdict of diff (of the trace, and of the two dumps) and of replay --golden is
    whether two plain replays' dumps are equal once each rejection's words are taken out."""
    tmp = tmp_path_factory.mktemp("d")
    params = {"max_batch_tokens": 10, "max_decode_sequences": 2, "max_prefill_chunk_size": 4}
    header = {"schedcli": 1, "params": params}
    trace = write_lines(tmp / "t.jsonl", [header, *ops])
    dumps = tmp / "a.dump.jsonl", tmp / "b.dump.jsonl"
    for (policy, params), dump in zip((a, b), dumps, strict=True):
        done = run_cli("replay", str(trace), "-p", policy, *params, "--drain", "-o", str(dump))
        assert done.returncode == 0, done.stderr.decode()
    agree = _decisions(dumps[0]) == _decisions(dumps[1])
    worded = agree and dumps[0].read_bytes() != dumps[1].read_bytes()
    event("the same decisions, in other words" if worded else f"the same decisions: {agree}")
    side_params = [
        *(["--a-param", p] for p in a[1][1::2]),
        *(["--b-param", p] for p in b[1][1::2]),
    ]
    flat = [word for pair in side_params for word in pair]
    by_trace = run_cli("diff", str(trace), "--a", a[0], "--b", b[0], *flat, "--drain")
    by_dumps = run_cli("diff", str(dumps[0]), str(dumps[1]))
    golden = run_cli("replay", str(trace), "-p", b[0], *b[1], "--drain", "--golden", str(dumps[0]))
    want = 0 if agree else 1
    assert (by_trace.returncode, by_dumps.returncode, golden.returncode) == (want,) * 3


def test_diff_refuses_a_trace_where_a_dump_belongs() -> None:
    r = run_cli(
        "diff",
        str(TRACES / "golden" / "rotation-fairness.dump.jsonl"),
        str(TRACES / "rotation-fairness.jsonl"),
    )
    assert r.returncode == 2
    assert (
        b"this is an event trace (replay, validate, stats, diff, report, check take it), not a dump"
        in r.stderr
    )


def test_validate_names_the_commands_that_take_a_dump_given_in_place_of_a_trace() -> None:
    golden = TRACES / "golden" / "rotation-fairness.dump.jsonl"
    r = run_cli("validate", str(golden))
    assert r.returncode == 2
    assert b"this is a replay dump (stats, diff, report take it; a golden is one too)" in r.stderr


def test_the_formats_layer_says_what_a_file_is_without_naming_commands() -> None:
    from schedcli.formats.dump import read_dump
    from schedcli.model.errors import WrongKind

    with pytest.raises(WrongKind) as caught:
        list(read_dump(str(TRACES / "rotation-fairness.jsonl")))
    assert caught.value.found == "trace"
    assert str(caught.value).endswith(":1: this is an event trace, not a dump")


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
def test_every_policy_replays_every_example_without_breaking_the_contract(name: str) -> None:
    for trace in sorted(TRACES.glob("*.jsonl")):
        r = run_cli("replay", str(trace), "-p", name, "--drain", "-o", os.devnull)
        assert r.returncode == 0, (trace, r.stderr.decode())


def test_entry_point_registers_a_request_level_policy_by_name(tmp_path: Path) -> None:
    # One registry for both levels: a RequestScheduler plugin is found, listed and run
    # by its name as a task-level one is.
    env = make_dist(tmp_path, {"toy": "tests.doubles.requests:ToyRequests"})
    listed = run_cli("policies", "--format", "json", env=env)
    assert listed.returncode == 0, listed.stderr.decode()
    levels = {p["name"]: p["level"] for p in orjson.loads(listed.stdout)}
    assert levels["toy"] == "request" and levels["decode-first"] == "task"
    work = tmp_path / "w.jsonl"
    work.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n')
    r = run_cli("simulate", str(work), "-p", "toy", "-f", "json", env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert orjson.loads(r.stdout)["finished"] == 1
    wrong = run_cli("replay", str(TRACES / "deferral-order.jsonl"), "-p", "toy", env=env)
    assert wrong.returncode == 2 and b"'toy' is request-level" in wrong.stderr


def test_steps_to_drain_is_the_step_after_the_last_batch_and_na_where_work_is_left(
    tmp_path: Path,
) -> None:
    """Found by a new user: a trace's trailing empty get_work calls (recorded under another
    version that took longer) made both sides read as draining in the same number of steps."""
    head = {"schedcli": 1, "policy": "fcfs"}
    head["params"] = {"max_batch_tokens": 16, "max_num_seqs": 2, "max_prefill_chunk_size": 8}
    ops = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
        {"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 8},
        {"op": "get_work"},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [head, *ops, *ops[2:] * 3]))
    r = run_cli("diff", str(trace), "--b", "fcfs", "--b-param", "max_num_seqs=1", "-f", "json")
    data = orjson.loads(r.stdout)
    assert data["a"]["metrics"]["steps_to_drain"] == 1  # four get_work calls, one ran work
    assert data["b"]["metrics"]["steps_to_drain"] == 2
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [head, *ops]))
    r = run_cli("diff", str(short), "--b", "fcfs", "--b-param", "max_num_seqs=1", "-f", "json")
    data = orjson.loads(r.stdout)
    assert data["b"]["metrics"]["steps_to_drain"] is None  # task 2 is still queued


def _dump(tmp_path: Path, trace: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    r = run_cli("replay", str(trace), "-f", "jsonl", "-o", str(out), *args)
    assert r.returncode in (0, 3), r.stderr
    return out


def test_a_cancel_record_compares_json_types(tmp_path: Path) -> None:
    dump = tmp_path / "a.jsonl"
    run_cli("replay", str(TRACES / "cancel-and-rejoin.jsonl"), "-f", "jsonl", "-o", str(dump))
    other = tmp_path / "b.jsonl"
    text = dump.read_text()
    cancel = next(x for x in text.splitlines() if '"op":"cancel"' in x)
    record = json.loads(cancel)
    record["line"] = float(record["line"])
    other.write_text(text.replace(cancel, json.dumps(record, separators=(",", ":"))))
    assert run_cli("diff", str(dump), str(other)).returncode == 1


def test_diff_and_golden_agree_on_a_dump_cut_short(tmp_path: Path) -> None:
    full = _dump(tmp_path, EXAMPLES[0], "full.jsonl")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:-1]))
    diffed = run_cli("diff", str(full), str(cut), "--allow-incomplete")
    golden = run_cli("replay", str(EXAMPLES[0]), "--golden", str(cut))
    assert diffed.returncode == 1  # the end record differs, and diff says so
    assert golden.returncode == 2  # a golden must be complete
    assert b"incomplete dump (no end record)" in golden.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_diff_and_golden_give_the_same_verdict_on_every_pair(example: Path, tmp_path: Path) -> None:
    mine = _dump(tmp_path, example, "mine.jsonl")
    for other_policy in ("fcfs", "fair"):
        other = _dump(tmp_path, example, f"{other_policy}.jsonl", "-p", other_policy)
        diffed = run_cli("diff", str(other), str(mine))
        golden = run_cli("replay", str(example), "--golden", str(other))
        assert diffed.returncode == golden.returncode, (diffed.stdout, golden.stderr)


def test_every_differing_record_is_shown_with_its_field_and_both_values(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 200},
            {"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 200},
            {"op": "cancel", "sid": 2},
            {"op": "get_work"},
        ],
    )
    a = _dump(tmp_path, trace, "a.jsonl")
    b = _dump(tmp_path, trace, "b.jsonl", "-P", "max_prefill_chunk_size=150")
    r = run_cli("diff", str(a), str(b))
    assert r.returncode == 1
    out = r.stdout.decode()
    assert "records that differ" in out
    assert "submit (line 1, only in B):" in out and "submit (line 2, only in B):" in out
    assert "cancel (line 3):" in out and "dropped: A [2]  B []" in out
    assert "end:" in out and "rejected: A 0  B 2" in out
    assert "{'" not in out  # no Python dicts
    data = orjson.loads(run_cli("diff", str(a), str(b), "-f", "json").stdout)
    kinds = [x["kind"] for x in data["records_differing"]]
    assert kinds == ["submit", "submit", "cancel", "end"]


def test_a_piped_table_is_not_cut_to_80_columns(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    r = subprocess.run(
        [sys.executable, "-m", "schedcli", "policies"], capture_output=True, env=env, cwd=ROOT
    )
    assert r.returncode == 0
    assert "…" not in r.stdout.decode()
    assert max(len(x) for x in r.stdout.decode().splitlines()) > 80
