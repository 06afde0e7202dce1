"""One engine for both levels (#40): ``open_replay`` opens either level and every command
that replays a trace runs the same code over it. Each test is a drift the two copies made
(it fails where the request level had its own path), run at both levels where it can."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from schedcli.engine.findings import CountingFindings
from schedcli.engine.levels.table import LEVELS
from schedcli.engine.levels.task import OpenTrace
from schedcli.engine.run import open_replay
from tests.conftest import Cli
from tests.helpers import REQUEST_HEADER, TOY, request_trace, write_lines


def test_open_replay_opens_either_level_by_its_header(level_trace: Path) -> None:
    with open_replay(str(level_trace), note=lambda _: None) as opened:
        assert (opened.level.name == "task") == isinstance(opened, OpenTrace)
        assert opened.level is LEVELS["request" if level_trace.name == "r.jsonl" else "task"]
        totals = opened.replayer(lambda _: None).replay()
        assert totals.steps == 3


def test_a_filter_that_selects_nothing_is_noted_at_both_levels(cli: Cli, level_trace: Path) -> None:
    r = cli("replay", level_trace, "-f", "jsonl", "--steps", "100:")
    assert r.code == 0
    assert "note: --steps selected nothing" in r.stderr


def test_a_request_step_that_differs_says_what_was_checked(cli: Cli, tmp_path: Path) -> None:
    trace = request_trace(tmp_path, {"batch": [["b", 8]], "preempted": [], "finished": []})
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
    """``stats`` and a sweep's trace point are one function (``replay_metrics``); stats
    adds what preemption costs, with its lists (a sweep's points do not)."""
    from schedcli.engine.run import replay_metrics

    for asked, watch in (([], None), (["--findings"], CountingFindings())):
        r = cli("stats", level_trace, *asked, "-f", "json")
        assert r.code == 0, r.stderr
        summary, _ = replay_metrics(
            str(level_trace), None, {}, measure_preemption=True, watch=watch
        )
        assert orjson.loads(r.stdout) == orjson.loads(orjson.dumps(summary))


def test_header_params_apply_to_another_request_policy_as_at_task_level(
    cli: Cli, tmp_path: Path
) -> None:
    """The header's params the chosen policy declares apply; the rest are noted, at both
    levels (the request level dropped them all, silently)."""
    header = {**REQUEST_HEADER, "policy": "vllm", "params": {"max_num_seqs": 1, "block_size": 16}}
    trace = write_lines(
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
    trace = request_trace(tmp_path)
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
    trace = write_lines(tmp_path / "big.jsonl", lines)
    other = f"diff:{TOY}"
    out = tmp_path / "small.jsonl"
    r = cli("shrink", trace, "-P", "max_num_seqs=1", "--until", other, "-o", out)
    assert r.code == 0, r.stderr
    assert len(out.read_text().splitlines()) < len(lines)
    again = cli("diff", out, "--a-param", "max_num_seqs=1", "--b", TOY, "-f", "json")
    assert again.code == 1, again.stderr


def test_shrink_until_diff_takes_the_other_sides_parameters(cli: Cli, tmp_path: Path) -> None:
    """``--b-param`` is diff:POLICY's side B, as ``diff --b-param``: one policy under two
    configurations, at either level."""
    lines: list[dict[str, object]] = [REQUEST_HEADER]
    for i in range(12):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 6, "max_tokens": 2})
        lines.append({"op": "step"})
    trace = write_lines(tmp_path / "big.jsonl", lines)
    out = tmp_path / "small.jsonl"
    until = ["--until", f"diff:{TOY}", "--b-param", "max_num_seqs=1"]
    r = cli("shrink", trace, *until, "-o", out)
    assert r.code == 0, r.stderr
    assert len(out.read_text().splitlines()) < len(lines)
    again = cli("diff", out, "--b", TOY, "--b-param", "max_num_seqs=1", "-f", "json")
    assert again.code == 1, again.stderr
    r = cli("shrink", trace, "--until", "check", "--b-param", "max_num_seqs=1", "-o", out)
    assert r.code == 2 and "--b-param is for --until diff:POLICY" in r.stderr


# Every command that reads a trace, at both levels, in the default run (no vLLM): the
# request level through tests.doubles:ToyRequests. (cmd, args, exit code)
COMMANDS = [
    ("replay", ["-f", "jsonl"], 0),
    ("replay", ["-f", "table"], 0),
    ("replay", ["--check", "-o", "/dev/null"], 0),
    ("replay", ["--check", "--require-all", "-o", "/dev/null"], 1),
    ("replay", ["--steps", "1:2", "-f", "jsonl"], 0),
    ("replay", ["--golden", "{tmp}/g.jsonl", "--update-golden", "-o", "/dev/null"], 0),
    ("replay", ["--perfetto", "{tmp}/p.json", "-o", "/dev/null"], 0),
    ("validate", [], 0),
    ("stats", ["-f", "json"], 0),
    ("diff", ["-f", "json"], 0),
    ("explain", ["--step", "1", "-f", "json"], 0),
    ("explain", ["--step", "9"], 2),
    ("findings", ["-f", "json"], 0),
    ("findings", ["--fail-on", "starvation"], 0),
    ("findings", ["--fail-on", "nonsense"], 2),
    ("report", ["-o", "{tmp}/r.html"], 0),
    ("shrink", ["--until", "cmd:false", "-o", "{tmp}/s.jsonl"], 0),
    ("sweep", ["-p", "{policy}", "-j", "1", "-o", "{tmp}/sw.jsonl"], 0),
]


@pytest.mark.parametrize(("command", "args", "code"), COMMANDS, ids=lambda v: str(v))
def test_each_command_takes_both_levels(
    cli: Cli, level_trace: Path, tmp_path: Path, command: str, args: list[str], code: int
) -> None:
    policy = TOY if level_trace.name == "r.jsonl" else "decode-first"
    given = [a.replace("{tmp}", str(tmp_path)).replace("{policy}", policy) for a in args]
    r = cli(command, level_trace, *given)
    assert r.code == code, r.stderr


def test_check_and_its_golden_take_both_levels(cli: Cli, level_trace: Path) -> None:
    folder = level_trace.parent
    assert cli("check", folder, "--update").code == 0
    r = cli("check", folder, "--strict")
    assert r.code == 0, r.stderr
    assert b"1 trace: 1 passed" in r.stdout


@pytest.mark.parametrize(
    "command", [["validate"], ["replay", "-f", "jsonl"], ["stats", "-f", "json"]]
)
def test_a_trace_on_stdin_reads_as_the_file_does_at_both_levels(
    cli: Cli, level_trace: Path, command: list[str]
) -> None:
    from_file = cli(*command, level_trace)
    from_stdin = cli(*command, "-", input=level_trace.read_bytes())
    assert (from_stdin.code, from_stdin.stdout) == (from_file.code, from_file.stdout)
    assert from_file.code == 0, from_file.stderr


@pytest.mark.parametrize("policy", ["decode-first", "fair", TOY])
def test_a_simulated_trace_replays_exactly_at_its_level(
    cli: Cli, tmp_path: Path, policy: str
) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            f'{{"sid": {i}, "arrival": {i * 0.01}, "prompt_tokens": {20 + 7 * i}, '
            f'"output_tokens": {1 + i % 4}}}\n'
            for i in range(12)
        )
    )
    trace = tmp_path / "sim.jsonl"
    r = cli("simulate", workload, "-p", policy, "-o", trace, "-f", "json")
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["finished"] == 12
    again = cli("replay", trace, "--check", "--require-all", "-o", "/dev/null")
    assert again.code == 0, again.stderr


def test_the_pytest_plugin_takes_both_levels(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, level_trace: Path
) -> None:
    from tests.helpers import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the request level's tests.doubles policy
    suite = pytester.path / "suite"
    suite.mkdir()
    if level_trace.name == "r.jsonl":  # the toy has no name in that process: the folder's
        (pytester.path / "pyproject.toml").write_text(
            f'[tool.schedcli.folders."suite"]\npolicy = "{TOY}"\n'
        )
    (suite / level_trace.name).write_bytes(level_trace.read_bytes())
    result = pytester.runpytest_subprocess(
        "--schedcli=suite", "--schedcli-update", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--schedcli=suite", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    golden = next((suite / "golden").iterdir())
    golden.write_bytes(golden.read_bytes().replace(b'"step":0', b'"step":7', 1))
    result = pytester.runpytest_subprocess("--schedcli=suite", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
