"""vLLM's own scheduler inside schedcli (``-p vllm``, the ``vllm`` extra): simulated, swept,
recorded through the subclass, replayed exactly.

Skipped without the extra, except under CI (``SCHEDCLI_REQUIRE_VLLM``), which installs it
(tests/conftest.py's ``needs`` marker).
vLLM loads once per test process (about 20 s); each test builds its own small scheduler.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import Cli
from tests.helpers import ROOT
from tests.runtimes.bare_loop import bare_loop, trace_steps

pytestmark = pytest.mark.needs("vllm")

SMALL = {
    "max_num_batched_tokens": 256,
    "max_num_seqs": 8,
    "num_gpu_blocks": 64,
    "block_size": 16,
    "max_model_len": 1008,  # what 63 usable blocks hold: vLLM's engine refuses more
}


def _params(**overrides: Any) -> list[str]:
    return [f"-P{k}={v}" for k, v in (SMALL | overrides).items()]


def _workload(tmp_path: Path, n: int = 40, seed: int = 7) -> tuple[Path, list[dict[str, Any]]]:
    rng = random.Random(seed)
    t = 0.0
    requests = []
    for i in range(n):
        t += rng.expovariate(80.0)
        requests.append(
            {
                "sid": f"r{i}" if i % 3 else i,
                "arrival": round(t, 6),
                "prompt_tokens": rng.randint(1, 500),
                "output_tokens": rng.randint(1, 60),
                "priority": rng.randint(0, 2),
            }
        )
    path = tmp_path / "workload.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in requests))
    return path, requests


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_simulate_agrees_step_for_step_with_a_bare_loop_over_vllm(
    cli: Cli, tmp_path: Path, policy: str
) -> None:
    workload, requests = _workload(tmp_path)
    trace = tmp_path / "sim.jsonl"
    r = cli("simulate", workload, "-p", "vllm", *_params(policy=policy), "-o", trace)
    assert r.code == 0, r.stderr
    params = SMALL | {"policy": policy}
    held_out = bare_loop(requests, params)
    ours = trace_steps(trace)
    assert ours == held_out
    assert sum(len(p) for _, p, _ in held_out) > 0  # the case preempts: it is exercised
    assert sum(len(f) for _, _, f in ours) == len(requests)


def test_a_simulated_run_replays_with_check_and_a_changed_config_fails_with_reasons(
    cli: Cli, tmp_path: Path
) -> None:
    workload, _ = _workload(tmp_path, n=25)
    trace = tmp_path / "sim.jsonl"
    assert cli("simulate", workload, "-p", "vllm", *_params(), "-o", trace).code == 0
    r = cli("replay", trace, "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert "checked" in r.stderr and r.lines[-1].startswith(b'{"end":')
    r = cli("replay", trace, "--check", "-P", "max_num_seqs=1", "-f", "jsonl")
    assert r.code == 1
    assert "differs from the recorded step" in r.stderr
    assert "why the replay left out what the recording scheduled" in r.stderr
    assert "max_num_seqs" in r.stderr
    assert r.lines[-1].startswith(b'{"partial":')


def _record(path: Path, params: dict[str, Any], multi_turn: bool = False) -> dict[str, int]:
    """Drive RecordingVllmScheduler as vLLM's engine core does: requests arrive, clients abort,
    some requests stop on a stop token, the KV cache is small enough to preempt."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request, RequestStatus

    from schedcli.runtimes.vllm.build import load
    from schedcli.runtimes.vllm.policy import build_scheduler
    from schedcli.runtimes.vllm.recorder import RecordingVllmScheduler

    sched = build_scheduler(params, RecordingVllmScheduler, trace_path=str(path))
    hasher = load().hasher(params["block_size"])
    rng = random.Random(11)
    stop_token = 7
    history: dict[str, list[int]] = {}
    seen = {"aborted": 0, "stopped": 0, "preempted": 0, "added": 0}
    for step in range(400):
        if seen["added"] < 30 and rng.random() < 0.5:
            n = seen["added"]
            prompt = [rng.randint(100, 900) for _ in range(rng.randint(1, 300))]
            if multi_turn and n and n % 2 == 0:
                prompt = history[f"q{n - 1}"] + [rng.randint(100, 900) for _ in range(20)]
            rid = f"q{n}"
            sched.add_request(
                Request(
                    request_id=rid,
                    prompt_token_ids=prompt,
                    sampling_params=SamplingParams(
                        max_tokens=rng.randint(1, 40), stop_token_ids=[stop_token]
                    ),
                    pooling_params=None,
                    arrival_time=float(step),
                    block_hasher=hasher,
                )
            )
            history[rid] = list(prompt)
            seen["added"] += 1
        live = [r for r, q in sched.requests.items() if not q.is_finished()]
        if live and rng.random() < 0.04:
            sched.finish_requests([rng.choice(live)], RequestStatus.FINISHED_ABORTED)
            seen["aborted"] += 1
        if not sched.get_num_unfinished_requests():
            if seen["added"] >= 30:
                break
            continue
        out = sched.schedule()
        seen["preempted"] += len(out.preempted_req_ids or ())
        keys = list(out.num_scheduled_tokens)
        sampled = []
        for key in keys:
            req = sched.requests[key]
            if req.num_computed_tokens < req.num_tokens:
                sampled.append([])
                continue
            token = stop_token if rng.random() < 0.05 else rng.randint(100, 900)
            seen["stopped"] += token == stop_token
            history[key].append(token)
            sampled.append([token])
        _answer(sched, out, keys, sampled)
    sched.shutdown()
    return seen


def _answer(sched: Any, out: Any, keys: list[str], sampled: list[list[int]]) -> None:
    """What vLLM's model runner hands back for a step: the tokens each request sampled."""
    from vllm.v1.outputs import ModelRunnerOutput

    runner = ModelRunnerOutput(
        req_ids=keys,
        req_id_to_index={k: i for i, k in enumerate(keys)},
        sampled_token_ids=sampled,
    )
    sched.update_from_output(out, runner)


RECORDED = {
    "max_num_batched_tokens": 128,
    "max_num_seqs": 6,
    "num_gpu_blocks": 40,
    "max_model_len": 624,
}


def test_a_recording_made_through_the_subclass_replays_exactly(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "live.jsonl.gz"
    seen = _record(trace, RECORDED | {"block_size": 16})
    assert seen["aborted"] and seen["stopped"] and seen["preempted"]  # every path exercised
    r = cli("replay", trace, "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    end = orjson.loads(r.lines[-1])["end"]
    assert end["aborted"] > 0 and end["preemptions"] > 0 and end["held"] == 0
    r = cli("replay", trace, "--check", "-P", "max_num_seqs=2")
    assert r.code == 1
    assert "step" in r.stderr and "why the replay left out" in r.stderr


def test_prefix_caching_replays_exactly_because_sampled_tokens_are_recorded(
    cli: Cli, tmp_path: Path
) -> None:
    # Each second request's prompt is the one before with its outputs (a chat's next turn):
    # its cache hits include blocks of generated tokens, which a replay must sample alike.
    trace = tmp_path / "turns.jsonl"
    _record(trace, RECORDED | {"block_size": 4, "num_gpu_blocks": 400}, multi_turn=True)
    assert cli("replay", trace, "--check").code == 0
    stripped = tmp_path / "no-sampled.jsonl"
    lines = []
    for line in trace.read_bytes().splitlines():
        event = orjson.loads(line)
        event.pop("sampled", None)
        lines.append(orjson.dumps(event))
    stripped.write_bytes(b"\n".join(lines) + b"\n")
    assert cli("replay", stripped, "--check").code == 1


def test_a_request_trace_has_goldens_validate_and_stats(cli: Cli, tmp_path: Path) -> None:
    workload, _ = _workload(tmp_path, n=12)
    trace = tmp_path / "sim.jsonl"
    assert cli("simulate", workload, "-p", "vllm", *_params(), "-o", trace).code == 0
    golden = tmp_path / "golden.dump.jsonl"
    r = cli("replay", trace, "--golden", golden, "--update-golden")
    assert r.code == 0, r.stderr
    assert cli("replay", trace, "--golden", golden).code == 0
    r = cli("replay", trace, "-P", "max_num_seqs=2", "--golden", golden)
    assert r.code == 1 and "differs" in r.stderr
    r = cli("validate", trace)
    assert r.code == 0 and "valid" in r.stderr
    r = cli("stats", trace, "-f", "json")
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["preemptions"] >= 0
    r = cli("diff", golden, golden)
    assert r.code == 0


def test_sweep_compares_decode_first_with_vllm_on_one_workload(cli: Cli, tmp_path: Path) -> None:
    workload, _ = _workload(tmp_path, n=15)
    out = tmp_path / "sweep.jsonl"
    r = cli(
        "sweep",
        workload,
        "-p",
        "decode-first",
        "-p",
        "vllm",
        "--grid",
        "max_num_seqs=2,8",
        "--cache",
        tmp_path / "cache",
        "-o",
        out,
        "-j",
        "1",
        "--fresh",
    )
    assert r.code == 0, r.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["policy"] for r in records] == ["decode-first", "vllm", "vllm"]
    assert [r["params"].get("max_num_seqs") for r in records[1:]] == [2, 8]
    assert all(r["metrics"]["finished"] == 15 for r in records)
    assert "preemptions" in records[1]["metrics"]
    pytest.importorskip("matplotlib", reason="the report draws with matplotlib")
    for source in (out, workload):  # the sweep's report, and a report that simulates
        page = tmp_path / "report.html"
        policies = ["-p", "decode-first", "-p", "vllm"] if source == workload else []
        r = cli("report", source, *policies, "-o", page)
        assert r.code == 0, r.stderr
        assert "vllm" in page.read_text()


def test_simulate_output_is_identical_under_any_hash_seed(tmp_path: Path) -> None:
    workload, _ = _workload(tmp_path, n=12)
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "schedcli",
                "simulate",
                str(workload),
                "-p",
                "vllm",
                *_params(),
                "-o",
                "-",
                "--metrics",
                str(tmp_path / f"m{seed}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in ("0", "4242")
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert outputs[0] == outputs[1] and outputs[0].count(b'"op":"step"') > 5
    assert (tmp_path / "m0.json").read_bytes() == (tmp_path / "m4242.json").read_bytes()


def test_policies_lists_vllm_as_request_level(cli: Cli) -> None:
    r = cli("policies", "-f", "json")
    described = {d["name"]: d for d in orjson.loads(r.stdout)}
    assert described["vllm"]["origin"] == "built-in, request-level"
    assert "note" not in described["vllm"]  # installed here


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated request-level trace (30 requests) that fails --check under
    max_num_seqs=3: built once for this module's tests."""
    from schedcli.app.inprocess import run_cli_in_process

    folder = tmp_path_factory.mktemp("crowded")
    workload, _ = _workload(folder, n=30, seed=3)
    trace = folder / "sim.jsonl"
    run = run_cli_in_process(
        ["simulate", str(workload), "-p", "vllm", *_params(), "-o", str(trace)]
    )
    assert run.code == 0, run.stderr
    return trace


def test_shrink_reduces_a_failing_request_trace_to_one_that_fails_alike(
    cli: Cli, tmp_path: Path, crowded: Path
) -> None:
    out = tmp_path / "small.jsonl"
    r = cli("shrink", crowded, "--until", "check", "-P", "max_num_seqs=3", "-o", out)
    assert r.code == 0, r.stderr
    before = len(crowded.read_bytes().splitlines())
    after = out.read_bytes().splitlines()
    assert len(after) < before // 4
    assert cli("replay", out, "--check").code == 0  # it fails only under the change
    r = cli("replay", out, "--check", "-P", "max_num_seqs=3")
    assert r.code == 1 and "max_num_seqs" in r.stderr


def test_explain_shows_a_step_s_requests_and_a_request_s_life(cli: Cli, crowded: Path) -> None:
    r = cli("explain", crowded, "--step", "6", "-P", "max_num_seqs=3", "-f", "json")
    assert r.code == 0, r.stderr
    view = orjson.loads(r.stdout)
    assert view["step"] == 6 and view["policy"] == "vllm"
    codes = {entry["reason"] for entry in view["left"]}
    assert codes and codes <= {"max_num_seqs", "token_budget", "kv_blocks", "queue", "preempted"}
    assert len(view["batch"]) <= 3
    waiting = view["left"][0]["sid"]
    r = cli("explain", crowded, "--session", str(waiting), "-P", "max_num_seqs=3", "-f", "json")
    assert r.code == 0, r.stderr
    (life,) = orjson.loads(r.stdout)
    assert life["passed_over"] and life["outcome"]["what"] == "finished"
    r = cli("explain", crowded, "--task", "r1")
    assert r.code == 2 and "explain --session" in r.stderr


def test_diff_of_two_configurations_shows_the_first_step_and_why(cli: Cli, crowded: Path) -> None:
    r = cli("diff", crowded, "--b-param", "max_num_seqs=3")
    assert r.code == 1
    assert b"why B left out what the other side dispatched" in r.stdout
    assert b"max_num_seqs" in r.stdout
    assert cli("diff", crowded).code == 0


def test_the_replay_table_counts_reasons_and_the_timeline_marks_preemptions(
    cli: Cli, tmp_path: Path, crowded: Path
) -> None:
    replayed = tmp_path / "replay.json"
    r = cli("replay", crowded, "-f", "table", "-P", "max_num_seqs=3", "--perfetto", replayed)
    assert r.code == 0, r.stderr
    assert b"max_num_seqs" in r.stdout and b"summary" in r.stdout
    counters = [
        e["args"]
        for e in orjson.loads(replayed.read_bytes())["traceEvents"]
        if e["name"] == "waiting by reason"
    ]
    assert any(c.get("max_num_seqs") for c in counters)
    workload, _ = _workload(tmp_path)
    timeline = tmp_path / "t.json"
    r = cli("simulate", workload, "-p", "vllm", *_params(), "--perfetto", timeline)
    assert r.code == 0, r.stderr
    assert b"preemptions" in r.stdout
    events = orjson.loads(timeline.read_bytes())["traceEvents"]
    assert any(e["name"] == "preempted" and e["ph"] == "i" for e in events)
    assert any(e["name"] == "waiting by reason" for e in events) is False  # simulate: no reasons


def test_a_recording_converts_to_traffic_every_policy_runs(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "live.jsonl"
    _record(trace, RECORDED | {"block_size": 16})
    workload = tmp_path / "traffic.jsonl"
    assert cli("convert", "auto", trace, "-o", workload).code == 0
    for policy in ("decode-first", "vllm"):
        r = cli("simulate", workload, "-p", policy, "-f", "json")
        assert r.code == 0, r.stderr
        assert orjson.loads(r.stdout)["requests"] == 30


@pytest.mark.needs("ray")
def test_a_sweep_of_vllm_on_ray_gives_the_records_of_the_local_pool(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    workload, _ = _workload(tmp_path, n=10)
    args = [str(workload), "-p", "decode-first", "-p", "vllm", "--fresh"]
    args += ["--cache", str(tmp_path / "cache")]
    args += ["--grid", "max_num_seqs=2,8", "--grid", "num_gpu_blocks=64"]
    args += ["--grid", "max_model_len=1008"]
    records = []
    for name, backend in (("local.jsonl", []), ("ray.jsonl", ["--backend", "ray"])):
        out = tmp_path / name
        r = run_cli("sweep", *args, *backend, "-j", "2", "-o", str(out), timeout=600)
        assert r.returncode == 0, r.stderr.decode()
        records.append(out.read_bytes())
    assert records[0] == records[1]
    policies = [orjson.loads(line)["policy"] for line in records[0].splitlines()]
    assert policies == ["decode-first", "vllm", "vllm"]


def test_an_async_scheduling_recording_replays_exactly(cli: Cli, tmp_path: Path) -> None:
    """vLLM's default engine pipelines steps: it schedules step N+1 before step N's outputs
    come back (a batch queue of two). RecordingVllmAsyncScheduler records the plans and the
    outputs apart, and the replay makes the same calls in the same order."""
    from collections import deque

    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request, RequestStatus

    from schedcli.runtimes.vllm.build import load
    from schedcli.runtimes.vllm.policy import build_scheduler
    from schedcli.runtimes.vllm.recorder import RecordingVllmAsyncScheduler

    trace = tmp_path / "async.jsonl"
    sched = build_scheduler(
        RECORDED | {"block_size": 16}, RecordingVllmAsyncScheduler, trace_path=str(trace)
    )
    hasher = load().hasher(16)
    rng = random.Random(23)
    queue: deque[tuple[Any, list[str]]] = deque()
    added = aborted = 0
    for step in range(600):
        if added < 25 and rng.random() < 0.5:
            sched.add_request(
                Request(
                    request_id=f"a{added}",
                    prompt_token_ids=[rng.randint(100, 900) for _ in range(rng.randint(1, 250))],
                    sampling_params=SamplingParams(
                        max_tokens=rng.randint(1, 30), stop_token_ids=[7]
                    ),
                    pooling_params=None,
                    arrival_time=float(step),
                    block_hasher=hasher,
                )
            )
            added += 1
        live = [r for r, q in sched.requests.items() if not q.is_finished()]
        if live and rng.random() < 0.03:
            sched.finish_requests([rng.choice(live)], RequestStatus.FINISHED_ABORTED)
            aborted += 1
        if sched.get_num_unfinished_requests() and len(queue) < 2:
            out = sched.schedule()
            samplers = [
                k for k in out.num_scheduled_tokens if not sched.requests[k].is_prefill_chunk
            ]
            queue.append((out, samplers))
            if len(queue) < 2:
                continue
        if not queue:
            if added >= 25:
                break
            continue
        out, samplers = queue.popleft()
        keys = list(out.num_scheduled_tokens)
        tokens = [
            [7 if rng.random() < 0.05 else rng.randint(100, 900)] if k in samplers else []
            for k in keys
        ]
        _answer(sched, out, keys, tokens)
    sched.shutdown()
    assert aborted
    text = trace.read_bytes()
    assert b'"op":"schedule"' in text and b'"op":"update"' in text
    assert b'"async_scheduling":"true"' in text.splitlines()[0]
    r = cli("replay", trace, "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert orjson.loads(r.lines[-1])["end"]["held"] == 0
    r = cli("replay", trace, "--check", "-P", "max_num_seqs=2")
    assert r.code == 1 and "why the replay left out" in r.stderr
    workload = tmp_path / "traffic.jsonl"
    assert cli("convert", "auto", trace, "-o", workload).code == 0
    assert len(workload.read_bytes().splitlines()) == 25


def test_the_recorders_old_path_loads_the_same_classes_with_a_deprecation_note() -> None:
    # A --scheduler-cls set before the recorder moved to schedcli.runtimes keeps working.
    import importlib

    from schedcli.runtimes.vllm import recorder

    sys.modules.pop("schedcli.integrations.vllm", None)
    with pytest.warns(DeprecationWarning, match="schedcli.runtimes.vllm.recorder"):
        old = importlib.import_module("schedcli.integrations.vllm")
    assert old.RecordingScheduler is recorder.RecordingVllmScheduler
    assert old.RecordingAsyncScheduler is recorder.RecordingVllmAsyncScheduler


def test_replay_and_validate_refuse_a_missing_vllm_by_one_check_even_after_a_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    # Building asks the same question validate asks (Policy.available), not a load cached
    # earlier in the process: the two commands cannot disagree about one trace.
    import importlib.util

    from schedcli.runtimes.vllm.build import load

    load()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    trace = tmp_path / "r.jsonl"
    trace.write_text(
        '{"schedcli": 1, "level": "request", "policy": "vllm", "params": {}}\n'
        '{"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 3}\n'
    )
    validated, replayed = cli("validate", trace), cli("replay", trace)
    assert (validated.code, replayed.code) == (2, 2)
    assert "pip install 'schedcli[vllm]'" in validated.stderr
    assert "pip install 'schedcli[vllm]'" in replayed.stderr


def _fresh_process_env() -> dict[str, str]:
    """The environment minus the user's logging choices: vLLM's and torch's defaults."""
    chosen = ("VLLM_LOGGING_LEVEL", "VLLM_LOGGING_STREAM", "VLLM_CONFIGURE_LOGGING", "TORCH_LOGS")
    return {k: v for k, v in os.environ.items() if k not in chosen}


def test_a_vllm_run_s_stderr_holds_only_schedcli_s_own_lines(tmp_path: Path) -> None:
    # A process of its own: vLLM and torch log most while they are first imported, and
    # vLLM says some things once per process. The KV deadlock gives schedcli something to
    # say (exit 3, and a note); vLLM's import and build warn (torch's deprecations, no
    # vllm._C) and must not be heard.
    example = ROOT / "docs" / "examples" / "vllm-kv-deadlock.workload.jsonl"
    args = ["simulate", str(example), "-p", "vllm", "-P", "num_gpu_blocks=100"]
    args += ["-P", "skip_kv_startup_check=true", "-o", str(tmp_path / "run.jsonl")]
    run = subprocess.run(
        [sys.executable, "-m", "schedcli", *args],
        capture_output=True,
        env=_fresh_process_env(),
        timeout=600,
        check=False,
    )
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 3, run.stderr.decode()
    assert [line for line in lines if not line.startswith(("schedcli: ", "note: "))] == []
    assert any("broke the Scheduler contract" in line for line in lines)


def test_vllm_s_and_torch_s_errors_still_reach_stderr() -> None:
    # Quiet means warnings, not errors: both loggers' ERROR records pass, after a load.
    script = (
        "import logging\n"
        "from schedcli.runtimes.vllm.build import load\n"
        "load()\n"
        "for name in ('vllm.v1.core.sched.scheduler', 'torch._dynamo'):\n"
        "    logging.getLogger(name).warning('a %s warning', name)\n"
        "    logging.getLogger(name).error('an %s error', name)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env=_fresh_process_env(),
        timeout=600,
        check=False,
    )
    err = run.stderr.decode()
    assert run.returncode == 0, err
    assert "an vllm.v1.core.sched.scheduler error" in err and "an torch._dynamo error" in err
    assert "warning" not in err


def test_a_step_spent_by_max_num_scheduled_tokens_is_the_token_budget_not_blocking(
    tmp_path: Path, cli: Cli
) -> None:
    # vLLM caps a step at max_num_scheduled_tokens (and admission at max_num_active_seqs)
    # where given: 8 of 8 tokens spent is a full step, whatever max_num_batched_tokens says.
    # Read against the batched cap, b was said to wait for KV blocks with 8190 free and
    # findings called the step 87.5% unused, head-of-line blocked.
    trace = tmp_path / "r.jsonl"
    params = '{"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_num_scheduled_tokens": 8}'
    trace.write_text(
        f'{{"schedcli": 1, "level": "request", "policy": "vllm", "params": {params}}}\n'
        '{"op": "arrive", "rid": "a", "prompt_tokens": 40, "max_tokens": 2}\n'
        '{"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 2}\n'
        '{"op": "arrive", "rid": "c", "prompt_tokens": 4, "max_tokens": 2}\n'
        '{"op": "step", "expect": {"batch": [["a", 8]], "preempted": [], "finished": []}}\n'
        '{"op": "step", "expect": {"batch": [["a", 8]], "preempted": [], "finished": []}}\n'
    )
    explained = cli("explain", trace, "--step", "0")
    assert explained.code == 0, explained.stderr
    assert explained.stdout.count(b"8 of 8 tokens scheduled") == 2, explained.stdout
    assert b"kv_blocks" not in explained.stdout
    found = cli("findings", trace, "-f", "json", "--fail-on", "hol_blocking")
    assert found.code == 0, found.stdout

    capped = tmp_path / "seqs.jsonl"
    capped.write_text(
        trace.read_text()
        .replace('"max_num_scheduled_tokens": 8', '"max_num_active_seqs": 1')
        .replace('[["a", 8]]', '[["a", 40]]', 1)
        .replace('[["a", 8]]', '[["a", 1]]')
    )
    explained = cli("explain", capped, "--step", "1")
    assert explained.code == 0, explained.stderr
    assert explained.stdout.count(b"max_num_active_seqs is 1") == 2, explained.stdout
