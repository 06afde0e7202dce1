"""One engine for both levels (#40): ``open_replay`` opens either level and every command
that replays a trace runs the same code over it. Each test is a drift the two copies made
(it fails where the request level had its own path), run at both levels where it can."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from schedcli.engine.run import OpenTrace, open_replay
from tests.conftest import Cli

TOY = "tests.plugin_policies:ToyRequests"
REQUEST_HEADER = {"schedcli": 1, "level": "request", "policy": TOY, "params": {}}


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return path


def _request_trace(tmp_path: Path, expect_first: dict[str, object] | None = None) -> Path:
    """Three requests, three steps; the first step's expect as given (else none)."""
    step: dict[str, object] = {"op": "step"}
    if expect_first is not None:
        step["expect"] = expect_first
    return _write(
        tmp_path / "r.jsonl",
        [
            REQUEST_HEADER,
            {"op": "arrive", "rid": "a", "prompt_tokens": 8, "max_tokens": 2},
            {"op": "arrive", "rid": "b", "prompt_tokens": 8, "max_tokens": 2},
            step,
            {"op": "step"},
            {"op": "step"},
        ],
    )


@pytest.fixture(params=["task", "request"])
def level_trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A trace of each level, three steps, an expect on its first step only."""
    if request.param == "task":
        return _write(
            tmp_path / "t.jsonl",
            [
                {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 3},
                {"op": "get_work", "expect": [1]},
                {"op": "submit", "tid": 2, "sid": 1, "kind": "decode", "size": 1},
                {"op": "get_work"},
                {"op": "get_work"},
            ],
        )
    first = {"batch": [["a", 8], ["b", 8]], "preempted": [], "finished": []}
    return _request_trace(tmp_path, first)


def test_open_replay_opens_either_level_by_its_header(level_trace: Path) -> None:
    with open_replay(str(level_trace), note=lambda _: None) as opened:
        assert (opened.level == "task") == isinstance(opened, OpenTrace)
        assert opened.level == ("request" if level_trace.name == "r.jsonl" else "task")
        totals = opened.run(opened.replayer(lambda _: None))
        assert totals.steps == 3


def test_a_filter_that_selects_nothing_is_noted_at_both_levels(cli: Cli, level_trace: Path) -> None:
    r = cli("replay", level_trace, "-f", "jsonl", "--steps", "100:")
    assert r.code == 0
    assert "note: --steps selected nothing" in r.stderr


def test_a_request_step_that_differs_says_what_was_checked(cli: Cli, tmp_path: Path) -> None:
    trace = _request_trace(tmp_path, {"batch": [["b", 8]], "preempted": [], "finished": []})
    r = cli("replay", trace, "--check", "-o", "/dev/null")
    assert r.code == 1
    assert f"{trace}: checked 1 of 1 steps, the first difference included" in r.stderr


def test_require_all_names_the_unit_at_each_level(cli: Cli, level_trace: Path) -> None:
    r = cli("replay", level_trace, "--check", "--require-all", "-o", "/dev/null")
    assert r.code == 1
    unit = "recorded calls" if level_trace.name == "r.jsonl" else "batches"
    assert f"2 of 3 {unit} record no expect (--require-all)" in r.stderr


def test_stats_and_a_sweep_of_a_trace_measure_alike_at_both_levels(
    cli: Cli, level_trace: Path
) -> None:
    """``stats`` and a sweep's trace point are one function (``replay_metrics``)."""
    from schedcli.engine.run import replay_metrics

    r = cli("stats", level_trace, "-f", "json")
    assert r.code == 0, r.stderr
    summary, _ = replay_metrics(str(level_trace), None, {})
    assert orjson.loads(r.stdout) == orjson.loads(orjson.dumps(summary))


def test_header_params_apply_to_another_request_policy_as_at_task_level(
    cli: Cli, tmp_path: Path
) -> None:
    """The header's params the chosen policy declares apply; the rest are noted, at both
    levels (the request level dropped them all, silently)."""
    header = {**REQUEST_HEADER, "policy": "vllm", "params": {"max_num_seqs": 1, "block_size": 16}}
    trace = _write(
        tmp_path / "v.jsonl",
        [
            header,
            {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 1},
            {"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 1},
        ],
    )
    r = cli("replay", trace, "-p", TOY, "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert "does not take the trace header's block_size; not applied" in r.stderr
    first = orjson.loads(r.lines[0])
    assert [entry["sid"] for entry in first["batch"]] == ["a"]  # max_num_seqs 1 applied


def test_simulate_writes_every_cost_term_in_the_trace_header(cli: Cli, tmp_path: Path) -> None:
    cost = tmp_path / "cost.json"
    cost.write_text('{"a": 0.001, "b": 0.00002, "c": 0.0001, "d": 0.000003}')
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 30, "output_tokens": 2}\n')
    for policy in ("decode-first", TOY):
        out = tmp_path / f"{policy.replace(':', '_')}.jsonl"
        r = cli("simulate", workload, "-p", policy, "--cost", cost, "-o", out, "-f", "json")
        assert r.code == 0, r.stderr
        header = orjson.loads(out.read_bytes().splitlines()[0])
        assert header["meta"]["cost_model"] == {"a": 0.001, "b": 2e-05, "c": 0.0001, "d": 3e-06}


def test_diff_of_a_trace_with_itself_is_identical_and_measures_as_stats(
    cli: Cli, level_trace: Path
) -> None:
    """``diff`` runs the same opened trace twice in lockstep, at either level: a side's
    summary is what ``stats`` says of the trace under that configuration."""
    r = cli("diff", level_trace, "-f", "json")
    assert r.code == 0, r.stderr
    result = orjson.loads(r.stdout)
    stats = orjson.loads(cli("stats", level_trace, "-f", "json").stdout)
    assert result["identical"] is True
    for side in (result["a"]["metrics"], result["b"]["metrics"]):
        assert {k: v for k, v in stats.items() if k in side} == side


def test_diff_finds_where_two_request_configurations_part(cli: Cli, tmp_path: Path) -> None:
    trace = _request_trace(tmp_path)
    r = cli("diff", trace, "--b-param", "max_num_seqs=1", "-f", "json")
    assert r.code == 1, r.stderr
    assert orjson.loads(r.stdout)["first_difference"]["step"] == 0


def test_shrink_until_diff_takes_a_request_level_trace(cli: Cli, tmp_path: Path) -> None:
    """``diff`` is written once, so ``shrink --until diff:`` takes both levels: the
    smaller trace still parts ways under the two configurations."""
    lines: list[dict[str, object]] = [REQUEST_HEADER]
    for i in range(12):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 6, "max_tokens": 2})
        lines.append({"op": "step"})
    trace = _write(tmp_path / "big.jsonl", lines)
    other = f"diff:{TOY}"
    out = tmp_path / "small.jsonl"
    r = cli("shrink", trace, "-P", "max_num_seqs=1", "--until", other, "-o", out)
    assert r.code == 0, r.stderr
    assert len(out.read_text().splitlines()) < len(lines)
    again = cli("diff", out, "--a-param", "max_num_seqs=1", "--b", TOY, "-f", "json")
    assert again.code == 1, again.stderr
