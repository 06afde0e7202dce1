"""``simulate -p cxx-runner:...`` (#56): ExecuTorch's own batching Runner in the loop, with
a fake executor, the workload's requests, and the scheduler ``cxx:...`` names wrapped by
schedcli's recorder.

CI has no ExecuTorch checkout: the runner here is the payload shape's stand-in
(tests/cpp/payload: runner.h, executor.h and metrics.h with the real declarations, and a
runner.cpp and metrics.cpp of our own), and the scheduler our FIFO twin of ``fcfs``. With
SCHEDCLI_TEST_EXECUTORCH=PATH (a checkout, or a scratch folder holding upstream's files of
152bb8a7), the same checks run against ExecuTorch's runner.cpp and DecodeFirstScheduler,
and the stand-in runner is held to making exactly the scheduler traffic the real one makes.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.runtimes.executorch import include_dir
from tests.conftest import Cli
from tests.helpers import ROOT

REQUIRED = bool(os.environ.get("SCHEDCLI_REQUIRE_GXX"))
COMPILERS = [c for c in ("g++", "clang++") if shutil.which(c) or REQUIRED]
pytestmark = pytest.mark.skipif(
    not COMPILERS, reason="no C++ compiler here (CI installs g++ and clang and requires this)"
)
CPP = ROOT / "tests" / "cpp"
SCHEDULERS = CPP / "schedulers"
PAYLOAD = CPP / "payload" / "executorch"
FIFO = "schedcli_test::FifoScheduler::create(max_batch_tokens={}, max_num_seqs={}, " + (
    "max_prefill_chunk_size={})"
)
PARAMS = {"max_batch_tokens": 96, "max_num_seqs": 4, "max_prefill_chunk_size": 32}
DRIVER = ROOT / "schedcli" / "runtimes" / "executorch" / "runner_driver.cpp"


def fifo(prefix: str = "cxx-runner:") -> str:
    return f"{prefix}{SCHEDULERS / 'fifo_scheduler.h'}={FIFO.format(*PARAMS.values())}"


def crashing(crash_at: int, how: int) -> str:
    return (
        f"cxx-runner:{SCHEDULERS / 'crashing_scheduler.h'}=std::make_unique<"
        f"schedcli_test::CrashingScheduler>(crash_at={crash_at}, how={how})"
    )


def fcfs_params() -> list[str]:
    return [a for k, v in PARAMS.items() for a in ("-P", f"{k}={v}")]


@pytest.fixture(scope="session")
def cxx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "cxx-cache"


@pytest.fixture
def runner_env(monkeypatch: pytest.MonkeyPatch, cxx_cache: Path) -> Path:
    """A shared build cache, a compiler, and the stand-in checkout."""
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("CXX", COMPILERS[0])
    monkeypatch.setenv("EXECUTORCH_ROOT", str(PAYLOAD))
    monkeypatch.delenv("CXXFLAGS", raising=False)
    return cxx_cache


def workload(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in requests))
    return path


MIXED = [
    {"sid": 1, "arrival": 0.0, "prompt_tokens": 70, "output_tokens": 5},
    {"sid": 2, "arrival": 0.0, "prompt_tokens": 3, "output_tokens": 40, "cancel_after": 0.03},
    {"sid": 3, "arrival": 0.004, "prompt_tokens": 33, "output_tokens": 1},
    {"sid": 4, "arrival": 0.01, "prompt_tokens": 96, "output_tokens": 7, "cancel_after": 0},
    {"sid": 5, "arrival": 0.5, "prompt_tokens": 12, "output_tokens": 3},
]


def ops_of(trace: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in trace.read_bytes().splitlines()]


def test_the_trace_is_the_runners_scheduler_traffic_and_replays_check_under_it_and_its_twin(
    runner_env: Path, cli: Cli, tmp_path: Path
) -> None:
    w = workload(tmp_path / "w.jsonl", MIXED)
    trace = tmp_path / "t.jsonl"
    done = cli("simulate", w, "-p", fifo(), "-o", trace, "-f", "json")
    assert done.code == 0, done.stderr
    summary = orjson.loads(done.stdout)
    assert (summary["finished"], summary["cancelled"], summary["rejected"]) == (3, 2, 0)
    records = ops_of(trace)
    header, ops = records[0], records[1:]
    assert header["policy"] == fifo("cxx:") and header["params"] == PARAMS
    assert header["meta"]["workload"] == str(w) and "runner" in header["meta"]
    # The runner's own traffic: a prompt split at the scheduler's chunk limit (output on
    # its last chunk), then one-token decodes at the next position, a cancel when the
    # generation ends and another when its session closes, the scheduler cleared at the end.
    submits = [t for op in ops if op["op"] == "submit" for t in op["tasks"]]
    first = [t for t in submits if t["sid"] == 1]
    assert [(t["kind"], t["size"], t["position"], t["produce_output"]) for t in first] == [
        ("prefill", 32, 0, False),
        ("prefill", 32, 32, False),
        ("prefill", 6, 64, True),
        *[("decode", 1, 70 + i, True) for i in range(4)],
    ]
    assert [t["tid"] for t in submits] == sorted(t["tid"] for t in submits)
    # No patience (cancel_after 0): submitted, then cancelled before the next batch, as
    # simulate's own runner does.
    at = next(i for i, op in enumerate(ops) if op["op"] == "submit" and op["tasks"][0]["sid"] == 4)
    batch = next(i for i in range(at, len(ops)) if ops[i]["op"] == "get_work")
    assert {"op": "cancel", "sid": 4} in ops[at:batch]
    assert [op["sid"] for op in ops if op["op"] == "cancel"].count(1) == 2
    assert ops[-1] == {"op": "clear"}
    for policy in ([fifo("cxx:")], ["fcfs", *fcfs_params()]):
        check = cli("replay", trace, "--check", "-p", *policy, "-o", os.devnull)
        assert check.code == 0, (policy, check.stderr)


def test_the_trace_and_summary_are_the_same_on_every_run_and_with_either_compiler(
    runner_env: Path, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    again = [{**r, "sid": f"again-{r['sid']}", "arrival": 0.6 + r["arrival"]} for r in MIXED]
    w = workload(tmp_path / "w.jsonl", [*MIXED, *again])
    runs = []
    for compiler in [COMPILERS[0], *COMPILERS]:
        monkeypatch.setenv("CXX", compiler)
        trace = tmp_path / f"t{len(runs)}.jsonl"
        done = cli("simulate", w, "-p", fifo(), "-o", trace, "-f", "json")
        assert done.code == 0, done.stderr
        runs.append((trace.read_bytes(), done.stdout))
    assert all(run == runs[0] for run in runs)


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 10))
    numbered = draw(st.booleans())
    t, out = 0.0, []
    for i in range(count):
        t += draw(st.sampled_from([0.0, 0.001, 0.004, 0.02, 0.3]))
        r: dict[str, Any] = {
            "sid": i * 7 - 3 if numbered else f"r{i}",
            "arrival": round(t, 3),
            "prompt_tokens": draw(st.integers(1, 150)),
            "output_tokens": draw(st.integers(1, 9)),
        }
        if draw(st.booleans()):
            r["cancel_after"] = draw(st.sampled_from([0, 0.003, 0.01, 0.05]))
        out.append(r)
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=workloads())
def test_the_runner_in_the_loop_measures_what_simulates_own_runner_does_with_the_twin(
    runner_env: Path,
    cli: Cli,
    tmp_path_factory: pytest.TempPathFactory,
    requests: list[dict[str, Any]],
) -> None:
    # Two paths to one answer: ExecuTorch's runner (here its stand-in) driving the C++
    # FIFO twin, and simulate's own runner driving fcfs, over the same workload and cost
    # model: the same steps, latencies, ends; and the runner's trace replays --check.
    folder = tmp_path_factory.mktemp("prop")
    w = workload(folder / "w.jsonl", requests)
    trace = folder / "t.jsonl"
    ours = cli("simulate", w, "-p", fifo(), "-o", trace, "-f", "json")
    twin = cli("simulate", w, "-p", "fcfs", *fcfs_params(), "-f", "json")
    assert ours.code == twin.code == 0, ours.stderr + twin.stderr
    a, b = orjson.loads(ours.stdout), orjson.loads(twin.stdout)
    for key in set(a) | set(b):
        if key not in ("policy", "params"):
            assert _close(a[key], b[key]), (key, a[key], b[key])
    check = cli("replay", trace, "--check", "-p", "fcfs", *fcfs_params(), "-o", os.devnull)
    assert check.code == 0, check.stderr


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def test_the_driver_is_built_once_and_reused_while_nothing_it_read_changed(
    monkeypatch: pytest.MonkeyPatch, cli: Cli, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setenv("CXX", COMPILERS[0])
    monkeypatch.setenv("EXECUTORCH_ROOT", str(PAYLOAD))
    w = workload(tmp_path / "w.jsonl", MIXED[:2])
    first = cli("simulate", w, "-p", fifo(), "-f", "json")
    second = cli("simulate", w, "-p", fifo(), "-f", "json")
    assert first.code == second.code == 0, first.stderr + second.stderr
    assert "note: built ExecuTorch's runner with cxx:" in first.stderr
    assert "note: built" not in second.stderr
    assert first.stdout == second.stdout


def test_a_checkout_without_the_runner_is_bad_input_naming_the_file_it_lacks(
    runner_env: Path, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CPP / "later" / "executorch"))
    done = cli("simulate", workload(tmp_path / "w.jsonl", MIXED), "-p", fifo())
    assert done.code == 2, done.stderr
    assert "has no extension/llm/batching/runner.h" in done.stderr
    assert "Traceback" not in done.stderr


def _reshaped(tmp_path: Path, file: str, old: str, new: str) -> Path:
    root = tmp_path / "checkout" / "executorch"
    shutil.copytree(PAYLOAD, root)
    path = root / "extension" / "llm" / "batching" / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return root


@pytest.mark.parametrize(
    ("file", "old", "new", "said"),
    [
        (
            "runner.h",
            ",\n                                  std::function<void()> on_settled = {}",
            "",
            "runner.h: Session has no generate_async(GenerationInput, GenConfig, "
            "GenerationCallback, std::function<void()> on_settled)",
        ),
        (
            "types.h",
            "InputPayload payload;",
            "TokenInputPtr tokens;",
            "types.h: Input has no payload",
        ),
        (
            "executor.h",
            "virtual void close_session(SessionId session) = 0;",
            "virtual void close_session(SessionId session) = 0;\n  virtual void warm() = 0;",
            "executor.h: Executor declares a call schedcli's fake executor does not give",
        ),
    ],
    ids=["runner-without-on-settled", "pre-payload-types", "executor-with-another-call"],
)
def test_a_runner_of_another_shape_is_bad_input_naming_what_it_lacks(
    runner_env: Path,
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    file: str,
    old: str,
    new: str,
    said: str,
) -> None:
    root = _reshaped(tmp_path, file, old, new)
    monkeypatch.setenv("EXECUTORCH_ROOT", str(root))
    done = cli("simulate", workload(tmp_path / "w.jsonl", MIXED), "-p", fifo())
    assert done.code == 2, done.stderr
    assert f"{root.resolve()}: its batching Runner is not of the shape" in done.stderr
    assert said in done.stderr


@pytest.mark.parametrize(
    ("how", "name"),
    [(1, "SIGSEGV"), (3, "SIGABRT"), (13, "SIGTERM")],
    ids=["segfault", "failed-assert", "its-own-stop-signal"],
)
def test_a_crash_in_the_runner_is_exit_3_naming_it_with_the_trace_so_far_kept_partial(
    runner_env: Path, cli: Cli, tmp_path: Path, how: int, name: str
) -> None:
    trace = tmp_path / "t.jsonl"
    done = cli(
        "simulate", workload(tmp_path / "w.jsonl", MIXED), "-p", crashing(4, how), "-o", trace
    )
    assert done.code == 3, done.stderr
    assert f"({name})" in done.stderr and "(the trace marked partial)" in done.stderr
    records = ops_of(trace)
    assert name in records[-1]["partial"]["reason"]
    assert [r["op"] for r in records[1:-1]].count("get_work") == 3  # every step before it


def test_a_scheduler_that_can_make_no_progress_is_exit_3_not_a_hang(
    runner_env: Path, cli: Cli, tmp_path: Path
) -> None:
    header = tmp_path / "stuck.h"
    header.write_text(
        "#pragma once\n#include <memory>\n#include <vector>\n"
        "#include <executorch/extension/llm/batching/scheduler.h>\n"
        "namespace et = ::executorch::extension::llm::batching;\n"
        "struct Stuck : et::Scheduler {  // takes everything, hands out nothing\n"
        "  bool submit(std::vector<et::Task>) override { held = true; return true; }\n"
        "  bool has_work() const override { return held; }\n"
        "  std::vector<et::Task> get_work() override { return {}; }\n"
        "  std::vector<et::Task> cancel(et::SessionId) override { return {}; }\n"
        "  std::vector<et::Task> clear() override { return {}; }\n"
        "  std::size_t max_prefill_chunk_size() const override { return 64; }\n"
        "  bool held = false;\n};\n"
    )
    spec = f"cxx-runner:{header}=std::make_unique<Stuck>()"
    done = cli("simulate", workload(tmp_path / "w.jsonl", MIXED), "-p", spec)
    assert done.code == 3, done.stderr
    assert "returned an empty batch 100000 times in a row while has_work() was true" in (
        done.stderr
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_stops_the_runner_too_and_is_130_or_143_with_the_trace_partial(
    runner_env: Path, cli: Cli, tmp_path: Path, sig: int, code: int
) -> None:
    w = workload(tmp_path / "w.jsonl", MIXED)
    spec = crashing(2, 4)  # loops forever in its second get_work
    assert cli("simulate", w, "-p", crashing(1, 1)).code == 3  # built (one build for both)
    trace = tmp_path / "t.jsonl"
    args = ["simulate", str(w), "-p", spec, "-o", str(trace)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", *args], stderr=subprocess.PIPE, env=dict(os.environ)
    )
    try:
        deadline = time.monotonic() + 120
        while not _spinning_child(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        children = _children(proc.pid)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    said = proc.stderr.read()
    assert b"schedcli: " + (b"interrupted" if code == 130 else b"terminated") in said
    assert not [c for c in children if Path(f"/proc/{c}").exists()]  # the runner ended too
    last = ops_of(trace)[-1]
    assert last == {"partial": {"reason": "interrupted" if code == 130 else "terminated"}}


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _spinning_child(pid: int) -> bool:
    """Whether ``pid``'s child (the driver) has used a second of CPU (spinning)."""
    for child in _children(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            if (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") >= 1.0:
                return True
    return False


def test_a_cxx_runner_name_is_for_simulate_only_and_a_trace_may_not_supply_one(
    runner_env: Path, cli: Cli, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b'{"schedcli": 1}\n{"op": "get_work"}\n')
    done = cli("replay", trace, "-p", "cxx-runner:decode-first")
    assert done.code == 2
    assert "only simulate runs it" in done.stderr and "-p cxx:decode-first" in done.stderr
    trace.write_bytes(orjson.dumps({"schedcli": 1, "policy": fifo()}) + b'\n{"op": "get_work"}\n')
    done = cli("replay", trace)
    assert done.code == 2 and "an inline C++ spec" in done.stderr, done.stderr
    done = cli("simulate", workload(tmp_path / "w.jsonl", MIXED), "-p", fifo(), "--chunk-size", "8")
    assert done.code == 2 and "max_prefill_chunk_size()" in done.stderr


@pytest.mark.parametrize("compiler", COMPILERS)
def test_our_driver_is_warning_free_under_werror(compiler: str, tmp_path: Path) -> None:
    source = tmp_path / "driver.cpp"
    source.write_text(
        f'#include "{SCHEDULERS / "fifo_scheduler.h"}"\n#include <cstddef>\n'
        "static auto schedcli_factory(const std::size_t* p) {\n"
        "  return schedcli_test::FifoScheduler::create(p[0], p[1], p[2]);\n}\n" + DRIVER.read_text()
    )
    done = subprocess.run(
        [
            compiler,
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{include_dir()}",
            "-isystem",
            str(PAYLOAD.parent),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


# SCHEDCLI_TEST_EXECUTORCH=/tmp/etreal/executorch pytest tests/runtimes/test_cxx_runner.py
CHECKOUT = os.environ.get("SCHEDCLI_TEST_EXECUTORCH")
needs_checkout = pytest.mark.skipif(not CHECKOUT, reason="SCHEDCLI_TEST_EXECUTORCH not set")


@needs_checkout
def test_executorchs_runner_with_decode_first_records_a_trace_that_replays_check(
    runner_env: Path, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CHECKOUT))
    again = [{**r, "sid": r["sid"] + 10, "arrival": 0.6} for r in MIXED]
    w = workload(tmp_path / "w.jsonl", [*MIXED, *again])
    trace = tmp_path / "t.jsonl"
    done = cli("simulate", w, "-p", "cxx-runner:decode-first", "-o", trace, "-f", "json")
    assert done.code == 0, done.stderr
    for policy in (["cxx:decode-first"], ["decode-first", "-P", "compat=reference"]):
        check = cli("replay", trace, "--check", "-p", *policy, "-o", os.devnull)
        assert check.code == 0, (policy, check.stderr)
    twin = cli("simulate", w, "-p", "decode-first", "-f", "json")
    a, b = orjson.loads(done.stdout), orjson.loads(twin.stdout)
    assert all(_close(a[k], b[k]) for k in a if k not in ("policy", "params"))


@needs_checkout
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=workloads())
def test_our_stand_in_runner_makes_exactly_the_scheduler_traffic_executorchs_makes(
    runner_env: Path,
    cli: Cli,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    requests: list[dict[str, Any]],
) -> None:
    folder = tmp_path_factory.mktemp("same")
    w = workload(folder / "w.jsonl", requests)
    traces = []
    for root in (str(PAYLOAD), str(CHECKOUT)):
        monkeypatch.setenv("EXECUTORCH_ROOT", root)
        trace = folder / f"t{len(traces)}.jsonl"
        assert cli("simulate", w, "-p", fifo(), "-o", trace).code == 0
        traces.append(trace.read_bytes())
    assert traces[0] == traces[1]


def test_the_driver_ships_in_the_package() -> None:
    import tomllib
    from importlib import resources

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "runtimes/executorch/runner_driver.cpp" in data["package-data"]["schedcli"]
    shipped = resources.files("schedcli.runtimes.executorch").joinpath("runner_driver.cpp")
    assert "int main(" in shipped.read_text()
