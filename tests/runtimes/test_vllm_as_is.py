"""``-p vllm`` admits exactly what vLLM 0.33's engine admits, and where vLLM's own loop stalls,
schedcli says so at once: a bare loop over vLLM's Scheduler is the second path to each
answer. The shipped reproduction (docs/examples/vllm-kv-deadlock) fails as documented.

Skipped without the extra, except under CI (``SCHEDCLI_REQUIRE_VLLM``), which installs it
(tests/conftest.py's ``needs`` marker).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import Cli
from tests.helpers import ROOT
from tests.runtimes.bare_loop import bare_loop, trace_steps

pytestmark = pytest.mark.needs("vllm")

EXAMPLE = ROOT / "docs" / "examples"
BARE = {"skip_kv_startup_check": "true"}


def _params(params: dict[str, Any]) -> list[str]:
    return [f"-P{k}={v}" for k, v in params.items()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_a_cache_vllms_engine_refuses_at_start_up_is_bad_input_in_vllms_words(
    cli: Cli, tmp_path: Path
) -> None:
    workload = _write(tmp_path / "w.jsonl", [{"sid": 1, "arrival": 0, "prompt_tokens": 9,
                                             "output_tokens": 2}])  # fmt: skip
    r = cli("simulate", workload, "-p", "vllm", "-P", "num_gpu_blocks=100")
    assert r.code == 2
    assert "vLLM's engine refuses this configuration at start-up" in r.stderr
    assert "To serve at least one request with the model's max seq len (32768)" in r.stderr
    assert "the estimated maximum model length is 1584" in r.stderr
    assert "skip_kv_startup_check=true" in r.stderr
    # The null block: two blocks of 16 hold one 16-token request, not a 17-token one.
    r = cli("simulate", workload, "-p", "vllm", *_params(
        {"num_gpu_blocks": 2, "block_size": 16, "max_model_len": 17}))  # fmt: skip
    assert r.code == 2 and "the estimated maximum model length is 16" in r.stderr
    r = cli("simulate", workload, "-p", "vllm", *_params(
        {"num_gpu_blocks": 2, "block_size": 16, "max_model_len": 16}), "-f", "json")  # fmt: skip
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["finished"] == 1


def test_admission_is_vllms_input_processing_and_nothing_more(cli: Cli, tmp_path: Path) -> None:
    header = {"schedcli": 1, "level": "request", "policy": "vllm",
              "params": {"num_gpu_blocks": 2, "block_size": 16, "max_model_len": 16}}  # fmt: skip
    trace = _write(tmp_path / "t.jsonl", [
        header,
        {"op": "arrive", "rid": "long", "prompt_tokens": 17, "max_tokens": 1},
        {"op": "arrive", "rid": "full", "prompt_tokens": 16, "max_tokens": 1},
        {"op": "arrive", "rid": "capped", "prompt_tokens": 10, "max_tokens": 100},
    ])  # fmt: skip
    r = cli("replay", trace, "-f", "jsonl")
    assert r.code == 0, r.stderr
    records = [orjson.loads(line) for line in r.lines]
    refused = {x["rid"]: x["reason"] for x in records if x.get("accepted") is False}
    assert refused == {
        "long": "The decoder prompt (length 17) is longer than the maximum model length of "
        "16. Make sure that `max_model_len` is no smaller than the number of text tokens.",
        "full": "The decoder prompt (length 16) plus the number of requested output tokens "
        "(at least 1) is longer than the maximum model length of 16. Make sure that "
        "`max_model_len` is no smaller than the number of text tokens (prompt + requested "
        "output tokens).",
    }
    # Admitted whole, and capped at max_model_len by vLLM: 10 + 6 tokens, not 100 outputs.
    steps = [x for x in records if "batch" in x]
    assert sum(len(x["batch"]) for x in steps) == 6 and steps[-1]["finished"] == ["capped"]
    assert records[-1]["end"]["finished"] == 1
    # An empty prompt (a trace cannot hold one: its format refuses it first).
    from schedcli.model.requests import Arrival
    from schedcli.runtimes.vllm.policy import VllmScheduler

    policy = VllmScheduler.create(**header["params"])
    try:
        assert policy.add(Arrival("x", 0, 1)) == "The decoder prompt cannot be empty"
    finally:
        policy.close()


def _traffic(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    t, rows = 0.0, []
    for i in range(rng.randint(3, 9)):
        t += rng.expovariate(40.0)
        big = rng.random() < 0.2
        rows.append({
            "sid": f"r{i}", "arrival": round(t, 6),
            "prompt_tokens": rng.randint(1100, 3000) if big else rng.randint(1, 400),
            "output_tokens": rng.randint(1, 30), "priority": rng.randint(0, 2),
        })  # fmt: skip
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_where_vllms_own_loop_progresses_the_steps_match_and_where_it_stalls_schedcli_says_so(
    cli: Cli, tmp_path: Path, seed: int
) -> None:
    # A cache of 64 blocks of 16 (1,008 tokens usable) and prompts up to 3,000: run past the
    # engine's start-up check, as an embedded Scheduler runs.
    params = {"max_num_batched_tokens": 256, "max_num_seqs": 4, "num_gpu_blocks": 64,
              "block_size": 16, "policy": "priority" if seed % 2 else "fcfs"} | BARE  # fmt: skip
    rows = _traffic(seed)
    bound = 400
    held_out = bare_loop(rows, params, max_steps=bound)
    trace = tmp_path / "sim.jsonl"
    r = cli("simulate", _write(tmp_path / "w.jsonl", rows), "-p", "vllm", *_params(params),
            "-o", trace)  # fmt: skip
    ours = trace_steps(trace)
    if len(held_out) < bound:  # vLLM's loop finished: every step the same
        assert r.code == 0, r.stderr
        assert ours == held_out
        return
    assert r.code == 3, r.stderr  # it stalls: found within a few steps of the last progress
    assert "stalled since step" in r.stderr
    assert ours == held_out[: len(ours)]
    assert all(not b for b, _, _ in held_out[len(ours) :])  # vLLM did nothing more either
    progress = max((i for i, (b, _, _) in enumerate(held_out) if b), default=-1)
    ops = [orjson.loads(x).get("op") for x in trace.read_bytes().splitlines()[1:]]
    arrived = ops[: len(ops) - ops[::-1].index("arrive")].count("step")  # steps before the last
    assert len(ours) <= max(progress, arrived) + 3
    big = [x["sid"] for x in rows if x["prompt_tokens"] > 1008]
    assert f'Stuck: request "{big[0]}" (kv_blocks:' in r.stderr or "waits behind" in r.stderr


@pytest.mark.parametrize("seed", range(12))
def test_under_a_configuration_vllms_engine_accepts_no_drained_trace_stalls(
    cli: Cli, tmp_path: Path, seed: int
) -> None:
    """fuzz/vllm_stalls.py's search, a few seeds of it: vLLM 0.33's scheduler, admitted as
    its engine admits, never stalls on these (were one to, that is a finding to report)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_stalls", ROOT / "fuzz" / "vllm_stalls.py")
    assert spec is not None and spec.loader is not None
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    trace = _write(tmp_path / "t.jsonl", search.case(seed))
    r = cli("replay", trace, "--drain", "-o", os.devnull)
    assert r.code in (0, 2), r.stderr
    assert r.code == 0 or "validation error" in r.stderr  # vLLM's own config checks


def test_the_shipped_reproduction_fails_as_documented_and_its_golden_pins_it(
    cli: Cli, tmp_path: Path
) -> None:
    workload = EXAMPLE / "vllm-kv-deadlock.workload.jsonl"
    run = tmp_path / "run.jsonl"
    r = cli("simulate", workload, "-p", "vllm", *_params({"num_gpu_blocks": 100} | BARE),
            "-o", run)  # fmt: skip
    assert r.code == 3
    assert 'Stuck: request "r4" (kv_blocks: needs 313 KV blocks; 99 free' in r.stderr
    small = tmp_path / "small.jsonl"
    r = cli("shrink", run, "--drain", "--until", "contract", "-o", small)
    assert r.code == 0, r.stderr
    shipped = EXAMPLE / "vllm-kv-deadlock" / "deadlock.jsonl"
    assert [orjson.loads(x) for x in small.read_bytes().splitlines()][1:] == [
        orjson.loads(x) for x in shipped.read_bytes().splitlines()
    ][1:]  # the same one arrival (the header's meta names the workload's path)
    golden = EXAMPLE / "vllm-kv-deadlock" / "golden" / "deadlock.dump.jsonl"
    r = cli("replay", shipped, "--golden", golden)
    assert r.code == 0, r.stderr
    assert "including the contract break it pins (exit 3 expected)" in r.stderr
    r = cli("check", EXAMPLE / "vllm-kv-deadlock")
    assert r.code == 0, r.stdout
    # An upgrade that fixes it shows: here, a cache that holds the request.
    r = cli("replay", shipped, "-P", "num_gpu_blocks=400", "--golden", golden)
    assert r.code == 1 and "dump differs from golden" in r.stderr
    # Without the parameter, the engine's start-up check refuses the configuration.
    r = cli("replay", shipped, "-P", "skip_kv_startup_check=false")
    assert r.code == 2 and "refuses this configuration at start-up" in r.stderr


def test_a_golden_never_pins_a_break_by_check_update(cli: Cli, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLE / "vllm-kv-deadlock", suite)
    (suite / "golden" / "deadlock.dump.jsonl").unlink()
    r = cli("check", suite, "--update")
    assert r.code == 3  # a contract break is never blessed in passing
    assert not (suite / "golden" / "deadlock.dump.jsonl").exists()
