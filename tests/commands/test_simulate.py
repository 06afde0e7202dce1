"""`schedcli simulate` and `schedcli stats`: invariants, reproducibility, a real-trace golden."""

from __future__ import annotations

import builtins
import gzip
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import BUILTIN_POLICIES, build_policy
from schedcli.engine.cost import CostModel
from schedcli.engine.simulate import simulate
from schedcli.formats.workload import Request
from schedcli.formats.writer import TraceWriter
from tests.helpers import REAL, ROOT, UPDATE_GOLDENS, needs_real, refused, run_cli, run_process

GOLDEN = ROOT / "tests" / "golden" / "azure-conv-60.json"
AZURE_CONV = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"

requests_strategy = st.lists(
    st.tuples(
        st.floats(0, 2, allow_nan=False),  # gap to the previous arrival
        st.integers(1, 700),
        st.integers(1, 40),
        st.one_of(st.none(), st.floats(0, 0.5, allow_nan=False)),
    ),
    min_size=1,
    max_size=25,
)


def workload(spec: list[tuple[float, int, int, float | None]]) -> list[Request]:
    t = 0.0
    out = []
    for i, (gap, prompt, output, cancel) in enumerate(spec):
        t += gap
        out.append(Request(f"r{i}", t, prompt, output, cancel, line=i + 1))
    return out


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=requests_strategy)
def test_every_request_finishes_or_is_cancelled_and_tokens_add_up(
    name: str, spec: list[tuple[float, int, int, float | None]]
) -> None:
    reqs = workload(spec)
    policy = build_policy(name, {"max_batch_tokens": 300, "max_prefill_chunk_size": 128})
    out = io.BytesIO()
    result = simulate(
        reqs,
        policy,
        policy_name=name,
        params={},
        chunk_size=128,
        cost=CostModel(),
        trace=TraceWriter(out),
    )
    events = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert result.requests == len(reqs)
    assert result.finished + result.cancelled == len(reqs)
    assert result.rejected == 0
    assert not policy.has_work()
    uncancelled = [r for r in reqs if r.cancel_after is None]
    assert result.finished >= len(uncancelled)
    assert result.prefill_tokens <= sum(r.prompt_tokens for r in reqs)
    if result.cancelled == 0:
        assert result.prefill_tokens == sum(r.prompt_tokens for r in reqs)
        assert result.output_tokens == sum(r.output_tokens for r in reqs)
        assert result.decode_tokens == sum(r.output_tokens - 1 for r in reqs)
    assert result.ttft.count <= len(reqs) and result.e2e.count == result.finished
    # Every dispatched task was submitted first, and get_work records every batch.
    submitted = set()
    for e in events:
        if e["op"] == "submit":
            for t in e.get("tasks", [e]):  # type: ignore[attr-defined]
                submitted.add(t["tid"])
        elif e["op"] == "get_work":
            assert set(e["expect"]) <= submitted  # type: ignore[arg-type]


def write_workload(path: Path, reqs: list[Request]) -> None:
    lines = []
    for r in reqs:
        obj: dict[str, object] = {
            "sid": r.sid,
            "arrival": r.arrival,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
        }
        if r.cancel_after is not None:
            obj["cancel_after"] = r.cancel_after
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
def test_replay_check_reproduces_the_simulated_trace_exactly(tmp_path: Path, name: str) -> None:
    reqs = workload(
        [
            (0.01 * (i % 7), 50 + 37 * i, 1 + (i * 5) % 23, 0.08 if i % 9 == 4 else None)
            for i in range(40)
        ]
    )
    w = tmp_path / "w.jsonl"
    write_workload(w, reqs)
    trace = tmp_path / "t.jsonl"
    r = run_cli("simulate", str(w), "-p", name, "-o", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    summary = json.loads(r.stdout)
    assert summary["finished"] + summary["cancelled"] == 40
    check = run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "dump.jsonl"))
    assert check.returncode == 0, check.stderr.decode()
    again = tmp_path / "t2.jsonl"
    run_cli(
        "simulate",
        str(w),
        "-p",
        name,
        "-o",
        str(again),
        "-f",
        "json",
        env={"PYTHONHASHSEED": "123"},
    )
    assert again.read_bytes() == trace.read_bytes()


def test_cost_model_and_slo_options_shape_the_metrics(tmp_path: Path) -> None:
    reqs = workload([(0.0, 300, 20, None)] * 3)
    w = tmp_path / "w.jsonl"
    write_workload(w, reqs)
    r = run_cli(
        "simulate",
        str(w),
        "-f",
        "json",
        "--cost-a",
        "0.01",
        "--cost-b",
        "0",
        "--cost-c",
        "0",
        "--slo-ttft",
        "0.025",
        "--slo-tpot",
        "1",
    )
    s = json.loads(r.stdout)
    assert s["cost_model"] == {"a": 0.01, "b": 0.0, "c": 0.0}
    # 900 prompt tokens in 256-token chunks at 544 per batch: two steps to finish all prompts.
    assert s["ttft"]["p50"] == pytest.approx(0.02)
    assert s["tpot"]["p50"] == pytest.approx(0.01)
    assert s["goodput"]["requests_meeting_slo"] == 3
    assert s["queue_delay"]["count"] == 3


def test_idle_time_jumps_to_the_next_arrival(tmp_path: Path) -> None:
    reqs = [Request("a", 0.0, 10, 2), Request("b", 100.0, 10, 2)]
    result = simulate(
        reqs,
        build_policy("decode-first"),
        policy_name="decode-first",
        params={},
        chunk_size=256,
        cost=CostModel(0.01, 0, 0),
    )
    assert result.steps == 4
    assert result.end == pytest.approx(100.02)
    assert list(result.ttft.values) == pytest.approx([0.01, 0.01])


def test_table_output_and_metrics_file(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    write_workload(w, workload([(0.1, 400, 10, None)] * 5))
    metrics = tmp_path / "m.json"
    r = run_cli("simulate", str(w), "--metrics", str(metrics))
    assert r.returncode == 0
    out = r.stdout.decode()
    for label in (
        "queue delay",
        "time to first token",
        "time per output token",
        "end-to-end latency",
        "throughput",
        "Jain's fairness",
    ):
        assert label in out
    assert json.loads(metrics.read_text())["requests"] == 5


def test_bad_workload_line_is_file_line_exit_2(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text(
        '{"sid": 1, "arrival": 0, "prompt_tokens": 5, "output_tokens": 1}\n'
        '{"sid": 2, "arrival": 1, "prompt_tokens": 0, "output_tokens": 1}\n'
    )
    r = run_cli("simulate", str(w))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{w}:2: prompt_tokens must be between 1 and 2,097,152")
    w.write_text('{"sid": 1, "arival": 0, "prompt_tokens": 5, "output_tokens": 1}\n')
    r = run_cli("simulate", str(w))
    assert b"did you mean 'arrival'" in r.stderr


@needs_real
def test_small_azure_slice_matches_its_golden(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    assert (
        run_cli("convert", "auto", str(AZURE_CONV), "--limit", "60", "-o", str(w)).returncode == 0
    )
    trace = tmp_path / "t.jsonl"
    r = run_cli("simulate", str(w), "-o", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    got = {
        "metrics": json.loads(r.stdout),
        "trace_sha256": hashlib.sha256(
            trace.read_bytes().replace(str(w).encode(), b"WORKLOAD")
        ).hexdigest(),
        "trace_lines": trace.read_bytes().count(b"\n"),
    }
    if UPDATE_GOLDENS:  # pragma: no cover - a deliberate refresh
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert GOLDEN.is_file(), "missing golden: rerun with SCHEDCLI_UPDATE_GOLDEN=1"
    assert got == json.loads(GOLDEN.read_text())


def test_stats_on_a_trace_and_on_its_dump(tmp_path: Path) -> None:
    trace = ROOT / "traces" / "cancel-and-rejoin.jsonl"
    r = run_cli("stats", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    s = json.loads(r.stdout)
    assert s["dispatched"] == 4 and s["cancelled"] == 3 and s["rejected"] == 0
    assert s["mean_wait_steps"] is not None and s["jain_fairness"] is not None
    dump = ROOT / "traces" / "golden" / "cancel-and-rejoin.dump.jsonl"
    d = json.loads(run_cli("stats", str(dump), "-f", "json").stdout)
    assert d["dispatched"] == 4 and d["cancelled"] == 3
    assert d["mean_wait_steps"] is None
    assert d["jain_fairness"] == s["jain_fairness"]
    table = run_cli("stats", str(ROOT / "traces" / "rejections.jsonl")).stdout.decode()
    assert "rejected submits" in table and "6" in table


def test_stats_reads_a_trace_or_a_dump_from_a_pipe_as_from_its_file() -> None:
    # A real process's stdin is a pipe: stats tells a dump from a trace by its first line
    # and reads on from there (a dump on stdin was refused as 'not a trace').
    trace = ROOT / "traces" / "cancel-and-rejoin.jsonl"
    dump = ROOT / "traces" / "golden" / "cancel-and-rejoin.dump.jsonl"
    for path in (trace, dump):
        from_file = run_cli("stats", str(path), "-f", "json")
        piped = run_process("stats", "-", "-f", "json", input=path.read_bytes())
        assert (piped.returncode, piped.stdout) == (0, from_file.stdout), piped.stderr
        gzipped = run_process("stats", "-", "-f", "json", input=gzip.compress(path.read_bytes()))
        assert (gzipped.returncode, gzipped.stdout) == (0, from_file.stdout), gzipped.stderr


@pytest.mark.parametrize("name", ["cancel-and-rejoin.jsonl", "golden/cancel-and-rejoin.dump.jsonl"])
def test_stats_opens_its_input_once(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(ROOT / "traces" / name)
    real = builtins.open
    opened: list[object] = []

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        if file == path:
            opened.append(file)
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    r = run_cli("stats", path, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert len(opened) == 1


ONE_REQUEST = '{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n'


@pytest.fixture
def one_request(tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    path.write_text(ONE_REQUEST)
    return path


def test_a_long_prompt_is_submitted_a_window_at_a_time_and_replays(tmp_path: Path) -> None:
    w, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    w.write_text('{"sid":0,"arrival":0,"prompt_tokens":20000,"output_tokens":2}\n')
    r = run_cli("simulate", str(w), "--chunk-size", "64", "-o", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    groups = [json.loads(x)["tasks"] for x in trace.read_text().splitlines() if '"tasks"' in x]
    assert [len(g) for g in groups] == [64, 64, 64, 64, 57]  # 313 chunks, 64 at a time
    assert sum(t["size"] for g in groups for t in g) == 20000
    assert run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "d")).returncode == 0


def test_a_chunk_size_beyond_any_prompt_is_refused(one_request: Path) -> None:
    r = run_cli("simulate", str(one_request), "--chunk-size", "18446744073709551616")
    refused(r, "--chunk-size must be an integer from 1 to 2097152")


@pytest.mark.parametrize("option", ["--slo-ttft", "--slo-tpot"])
def test_an_slo_of_nan_is_refused(one_request: Path, option: str) -> None:
    refused(run_cli("simulate", str(one_request), option, "nan"), f"{option} must be a number > 0")


def test_simulate_stopped_by_a_contract_break_keeps_its_trace_marked_partial(
    tmp_path: Path,
) -> None:
    workload, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    workload.write_text(ONE_REQUEST)
    plugin = "tests.plugin_policies:NewestFirst"
    r = run_cli("simulate", str(workload), "-p", plugin, "--chunk-size", "16", "-o", str(trace))
    assert r.returncode == 3
    assert f"note: the run so far is in {trace} (the trace marked partial)" in r.stderr.decode()
    lines = [orjson.loads(x) for x in trace.read_bytes().splitlines()]
    assert lines[0]["policy"] == plugin  # a reference the replay resolves, given with -p
    assert "broke the Scheduler contract" in lines[-1]["partial"]["reason"]
    assert run_cli("replay", str(trace), "-p", plugin, "-o", str(tmp_path / "d")).returncode == 3
    small = tmp_path / "small.jsonl"
    r = run_cli("shrink", str(trace), "-p", plugin, "--until", "contract", "-o", str(small))
    assert r.returncode == 0, r.stderr
    partial = run_cli("validate", str(trace), "-p", plugin)
    assert partial.returncode == 2 and b"partial" in partial.stderr  # said, not passed
    assert run_cli("validate", str(trace), "-p", plugin, "--allow-incomplete").returncode == 0


def test_simulate_terminated_keeps_whole_lines_and_a_partial_marker(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    workload, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    workload.write_text(
        "".join(
            json.dumps({"sid": i, "arrival": i * 0.001, "prompt_tokens": 900, "output_tokens": 900})
            + "\n"
            for i in range(3000)
        )
    )
    argv = [sys.executable, "-m", "schedcli", "simulate", str(workload), "-o", str(trace)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = trace.read_bytes().splitlines()
    assert len(lines) > 2
    assert orjson.loads(lines[-1]) == {"partial": {"reason": "terminated"}}
    r = run_cli("replay", str(trace), "--check", "--allow-incomplete", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr


def test_simulate_notes_rejections_once_per_reason_not_per_chunk_size(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            json.dumps(
                {"sid": i, "arrival": i * 0.01, "prompt_tokens": 300 + i, "output_tokens": 2}
            )
            + "\n"
            for i in range(5)
        )
    )
    r = run_cli("simulate", str(workload), "-p", "fcfs", "--chunk-size", "1000")
    assert r.returncode == 0
    note = r.stderr.decode()
    assert "5 of 5 requests were rejected" in note
    assert "  5: prefill chunk of N tokens exceeds max_prefill_chunk_size 256" in note
    assert note.count("exceeds") == 1


def test_patience_of_requests_already_finished_is_not_kept() -> None:
    """Memory follows the requests in flight: a finished request's cancel deadline, hours
    away, is not held until then (and no request is cancelled that finished)."""
    from schedcli.engine.results import SimResult
    from schedcli.engine.simulate import TaskRunner, run

    reqs = [Request(i, i * 0.1, 10, 2, cancel_after=3600.0, line=i + 1) for i in range(3000)]
    policy = build_policy("decode-first")
    result = SimResult("decode-first", {}, CostModel(), 256, budget=policy.token_budget)
    runner = TaskRunner(policy, result, "decode-first", None, None)
    run(reqs, runner, CostModel())
    assert result.finished == 3000 and result.cancelled == 0
    assert len(runner.deadlines) <= 2 * len(runner.live) + 64


FINDINGS = ROOT / "docs" / "examples" / "findings"


def _findings_examples() -> list[object]:
    """Each example with its findings; those that run vLLM need its extra."""
    examples = []
    for listed in sorted(FINDINGS.glob("*.findings.jsonl")):
        trace = listed.with_name(listed.name.replace(".findings", ""))
        vllm = orjson.loads(trace.read_bytes().splitlines()[0]).get("policy") == "vllm"
        marks = [pytest.mark.needs("vllm")] if vllm else []
        examples.append(pytest.param(trace, listed, marks=marks, id=trace.stem))
    return examples


@pytest.mark.parametrize(("trace", "example"), _findings_examples())
def test_stats_counts_a_trace_s_findings_by_kind_as_findings_lists_them(
    trace: Path, example: Path
) -> None:
    r = run_cli("stats", str(trace), "--findings", "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    listed = [orjson.loads(line)["kind"] for line in example.read_bytes().splitlines()]
    got = orjson.loads(r.stdout)["findings"]
    assert got == {kind: listed.count(kind) for kind in got}, trace.name
    assert set(got) >= set(listed) and sum(got.values()) == len(listed) > 0


def test_stats_words_its_findings_in_its_table() -> None:
    table = run_cli("stats", str(FINDINGS / "hol_blocking.jsonl"), "--findings").stdout.decode()
    assert "findings" in table and "1 (hol_blocking 1)" in table


def test_stats_counts_findings_only_when_asked_since_explaining_every_step_costs() -> None:
    trace = FINDINGS / "hol_blocking.jsonl"
    plain = orjson.loads(run_cli("stats", str(trace), "-f", "json").stdout)
    asked = orjson.loads(run_cli("stats", str(trace), "--findings", "-f", "json").stdout)
    assert "findings" not in plain and asked.pop("findings")["hol_blocking"] == 1
    assert asked == plain  # the same replay's metrics, findings or not


def test_stats_findings_of_a_dump_is_refused_rather_than_a_zero() -> None:
    dump = ROOT / "traces" / "golden" / "cancel-and-rejoin.dump.jsonl"
    r = run_cli("stats", str(dump), "--findings", "-f", "json")
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode() == (
        "schedcli: --findings needs a trace: a dump has no queue and no reasons to find them in\n"
    )
    assert "findings" not in orjson.loads(run_cli("stats", str(dump), "-f", "json").stdout)


def test_stats_with_findings_is_byte_identical_compiled_and_pure() -> None:
    args = ["stats", str(FINDINGS / "starvation.jsonl"), "--findings", "-f", "json"]
    fast = run_process(*args, env={"PYTHONHASHSEED": "1"})
    pure = run_process(*args, env={"SCHEDCLI_PURE_PYTHON": "1", "PYTHONHASHSEED": "2"})
    assert fast.returncode == pure.returncode == 0, fast.stderr
    assert fast.stdout == pure.stdout and b'"findings"' in fast.stdout
