"""``-p cxx:...`` (#41): a C++ ``batching::Scheduler`` run as is, as a task-level policy.

Our own C++ schedulers (tests/cpp/schedulers: a FIFO twin of ``fcfs``, one that crashes on
purpose) are built against the stand-ins of both interface shapes (tests/cpp/seed,
tests/cpp/later), with g++ and clang++.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import Task
from tests.conftest import Cli
from tests.helpers import ROOT

REQUIRED = bool(os.environ.get("SCHEDCLI_REQUIRE_GXX"))
COMPILERS = [c for c in ("g++", "clang++") if shutil.which(c) or REQUIRED]
pytestmark = pytest.mark.skipif(
    not COMPILERS, reason="no C++ compiler here (CI installs g++ and clang and requires this)"
)
CPP = ROOT / "tests" / "cpp"
SCHEDULERS = CPP / "schedulers"
SHAPES = ("seed", "tid64", "later", "payload")
BUILDS = [(c, s) for c in COMPILERS for s in SHAPES]
EVERY_SHAPE = [(c, s) for c, s in BUILDS if c == BUILDS[0][0]]  # one compiler


def fifo(b: int = 544, n: int = 64, c: int = 256) -> str:
    return (
        f"cxx:{SCHEDULERS / 'fifo_scheduler.h'}=schedcli_test::FifoScheduler::create("
        f"max_batch_tokens={b}, max_num_seqs={n}, max_prefill_chunk_size={c})"
    )


def crashing(crash_at: int, how: int) -> str:
    return (
        f"cxx:{SCHEDULERS / 'crashing_scheduler.h'}=std::make_unique<"
        f"schedcli_test::CrashingScheduler>(crash_at={crash_at}, how={how})"
    )


@pytest.fixture(scope="session")
def cxx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "cxx-cache"


@pytest.fixture(params=BUILDS[:1], ids=[f"{c}-{s}" for c, s in BUILDS[:1]])
def cxx(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cxx_cache: Path) -> str:
    """The environment a C++ policy is built in: a shared cache, a compiler, a shape."""
    compiler, shape = request.param
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("CXX", compiler)
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CPP / shape / "executorch"))
    monkeypatch.delenv("CXXFLAGS", raising=False)
    return shape


def write(path: Path, header: dict[str, object], ops: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [header, *ops]))
    return path


FCFS = {
    "schedcli": 1,
    "policy": "fcfs",
    "params": {"max_batch_tokens": 12, "max_num_seqs": 3, "max_prefill_chunk_size": 6},
}


@st.composite
def traffic(draw: st.DrawFn) -> list[dict[str, object]]:
    ops: list[dict[str, object]] = []
    tid = 0
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from(["submit"] * 5 + ["get_work"] * 3 + ["cancel", "clear"]))
        if op == "submit":
            sid = draw(st.integers(0, 3))
            tasks = []
            for _ in range(draw(st.integers(1, 3))):
                decode = draw(st.integers(0, 3)) == 0
                tid = draw(st.integers(0, 8)) if draw(st.booleans()) else tid + 1
                size = 1 if decode else draw(st.integers(0, 8))
                task: dict[str, object] = {"tid": tid, "sid": sid, "size": size}
                task["kind"] = "decode" if decode else "prefill"
                # Its work: none, token ids (unsigned, as every shape's Token holds them),
                # or an opaque prepared input with the slice inside it.
                work = draw(st.sampled_from(["none", "none", "tokens", "prepared"]))
                if work == "tokens":
                    task["tokens"] = draw(
                        st.lists(st.integers(0, 2**40), min_size=size, max_size=size)
                    )
                    task["position"] = draw(st.integers(0, 100))
                elif work == "prepared" and size > 0:
                    offset = draw(st.integers(0, 8))
                    task["prepared"] = {
                        "size": offset + size + draw(st.integers(0, 4)),
                        "offset": offset,
                    }
                    task["position"] = offset + draw(st.integers(0, 100))
                if not decode and draw(st.booleans()):
                    task["produce_output"] = draw(st.booleans())
                tasks.append(task)
            ops.append({"op": "submit", "tasks": tasks})
        elif op == "cancel":
            ops.append({"op": "cancel", "sid": draw(st.integers(0, 3))})
        else:
            ops.append({"op": op})
    return ops


def _dump(cli: Cli, trace: Path, policy: str) -> tuple[int, list[dict[str, object]]]:
    done = cli("replay", trace, "-p", policy, "-f", "jsonl", "--drain")
    records = [orjson.loads(line) for line in done.lines]
    for r in records:
        if r.get("accepted") is False:
            r["reason"] = "refused"  # each says why in its own words
    return done.code, records


@pytest.mark.parametrize("cxx", BUILDS, indirect=True, ids=[f"{c}-{s}" for c, s in BUILDS])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=traffic())
def test_fcfs_and_its_cpp_twin_give_identical_dumps_on_random_traces(
    cxx: str, cli: Cli, tmp_path_factory: pytest.TempPathFactory, ops: list[dict[str, object]]
) -> None:
    trace = write(tmp_path_factory.mktemp("t") / "t.jsonl", FCFS, ops)
    python = _dump(cli, trace, "fcfs")
    cpp = _dump(cli, trace, fifo())
    assert cpp == python


def test_the_cpp_twin_diffs_and_goldens_as_fcfs_though_it_gives_no_reasons(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    """The C++ refuses the same groups as fcfs, saying only that it did: diff, diff of the
    dumps and a golden of either compare decisions, with both sides' words beside them."""
    ops: list[dict[str, object]] = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
        {"op": "submit", "tid": 1, "sid": 2, "kind": "decode", "size": 1},  # tid taken
        {"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 7},  # over the chunk
        {"op": "submit", "tid": 3, "sid": 3, "kind": "decode", "size": 2},  # a wide decode
        {"op": "get_work"},
        {"op": "submit", "tasks": [{"tid": 4, "sid": 4, "kind": "prefill", "size": 0}]},
        {"op": "get_work"},
    ]
    trace = write(tmp_path / "t.jsonl", FCFS, ops)
    done = cli("diff", trace, "--a", "fcfs", "--b", fifo(), "-f", "json")
    assert done.code == 0, done.stderr
    data = orjson.loads(done.stdout)
    assert data["identical"] and data["reasons_differing"] == 4
    said = {r["fields"][0]["b"] for r in data["reasons_worded_differently"]}
    assert len(said) == 1 and "C++" in said.pop()  # one wording for every refusal
    dumps = {}
    for name, policy in (("fcfs", "fcfs"), ("cpp", fifo())):
        dumps[name] = tmp_path / f"{name}.dump.jsonl"
        assert cli("replay", trace, "-p", policy, "-o", dumps[name]).code == 0
    assert dumps["fcfs"].read_bytes() != dumps["cpp"].read_bytes()  # the words differ
    assert cli("diff", dumps["fcfs"], dumps["cpp"]).code == 0
    golden = cli("replay", trace, "-p", "fcfs", "--golden", dumps["cpp"])
    assert golden.code == 0, golden.stderr
    assert "4 rejection(s) worded differently there" in golden.stderr


def test_a_cpp_policy_is_opaque_to_the_stall_watch(cxx: str) -> None:
    """Its state lives in C++: the watch cannot compare it, so a C++ policy that returns
    empty batches is given the bound (docs/policies.md), never a stall it cannot see."""
    from schedcli.catalog.registry import build_policy
    from schedcli.model.task import PREFILL, Task

    policy = build_policy(fifo(), {})
    policy.submit([Task(1, 1, PREFILL, 4)])
    assert policy.fingerprint() is None
    policy.close()


def test_the_twin_matches_fcfs_on_the_bench_trace_with_the_header_parameters(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.replay_bench import generate

    trace = tmp_path / "bench.jsonl"
    generate(trace, 20_000)
    a = cli("replay", trace, "-p", "fcfs", "-f", "jsonl")
    b = cli("replay", trace, "-p", fifo(), "-f", "jsonl")
    assert (a.code, a.stdout) == (b.code, b.stdout) and a.code == 0
    assert len(a.lines) > 500


@pytest.mark.parametrize(
    "cxx", [b for b in BUILDS if b[1] == "payload"], indirect=True, ids=lambda b: f"{b[0]}-{b[1]}"
)
def test_what_the_cpp_scheduler_frees_is_reused_by_its_next_tasks_through_the_shims_own_heap(
    cxx: str,
) -> None:
    """The scheduler's allocations, compiled into the extension, go through the shim's heap
    (docs/cxx.md, "Cost"): the blocks a batch frees wait there for the next submits, not in
    malloc's free lists. The extension defines no operator new or delete for others to
    bind to: another library's allocations never come there."""
    from schedcli.catalog.registry import build_policy
    from schedcli.model.task import PREFILL, Task

    policy = build_policy(fifo(), {})
    shim = policy._shim
    for tid in range(1, 200):
        assert policy.try_submit([Task(tid, tid, PREFILL, 4)]) is None
    kept = shim.heap_kept()
    while policy.has_work():
        assert policy.get_work()
    freed = shim.heap_kept()
    assert freed > kept  # the batches' tasks, freed by the scheduler, wait for reuse
    for tid in range(200, 300):
        assert policy.try_submit([Task(tid, tid, PREFILL, 4)]) is None
    assert shim.heap_kept() < freed  # and the next tasks take them
    policy.close()
    nm = shutil.which("nm")
    if nm is not None:
        out = subprocess.run(
            [nm, "-D", "--defined-only", shim.__file__], capture_output=True, text=True, check=True
        ).stdout
        assert not re.search(r" _Zn[wa]|_Zd[la]", out), out


@pytest.mark.parametrize("cxx", EVERY_SHAPE, indirect=True, ids=[s for _, s in EVERY_SHAPE])
def test_a_cpp_policy_dropping_the_tasks_it_handed_back_on_a_thread_of_its_own_replays_as_fcfs(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    """The shim's identity marks are given back to their pool by whichever thread drops a
    task's last copy: here the scheduler's own thread, long after the history forgot the
    task, while the calling thread marks new ones (the pool locks once a thread exists)."""
    sys.path.insert(0, str(ROOT))
    from bench.replay_bench import generate

    trace = tmp_path / "bench.jsonl"
    generate(trace, 20_000)
    threaded = (
        f"cxx:{SCHEDULERS / 'threaded_scheduler.h'}=schedcli_test::ThreadedFifoScheduler::create("
        "max_batch_tokens=544, max_num_seqs=64, max_prefill_chunk_size=256, keep=5000)"
    )
    a = cli("replay", trace, "-p", "fcfs", "-f", "jsonl")
    b = cli("replay", trace, "-p", threaded, "-f", "jsonl")
    assert (a.code, a.stdout) == (b.code, b.stdout) and a.code == 0, b.stderr
    assert len(a.lines) > 500


@pytest.mark.parametrize(
    ("how", "signal_name"),
    [(1, "SIGSEGV"), (2, "SIGABRT"), (3, "SIGABRT"), (5, None)],
    ids=["segfault", "abort", "failed-assert", "unknown-tid"],
)
def test_a_crash_in_the_cpp_is_exit_3_at_its_step_and_line_with_the_dump_kept_partial(
    cxx: str, cli: Cli, tmp_path: Path, how: int, signal_name: str | None
) -> None:
    ops = [{"op": "submit", "tid": i, "sid": i, "kind": "prefill", "size": 4} for i in range(1, 4)]
    ops += [{"op": "get_work"}] * 3
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    out = tmp_path / "out.jsonl"
    done = cli("replay", trace, "-p", crashing(3, how), "-f", "jsonl", "-o", out)
    assert done.code == 3, done.stderr
    assert "broke the Scheduler contract at step 2 (line 7): get_work:" in done.stderr
    if signal_name is not None:
        assert signal_name in done.stderr
    else:
        assert "returned tid 999999, which is not queued: it was never given" in done.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["step"] for r in records if "step" in r and "batch" in r] == [0, 1]
    assert records[-1]["partial"]["steps"] == 2


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_hang_in_the_cpp_is_ended_by_a_stop_signal_like_any_replay(
    cxx: str, tmp_path: Path, sig: int, code: int
) -> None:
    ops = [{"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4}, {"op": "get_work"}]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    out = tmp_path / "out.jsonl"
    args = ["replay", str(trace), "-p", crashing(1, 4), "-f", "jsonl", "-o", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", *args], stderr=subprocess.PIPE, env=dict(os.environ)
    )
    try:
        # Spinning in the endless get_work once it has used more CPU than a start takes.
        deadline = time.monotonic() + 120
        while _cpu_seconds(proc.pid) < 4.0:  # the command's process, under its supervisor
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:  # never left spinning, whatever failed
            proc.kill()
            proc.wait()
    assert b"schedcli: " + (b"interrupted" if code == 130 else b"terminated") in proc.stderr.read()
    assert b'"partial"' in out.read_bytes().splitlines()[-1]


def _cpu_seconds(pid: int) -> float:
    """CPU used by ``pid`` and its children (the process that runs the command once the C++
    is loaded is the child of the one started: runtimes/supervisor.py)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        used += sum(_cpu_seconds(int(child)) for child in children)
    return used


def test_an_id_the_interface_cannot_hold_is_bad_input_at_its_line(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    ops = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
        {"op": "submit", "tid": 2**31, "sid": 1, "kind": "decode", "size": 1},
    ]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    done = cli("replay", trace, "-p", fifo())
    if cxx == "seed":  # a 32-bit TaskId
        assert done.code == 2
        assert f"{trace}:3: tid 2147483648 does not fit the interface's TaskId" in done.stderr
    else:  # 64 bits
        assert done.code == 0, done.stderr
    named = write(tmp_path / "n.jsonl", {"schedcli": 1}, [{**ops[0], "tid": "a"}])
    done = cli("replay", named, "-p", fifo())
    assert done.code == 2 and f"{named}:2: tid 'a' is not an integer" in done.stderr


@pytest.mark.parametrize("cxx", BUILDS, indirect=True, ids=[f"{c}-{s}" for c, s in BUILDS])
def test_the_shim_builds_warning_free_under_werror_against_every_interface_shape(
    cxx: str, cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CXXFLAGS", "-Wall -Wextra -Werror")
    ops = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 2, "tokens": [3, 4]},
        {"op": "get_work", "expect": [1]},
    ]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    done = cli("replay", trace, "-p", fifo(), "--check")
    assert done.code == 0, done.stderr


@pytest.mark.parametrize("cxx", BUILDS, indirect=True, ids=[f"{c}-{s}" for c, s in BUILDS])
def test_a_token_the_interface_cannot_hold_is_bad_input_at_its_line(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    ops = [{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1, "tokens": [-5]}]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    done = cli("replay", trace, "-p", fifo())
    if cxx == "payload":  # Token is std::uint64_t
        assert done.code == 2
        assert f"{trace}:2: token -5 does not fit the interface's Token (0.." in done.stderr
    else:  # std::int64_t
        assert done.code == 0, done.stderr


OPAQUE = [
    {
        "op": "submit",
        "tid": 1,
        "sid": 1,
        "kind": "prefill",
        "size": 4,
        "position": 12,
        "prepared": {"size": 16, "offset": 8},
    },
    {
        "op": "submit",
        "tid": 2,
        "sid": 2,
        "kind": "prefill",
        "size": 2,
        "position": 5,
        "tokens": [5, 6],
    },
]


@pytest.mark.parametrize("cxx", BUILDS, indirect=True, ids=[f"{c}-{s}" for c, s in BUILDS])
def test_an_opaque_task_crosses_as_a_prepared_input_of_its_backing_size(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    """TokenCheck takes a prepared input whose slice lies inside it, and refuses a task
    with an offset but no work: what an opaque task is where the shape has none."""
    policy = (
        f"cxx:{SCHEDULERS / 'token_check.h'}=std::make_unique<schedcli_test::TokenCheck>"
        "(untokened_position=40)"
    )
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, OPAQUE)
    done = cli("replay", trace, "-p", policy, "-f", "jsonl", "--drain")
    assert done.code == 0, done.stderr
    outcomes = {
        r["tids"][0]: r["accepted"] for r in map(orjson.loads, done.lines) if "accepted" in r
    }
    assert outcomes == ({} if cxx == "payload" else {1: False})
    batches = [r["batch"][0]["tid"] for r in map(orjson.loads, done.lines) if r.get("batch")]
    assert batches == ([1, 2] if cxx == "payload" else [2])


@pytest.mark.parametrize("cxx", [b for b in BUILDS if b[1] == "payload"][:1], indirect=True)
def test_a_prepared_input_swapped_for_tokens_breaks_the_contract_naming_both(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, OPAQUE)
    done = cli("replay", trace, "-p", crashing(1, 23))
    assert done.code == 3, done.stderr
    assert (
        "returned task 1 with payload tokens [out of range], but it was submitted with "
        "payload a prepared input of 16 positions" in done.stderr
    )


def test_a_factory_that_returns_null_is_bad_usage_naming_the_parameters(cxx: str, cli: Cli) -> None:
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    done = cli("replay", trace, "-p", fifo(b=8, c=16))
    assert done.code == 2
    assert "FifoScheduler::create returned null for max_batch_tokens=8" in done.stderr
    assert "max_prefill_chunk_size=16: the C++ refuses these parameters" in done.stderr


def test_a_compile_error_is_bad_input_with_the_compilers_first_error(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    header = tmp_path / "broken.h"
    header.write_text("#pragma once\nstruct Broken { int x = ; };\n")
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    done = cli("replay", trace, "-p", f"cxx:{header}=make_broken()")
    assert done.code == 2
    said = f"schedcli: policy 'cxx:{header}=make_broken()': the C++ build failed: {header}:2:"
    assert done.stderr.startswith(said) and "error" in done.stderr  # one line, said once
    assert "failed to start" not in done.stderr


def test_decode_first_needs_an_executorch_checkout_and_says_how_to_give_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("EXECUTORCH_ROOT", raising=False)
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    done = cli("replay", trace, "-p", "cxx:decode-first", cwd=tmp_path)
    assert done.code == 2 and "--executorch PATH, $EXECUTORCH_ROOT" in done.stderr
    done = cli("replay", trace, "-p", "cxx:decode-first", "--executorch", tmp_path, cwd=tmp_path)
    assert done.code == 2 and "is not an ExecuTorch checkout" in done.stderr
    done = cli("replay", trace, "--executorch", tmp_path / "nope", cwd=tmp_path)
    assert done.code == 2 and "--executorch:" in done.stderr and "no such folder" in done.stderr
    assert "EXECUTORCH_ROOT" not in os.environ  # the option's setting ends with the run


def test_a_project_names_its_cpp_policies_and_policies_lists_them(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli.cxx]\nexecutorch = "' + str(CPP / "later" / "executorch") + '"\n'
        "[tool.schedcli.cxx.policies]\n"
        f'fifo = "{SCHEDULERS / "fifo_scheduler.h"}=schedcli_test::FifoScheduler::create('
        'max_batch_tokens=544, max_num_seqs=64, max_prefill_chunk_size=256)"\n'
    )
    listed = cli("policies", "-f", "json", cwd=tmp_path)
    assert listed.code == 0, listed.stderr
    names = {p["name"]: p for p in orjson.loads(listed.stdout)}
    assert "cxx:fifo" in names and "cxx:decode-first" in names
    assert [p["name"] for p in names["cxx:fifo"]["params"]] == [
        "max_batch_tokens",
        "max_num_seqs",
        "max_prefill_chunk_size",
    ]
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    done = cli("replay", trace, "-p", "cxx:fifo", "-P", "max_num_seqs=2", cwd=tmp_path)
    assert done.code == 2 and "is not an integer" in done.stderr  # its ids are strings
    bad = cli("replay", trace, "-p", "cxx:fifoo", cwd=tmp_path)
    assert bad.code == 2 and "unknown C++ policy 'cxx:fifoo'" in bad.stderr


@pytest.mark.parametrize("cxx", EVERY_SHAPE, indirect=True, ids=[s for _, s in EVERY_SHAPE])
def test_a_threaded_recording_of_the_cpp_replays_exactly_under_it_clear_included(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    from schedcli.record import include_dir

    policy = fifo(b=64, n=6, c=32)
    params = '"{\\"max_batch_tokens\\":64,\\"max_num_seqs\\":6,\\"max_prefill_chunk_size\\":32}"'
    binary = tmp_path / "record"
    built = subprocess.run(
        [
            os.environ["CXX"],
            "-std=c++17",
            "-O1",
            "-pthread",
            f"-I{include_dir()}",
            "-isystem",
            str(CPP / cxx),
            f'-DPOLICY_HEADER="{SCHEDULERS / "fifo_scheduler.h"}"',
            "-DPOLICY_MAKE=schedcli_test::FifoScheduler::create(64, 6, 32)",
            f"-DPOLICY_NAME={orjson.dumps(policy).decode()}",
            f"-DPOLICY_PARAMS={params}",
            str(CPP / "record_threads.cpp"),
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    recording = tmp_path / "rec.jsonl"
    subprocess.run([str(binary), str(recording)], check=True)
    assert recording.read_bytes().splitlines()[-1] == b'{"op":"clear"}'
    text = recording.read_text()
    assert '"tokens":[' in text
    assert ('"prepared":{' in text) == (cxx == "payload")  # opaque where the shape has them
    # Its header names the inline spec it was built from: a trace may only name code, so
    # the replay gives it with -p (#55).
    done = cli("replay", recording, "-p", policy, "--check", "--require-all")
    assert done.code == 0, done.stderr
    assert "checked" in done.stderr


def _project(tmp_path: Path, shape: str) -> Path:
    """A project naming the FIFO twin ``cxx:fifo`` and replaying its traces/ under it."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        "[tool.schedcli]\ntraces = ['traces']\n"
        "[tool.schedcli.folders.traces]\npolicy = 'cxx:fifo'\n"
        f"[tool.schedcli.cxx]\nexecutorch = '{CPP / shape / 'executorch'}'\n"
        "[tool.schedcli.cxx.policies]\n"
        f"fifo = '{SCHEDULERS / 'fifo_scheduler.h'}=schedcli_test::FifoScheduler::create("
        "max_batch_tokens=544, max_num_seqs=64, max_prefill_chunk_size=256)'\n"
        f"crash = '{SCHEDULERS / 'crashing_scheduler.h'}=std::make_unique<"
        "schedcli_test::CrashingScheduler>(crash_at=9, how=1)'\n"
    )
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            f'{{"sid": {i}, "arrival": 0, "prompt_tokens": {90 + 37 * i}, '
            f'"output_tokens": {1 + i % 4}}}\n'
            for i in range(12)
        )
    )
    return workload


def test_every_command_takes_a_cpp_policy(
    cxx: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXECUTORCH_ROOT")  # the project says where
    workload = _project(tmp_path, cxx)
    trace = tmp_path / "traces" / "sim.jsonl"

    def ok(*args: str | Path) -> bytes:
        done = cli(*args, cwd=tmp_path)
        assert done.code == 0, (args, done.stderr)
        return done.stdout

    assert (
        orjson.loads(ok("simulate", workload, "-p", "cxx:fifo", "-o", trace, "-f", "json"))[
            "finished"
        ]
        == 12
    )
    assert orjson.loads(trace.read_bytes().splitlines()[0])["policy"] == "cxx:fifo"
    ok("replay", trace, "--check", "--require-all", "-o", "/dev/null")
    ok("validate", trace)
    golden = tmp_path / "g.jsonl"
    ok("replay", trace, "--golden", golden, "--update-golden", "-o", "/dev/null")
    ok("replay", trace, "--golden", golden, "-o", "/dev/null")
    assert orjson.loads(ok("diff", trace, "--a", "fcfs", "--b", "cxx:fifo", "-f", "json"))[
        "identical"
    ]
    apart = cli("diff", trace, "--a", "cxx:fifo", "--b-param", "max_num_seqs=1", cwd=tmp_path)
    assert apart.code == 1, apart.stderr
    assert orjson.loads(ok("stats", trace, "-f", "json"))["dispatched"] > 0
    explained = ok("explain", trace, "--step", "3")
    assert b"no reasons given" in explained
    ok("check", "--update")
    assert b"1 trace: 1 passed" in ok("check")
    small = tmp_path / "small.jsonl"
    crashed = cli("replay", trace, "-p", "cxx:crash", "-o", "/dev/null", cwd=tmp_path)
    assert crashed.code == 3 and "SIGSEGV" in crashed.stderr
    ok("shrink", trace, "-p", "cxx:crash", "--until", "contract", "-o", small)
    assert len(small.read_bytes().splitlines()) < len(trace.read_bytes().splitlines())
    again = cli("replay", small, "-p", "cxx:crash", "-o", "/dev/null", cwd=tmp_path)
    assert again.code == 3 and "SIGSEGV" in again.stderr
    # A pool's workers are other processes, started elsewhere: they build the same spec.
    swept = tmp_path / "sweep.jsonl"
    ok("sweep", workload, "-p", "cxx:fifo", "-p", "fcfs", "-j", "2", "-o", swept, "--fresh")
    rows = [orjson.loads(line) for line in swept.read_bytes().splitlines()]
    by_policy = {r["policy"]: r for r in rows if "policy" in r}
    assert set(by_policy) == {"cxx:fifo", "fcfs"}


def test_a_worker_started_anywhere_resolves_the_spec_its_parent_resolved(
    cxx: str, tmp_path: Path
) -> None:
    from schedcli.runtimes.executorch.spec import resolve, worker_env

    _project(tmp_path, cxx)
    here = resolve("cxx:fifo", env={}, cwd=tmp_path)
    elsewhere = Path("/")  # no pyproject.toml at or above it
    with pytest.raises(Exception, match="unknown C\\+\\+ policy 'cxx:fifo'"):
        resolve("cxx:fifo", env={}, cwd=elsewhere)
    assert resolve("cxx:fifo", env=worker_env(here), cwd=elsewhere) == here


@pytest.mark.needs("ray")
def test_a_ray_sweep_gives_the_records_the_local_pool_gives(
    cxx: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXECUTORCH_ROOT")
    workload = _project(tmp_path, cxx)
    args = [workload, "-p", "cxx:fifo", "--grid", "max_num_seqs=2,64", "--fresh", "-j", "2"]
    rows = {}
    for backend in ("local", "ray"):
        out = tmp_path / f"{backend}.jsonl"
        done = cli("sweep", *args, "--backend", backend, "-o", out, cwd=tmp_path)
        assert done.code == 0, done.stderr
        rows[backend] = sorted(out.read_bytes().splitlines())
    assert rows["ray"] == rows["local"] and len(rows["local"]) == 2


# ExecuTorch's own DecodeFirstScheduler, where a checkout is named (never committed here):
# SCHEDCLI_TEST_EXECUTORCH=~/src/executorch pytest tests/runtimes/test_cxx_policy.py
CHECKOUT = os.environ.get("SCHEDCLI_TEST_EXECUTORCH")
needs_checkout = pytest.mark.skipif(not CHECKOUT, reason="SCHEDCLI_TEST_EXECUTORCH not set")


@needs_checkout
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=traffic())
def test_executorchs_decode_first_batches_as_our_reference_port_on_random_traffic(
    monkeypatch: pytest.MonkeyPatch, cxx_cache: Path, ops: list[dict[str, object]]
) -> None:
    """Call for call, the same answers; where the port hands back an earlier task under a
    reused tid (ExecuTorch's stale cancelled decode, see
    test_executorchs_second_cancel_of_a_resubmitted_tid_breaks_the_contract_naming_it), the
    C++ breaks the contract at that call naming the tid, and the run ends there."""
    from schedcli.catalog.registry import build_policy
    from schedcli.model.errors import PolicyAborted
    from schedcli.model.task import Task

    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CHECKOUT))
    params = {"max_batch_tokens": 12, "max_decode_sequences": 3, "max_prefill_chunk_size": 6}
    cpp = build_policy("cxx:decode-first", params)
    port = build_policy("decode-first", {**params, "compat": "reference"})
    queued: dict[object, Task] = {}  # the port's task handed in last under each tid

    def tids(tasks: list[Task]) -> list[object]:
        return [t.tid for t in tasks]

    def stale(tasks: list[Task]) -> Task | None:
        return next((t for t in tasks if queued.get(t.tid) is not t), None)

    for op in ops:
        if op["op"] == "submit":
            specs = op["tasks"]
            assert isinstance(specs, list)
            groups = [
                [
                    Task(
                        s["tid"],
                        s["sid"],
                        s["kind"],
                        s["size"],
                        produce_output=s.get("produce_output"),
                        tokens=s.get("tokens"),
                        position=s.get("position"),
                        prepared=(
                            (s["prepared"]["size"], s["prepared"]["offset"])
                            if "prepared" in s
                            else None
                        ),
                    )
                    for s in specs
                ]
                for _ in range(2)
            ]
            accepted = port.submit(groups[1])
            assert cpp.submit(groups[0]) == accepted
            if accepted:
                queued.update((t.tid, t) for t in groups[1])
            assert cpp.has_work() == port.has_work()
            continue
        if op["op"] == "get_work":
            theirs, ours = port.get_work(), cpp.get_work
        elif op["op"] == "cancel":
            sid = op["sid"]
            assert isinstance(sid, int)
            theirs, ours = port.cancel(sid), functools.partial(cpp.cancel, sid)
        else:
            theirs, ours = port.clear(), cpp.clear
        earlier = stale(theirs)
        if earlier is not None:
            with pytest.raises(PolicyAborted, match=rf"from {op['op']} .*tid {earlier.tid}\b"):
                ours()
            return
        if op["op"] == "clear":  # the same tasks, in each one's own order
            assert sorted(tids(ours())) == sorted(tids(theirs))  # type: ignore[type-var]
        else:
            assert tids(ours()) == tids(theirs)
        assert cpp.has_work() == port.has_work()


@needs_checkout
def test_executorchs_second_cancel_of_a_resubmitted_tid_breaks_the_contract_naming_it(
    monkeypatch: pytest.MonkeyPatch, cxx_cache: Path
) -> None:
    """ExecuTorch's DecodeFirstScheduler::cancel leaves a cancelled decode in decode_queue_
    (only get_work pops it, from the front) and release_ matches it to pending_ by tid alone:
    once the tid is queued again, the next cancel of its session hands back the old, moved-
    from entry (and drops the new one from pending_ but not from the queue). The port under
    compat=reference hands back the earlier task too; the C++ call is the contract broken."""
    from schedcli.catalog.registry import build_policy
    from schedcli.model.errors import PolicyAborted

    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CHECKOUT))
    params = {"max_batch_tokens": 12, "max_decode_sequences": 3, "max_prefill_chunk_size": 6}
    cpp = build_policy("cxx:decode-first", params)
    port = build_policy("decode-first", {**params, "compat": "reference"})

    def tids(tasks: list[Task]) -> list[object]:
        return [t.tid for t in tasks]

    def tasks(tid: int, sid: int = 0) -> list[list[Task]]:
        return [[Task(tid, sid, "decode", 1)] for _ in range(2)]

    first = tasks(1)
    assert cpp.submit(first[0]) and port.submit(first[1])
    assert tids(cpp.cancel(0)) == tids(port.cancel(0)) == [1]
    for tid in [*range(2, 18), 0]:
        others = tasks(tid, sid=1 + tid % 3)
        assert cpp.submit(others[0]) and port.submit(others[1])
    again = tasks(1)
    assert cpp.submit(again[0]) and port.submit(again[1])
    (handed_back,) = port.cancel(0)
    assert handed_back is first[1][0]  # the earlier task, not the one queued now
    with pytest.raises(
        PolicyAborted,
        match=r"returned from cancel a task with tid 1 whose tokens \(or prepared input\) "
        r"pointer was moved out or reset: an earlier task with that tid",
    ):
        cpp.cancel(0)


@needs_checkout
def test_a_threaded_recording_of_executorchs_decode_first_replays_exactly_under_it(
    monkeypatch: pytest.MonkeyPatch, cxx_cache: Path, cli: Cli, tmp_path: Path
) -> None:
    from schedcli.record import include_dir

    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    root = Path(str(CHECKOUT)).expanduser().resolve()
    binary = tmp_path / "record"
    params = (
        '"{\\"max_batch_tokens\\":64,\\"max_decode_sequences\\":4,\\"max_prefill_chunk_size\\":32}"'
    )
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-pthread",
            f"-I{include_dir()}",
            "-isystem",
            str(root.parent),
            "-DPOLICY_HEADER=<executorch/extension/llm/batching/decode_first_scheduler.h>",
            "-DPOLICY_MAKE=executorch::extension::llm::batching::DecodeFirstScheduler::"
            "create(64, 4, 32)",
            '-DPOLICY_NAME="cxx:decode-first"',
            f"-DPOLICY_PARAMS={params}",
            str(CPP / "record_threads.cpp"),
            "-o",
            str(binary),
        ],
        check=True,
    )
    recording = tmp_path / "rec.jsonl"
    subprocess.run([str(binary), str(recording)], check=True)
    done = cli("replay", recording, "--check", "--require-all", "--executorch", root)
    assert done.code == 0, done.stderr
    port = cli("replay", recording, "-p", "decode-first", "-P", "compat=reference", "--check")
    assert port.code == 0, port.stderr  # the reference's port takes the same batches
    apart = cli(
        "diff",
        recording,
        "--a",
        "decode-first",
        "--b",
        "cxx:decode-first",
        "--executorch",
        root,
        "-f",
        "json",
    )
    assert apart.code == 1  # the reference's two outputs in one batch: our fix


def test_tasks_cross_with_their_position_and_exactly_their_slices_tokens(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    policy = (
        f"cxx:{SCHEDULERS / 'token_check.h'}=std::make_unique<schedcli_test::TokenCheck>"
        "(untokened_position=40)"
    )
    ops = [
        {
            "op": "submit",
            "tid": 1,
            "sid": 1,
            "kind": "prefill",
            "size": 3,
            "position": 5,
            "tokens": [5, 6, 7],
        },
        {
            "op": "submit",
            "tid": 2,
            "sid": 2,
            "kind": "prefill",
            "size": 2,
            "position": 9,
            "tokens": [1, 2],
        },
        {"op": "submit", "tid": 3, "sid": 3, "kind": "decode", "size": 1},
        {"op": "submit", "tid": 4, "sid": 3, "kind": "decode", "size": 1, "position": 40},
        {"op": "submit", "tid": 5, "sid": 4, "kind": "decode", "size": 1, "position": 41},
    ]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, ops)
    done = cli("replay", trace, "-p", policy, "-f", "jsonl", "--drain")
    assert done.code == 0, done.stderr
    outcomes = {
        r["tids"][0]: r["accepted"] for r in map(orjson.loads, done.lines) if "accepted" in r
    }
    assert outcomes == {2: False, 5: False}  # the others were accepted, silently
    batches = [r["batch"][0]["tid"] for r in map(orjson.loads, done.lines) if r.get("batch")]
    assert batches == [1, 3, 4]


def test_no_compiler_is_bad_usage_saying_what_to_install(
    cxx: str, cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    done = cli("replay", trace, "-p", fifo())
    assert done.code == 2 and "CXX='no-such-compiler-xyz' is not a program on PATH" in done.stderr
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))  # no c++, g++ or clang++ here
    done = cli("validate", trace, "-p", fifo())
    assert done.code == 2 and "no C++ compiler found" in done.stderr
    assert "apt install g++" in done.stderr


def test_a_misspelt_cxx_key_is_named_with_the_one_meant(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.schedcli.cxx]\nexecutorh = "x"\n')
    trace = ROOT / "traces" / "long-prompts-and-chat.jsonl"
    done = cli("replay", trace, "-p", "cxx:decode-first", cwd=tmp_path)
    assert done.code == 2
    assert "[tool.schedcli.cxx] has no key 'executorh' (did you mean 'executorch'?)" in done.stderr


# --- #54: a C++ scheduler that ends the process, changes a task or returns one twice ---------

STEP_2 = "broke the Scheduler contract at step 2 (line 7): get_work: "


def _three_tasks(path: Path, policy: str = "fcfs", expect: bool = False) -> Path:
    ops: list[dict[str, object]] = [
        {"op": "submit", "tid": i, "sid": i, "kind": "prefill", "size": 4} for i in range(1, 4)
    ]
    ops += [{"op": "get_work", **({"expect": [i]} if expect else {})} for i in range(1, 4)]
    return write(path, {"schedcli": 1, "policy": policy}, ops)


@pytest.mark.parametrize(
    ("how", "called"),
    [(6, "exit(0)"), (7, "_Exit(0)"), (8, "quick_exit(0)"), (9, "exit(0)"), (10, "_exit(0)")],
    ids=["exit", "_Exit", "quick_exit", "std::exit", "_exit"],
)
def test_a_cpp_scheduler_that_calls_an_exit_function_breaks_the_contract_at_its_step(
    cxx: str, cli: Cli, tmp_path: Path, how: int, called: str
) -> None:
    out = tmp_path / "out.jsonl"
    done = cli("replay", _three_tasks(tmp_path / "t.jsonl"), "-p", crashing(3, how), "-o", out)
    assert done.code == 3, done.stderr
    assert STEP_2 + f"the C++ scheduler called {called} in get_work" in done.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert records[-1]["partial"]["steps"] == 2  # flushed, and marked partial


@pytest.mark.parametrize(
    ("how", "ended", "code"),
    [(6, "called exit(0)", 3), (11, "exit status 0", 3), (12, "signal 9, SIGKILL", 137)],
    ids=["exit", "exit_group", "sigkill"],
)
def test_a_run_whose_cpp_scheduler_ends_the_process_is_never_exit_0(
    cxx: str, tmp_path: Path, how: int, ended: str, code: int
) -> None:
    """The console script, as a user runs it: what the shim cannot catch (a raw exit_group
    system call, SIGKILL) ends the process it runs in, and the process the shell waits for
    answers, naming the call: exit 3 for an exit, the signal's status for a kill (which may
    have come from outside)."""
    trace = _three_tasks(tmp_path / "t.jsonl", expect=True)
    args = ["replay", str(trace), "-p", crashing(3, how), "--check"]
    done = subprocess.run(
        [sys.executable, "-m", "schedcli", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == code, done.stderr
    assert ended in done.stderr
    assert "get_work" in done.stderr
    if how != 6:  # the process ended: nothing can say what was checked
        assert "checked" not in done.stderr


@pytest.mark.parametrize("how", [6, 11], ids=["exit", "exit_group"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_suite_whose_cpp_worker_ends_fails_that_trace_and_checks_the_rest(
    cxx: str, cli: Cli, tmp_path: Path, how: int, jobs: str
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    # The folder names the C++ policy (a trace header may not supply its spec); the FIFO it
    # is until its third call passes the fine trace.
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.schedcli.folders."suite"]\npolicy = "{crashing(3, how)}"\n'
    )
    _three_tasks(suite / "a_breaks.jsonl", expect=True)
    write(
        suite / "b_fine.jsonl",
        {"schedcli": 1, "policy": "fcfs"},
        [
            {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
            {"op": "get_work", "expect": [1]},
        ],
    )
    done = cli("check", suite, "--jobs", jobs, "--no-strict", "--update", cwd=tmp_path)
    assert done.code != 0, done.stdout
    shown = done.stdout.decode() + done.stderr
    assert "a_breaks.jsonl" in shown and "b_fine.jsonl" in shown
    if how == 11:
        assert "ended (exit status 0) without a verdict" in shown
    else:
        assert "called exit(0) in get_work" in shown


def test_pytest_fails_the_item_of_a_trace_whose_cpp_scheduler_ends_the_process(
    cxx: str, tmp_path: Path
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    _three_tasks(suite / "breaks.jsonl", expect=True)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli]\ntraces = ["suite"]\npytest = true\ngolden = "optional"\n'
        f'[tool.schedcli.folders."suite"]\npolicy = "{crashing(3, 11)}"\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "--schedcli",
            "suite",
            "-q",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout
    assert "ended (exit status 0) without a verdict" in done.stdout


@pytest.mark.parametrize(
    ("how", "signal_name"), [(13, "signal 15 (SIGTERM)"), (14, "signal 2 (SIGINT)")]
)
def test_a_stop_signal_the_cpp_scheduler_raises_itself_is_its_fault_not_a_users_stop(
    cxx: str, cli: Cli, tmp_path: Path, how: int, signal_name: str
) -> None:
    done = cli("replay", _three_tasks(tmp_path / "t.jsonl"), "-p", crashing(3, how))
    assert done.code == 3, done.stderr
    assert STEP_2 + f"the C++ scheduler raised {signal_name} on itself" in done.stderr
    assert "terminated" not in done.stderr and "interrupted" not in done.stderr


@pytest.mark.parametrize(
    ("how", "said"),
    [
        (15, "returned tid 2 twice: its get_work had returned it already, 1 call before this"),
        (16, "returned tid 3 twice in one get_work"),
        (5, "returned tid 999999, which is not queued: it was never given"),
    ],
    ids=["a-later-call", "one-answer", "never-given"],
)
def test_a_task_returned_twice_is_named_with_where_it_was_returned_first(
    cxx: str, cli: Cli, tmp_path: Path, how: int, said: str
) -> None:
    done = cli("replay", _three_tasks(tmp_path / "t.jsonl"), "-p", crashing(3, how))
    assert done.code == 3, done.stderr
    assert STEP_2 + "the C++ scheduler " + said in done.stderr


@pytest.mark.parametrize(
    ("how", "field", "now", "was"),
    [
        (17, "sid", "4", "3"),
        (18, "size", "178", "4"),
        (19, "kind", "decode", "prefill"),
        (20, "produce_output", "false", "true"),
        (21, "position", "0", "-1"),
        (22, "offset", "1", "0"),
        (23, "tokens", "[7, 7, 7, 7]", "none"),
    ],
)
def test_a_task_the_cpp_scheduler_changed_breaks_the_contract_naming_the_field(
    cxx: str, cli: Cli, tmp_path: Path, how: int, field: str, now: str, was: str
) -> None:
    done = cli("replay", _three_tasks(tmp_path / "t.jsonl"), "-p", crashing(3, how))
    assert done.code == 3, done.stderr
    said = f"returned task 3 with {field} {now}, but it was submitted with {field} {was}"
    assert STEP_2 + "the C++ scheduler " + said in done.stderr


TWIN = "tests.plugin_policies:BreakingTwin"


def _where_broken(stderr: str) -> str | None:
    found = re.search(r"broke the Scheduler contract at step \d+ \([^)]*\)", stderr)
    return found.group(0) if found else None


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    ops=traffic(),
    crash_at=st.integers(1, 6),
    how=st.sampled_from([5, 15, 16, 17, 18, 19, 20, 21, 22, 23]),
)
def test_a_cpp_scheduler_that_hands_back_what_it_should_not_breaks_where_a_python_one_does(
    cxx: str,
    cli: Cli,
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[dict[str, object]],
    crash_at: int,
    how: int,
) -> None:
    """The second path to the verdict: a Python policy handing back the same wrong thing at
    the same call. Both are the contract broken at the same step and line, or neither is."""
    trace = write(tmp_path_factory.mktemp("twin") / "t.jsonl", {"schedcli": 1}, ops)
    ours = cli("replay", trace, "-p", crashing(crash_at, how), "--drain", "-f", "jsonl")
    twin = cli(
        "replay",
        trace,
        "-p",
        TWIN,
        "-P",
        f"crash_at={crash_at}",
        "-P",
        f"how={how}",
        "--drain",
        "-f",
        "jsonl",
    )
    assert ours.code == twin.code, (ours.stderr, twin.stderr)
    assert _where_broken(ours.stderr) == _where_broken(twin.stderr), (ours.stderr, twin.stderr)


def test_an_earlier_task_under_a_reused_tid_is_not_taken_for_the_one_queued_now(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    """#55: what comes back is matched to the task object handed in, not to its number. The
    scheduler hands back, at its second get_work, the task it handed back at its first;
    tid 1 is queued again by then, with the same fields."""
    ops: list[dict[str, object]] = [
        {"op": "submit", "tid": 1, "sid": 5, "kind": "decode", "size": 1},
        {"op": "get_work"},
        {"op": "submit", "tid": 1, "sid": 5, "kind": "decode", "size": 1},
        {"op": "get_work"},
    ]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1}, ops)
    done = cli("replay", trace, "-p", crashing(2, 15))
    assert done.code == 3, done.stderr
    assert (
        "broke the Scheduler contract at step 1 (line 5): get_work: the C++ scheduler returned "
        "from get_work an earlier task with tid 1, not the one queued under that tid now (its "
        "get_work had returned that one, 1 call before this one)"
    ) in done.stderr
    twin = cli("replay", trace, "-p", TWIN, "-P", "crash_at=2", "-P", "how=15")
    assert twin.code == 3 and _where_broken(twin.stderr) == _where_broken(done.stderr)


def _verdict(cli: Cli, trace: Path, *policy: str) -> tuple[int, str | None, list[object]]:
    """A replay's exit code, where it broke the contract, and its records: a rejection's
    words and the order of clear()'s dropped tasks (an unordered map's, in the C++) aside."""
    done = cli("replay", trace, *policy, "-f", "jsonl", "--drain")
    records: list[object] = []
    for line in done.lines:
        r = orjson.loads(line)
        r.pop("reason", None)
        if r.get("op") == "clear" or "dropped" in r:
            r["dropped"] = sorted(r.get("dropped", []), key=repr)
        if "partial" in r:
            r["partial"].pop("reason", None)
        records.append(r)
    return done.code, _where_broken(done.stderr), records


@needs_checkout
@settings(max_examples=int(os.environ.get("SCHEDCLI_DIFFERENTIAL_EXAMPLES", "200")),
          deadline=None, suppress_health_check=list(HealthCheck))  # fmt: skip
@given(ops=traffic())
def test_executorchs_decode_first_and_our_reference_port_give_one_verdict_line_and_records(
    monkeypatch: pytest.MonkeyPatch,
    cxx_cache: Path,
    cli: Cli,
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[dict[str, object]],
) -> None:
    """#55: the C++ and the port replay every trace alike, through the same ledger: a stale
    task ExecuTorch's scheduler hands back after a tid is reused is the contract broken at
    the same step and line under both, never credited to the task queued under that tid."""
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CHECKOUT))
    params = {"max_batch_tokens": 12, "max_decode_sequences": 3, "max_prefill_chunk_size": 6}
    trace = write(tmp_path_factory.mktemp("d") / "t.jsonl", {"schedcli": 1, "params": params}, ops)
    cpp = _verdict(cli, trace, "-p", "cxx:decode-first")
    port = _verdict(cli, trace, "-p", "decode-first", "-P", "compat=reference")
    assert cpp == port


@needs_checkout
def test_executorchs_stale_decode_after_a_reused_tid_is_cancelled_twice_breaks_as_the_port(
    monkeypatch: pytest.MonkeyPatch, cxx_cache: Path, cli: Cli, tmp_path: Path
) -> None:
    """The case #55 found: ExecuTorch's cancel hands back its earlier entry for the tid."""
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CHECKOUT))
    decode = {"op": "submit", "tid": 1, "sid": 5, "kind": "decode", "size": 1}
    ops = [decode, {"op": "cancel", "sid": 5}, decode, {"op": "cancel", "sid": 5}]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1}, [*ops, {"op": "get_work"}])
    cpp = _verdict(cli, trace, "-p", "cxx:decode-first")
    assert cpp[:2] == (3, "broke the Scheduler contract at step 0 (line 5)")
    assert cpp == _verdict(cli, trace, "-p", "decode-first", "-P", "compat=reference")


@pytest.mark.parametrize("how", [24, 25], ids=["tokens-copied", "a-token-past-the-slice"])
def test_a_task_whose_tokens_the_cpp_scheduler_copied_is_still_that_task(
    cxx: str, cli: Cli, tmp_path: Path, how: int
) -> None:
    """A scheduler may copy a task's token vector: the slice is compared by value, and the
    task is the one handed in (not 'an earlier task')."""
    ops: list[dict[str, object]] = [
        {"op": "submit", "tid": i, "sid": i, "kind": "prefill", "size": 2, "tokens": [i, i + 1]}
        for i in range(1, 4)
    ]
    ops += [{"op": "get_work", "expect": [i]} for i in range(1, 4)]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1}, ops)
    done = cli("replay", trace, "-p", crashing(2, how), "--check")
    assert done.code == 0, done.stderr


def test_a_task_whose_tokens_pointer_the_cpp_scheduler_reset_is_named_so(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    done = cli("replay", _three_tasks(tmp_path / "t.jsonl"), "-p", crashing(3, 26))
    assert done.code == 3, done.stderr
    assert STEP_2 + "the C++ scheduler returned from get_work a task with tid 3 whose " in (
        done.stderr
    )
    assert "pointer was moved out or reset" in done.stderr


def test_a_sweep_whose_cpp_worker_ends_its_process_is_the_contract_broken_not_a_crash(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        '{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 5}\n'
        '{"sid": 2, "arrival": 0.1, "prompt_tokens": 30, "output_tokens": 5}\n'
    )
    done = cli("sweep", workload, "-p", crashing(3, 11), "-p", "fcfs", "--jobs", "2", "--fresh")
    assert done.code == 3, done.stderr
    assert "a sweep worker ended without an answer" in done.stderr
    assert "internal error" not in done.stderr


def test_the_command_never_outlives_the_process_the_shell_waits_for(
    cxx: str, tmp_path: Path
) -> None:
    """Killed outright while the C++ spins, the supervisor takes the command with it."""
    ops = [{"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4}, {"op": "get_work"}]
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1}, ops)
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "replay", str(trace), "-p", crashing(1, 4)],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while _cpu_seconds(proc.pid) < 2.0:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert children, "the command runs in the supervisor's child"
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{c}").exists() and "Z" not in _state(c) for c in children):
            assert time.monotonic() < deadline, "the command outlived its supervisor"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _state(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


VARIANT_TYPES = """
#pragma once
// The declarations of upstream's proposal where a Task is a preparation or an execution
// task (pytorch/executorch extension/llm/batching/types.h in a proposal), trimmed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <variant>
namespace executorch { namespace extension { namespace llm { namespace batching {
using Token = std::uint64_t;
using SessionId = std::int64_t;
using Position = std::int32_t;
using TaskId = std::int64_t;
class PreparedInput {
 public:
  virtual ~PreparedInput() = default;
  virtual std::size_t position_count() const = 0;
};
struct Input {
  SessionId sid; bool produce_output; std::size_t offset; std::size_t size;
  std::shared_ptr<const PreparedInput> prepared; Position position;
};
struct ExecutionTask { TaskId tid; bool cancelled; Input input; bool is_decode; };
struct PrepareTask { TaskId tid; };
using Task = std::variant<PrepareTask, ExecutionTask>;
}}}}
"""


def test_an_interface_shape_schedcli_does_not_know_is_refused_in_its_own_words(
    cxx: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "executorch"
    batching = checkout / "extension" / "llm" / "batching"
    batching.mkdir(parents=True)
    (batching / "types.h").write_text(VARIANT_TYPES)
    shutil.copy(
        CPP / "tid64" / "executorch" / "extension" / "llm" / "batching" / "scheduler.h", batching
    )
    monkeypatch.setenv("EXECUTORCH_ROOT", str(checkout))
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, OPAQUE[1:])
    done = cli("replay", trace, "-p", fifo())
    assert done.code == 2
    assert "schedcli/shape.h" in done.stderr
    assert "batching::Task is not a struct with tid and input" in done.stderr


def test_a_checkout_named_otherwise_is_built_not_a_sibling_named_executorch(
    cxx: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """<executorch/...> must open the checkout given: the folder above it could hold another
    one named executorch (found by a new user: the sibling was built, silently)."""
    given = tmp_path / "et"
    shutil.copytree(CPP / cxx / "executorch", given)
    sibling = tmp_path / "executorch" / "extension" / "llm" / "batching"
    sibling.mkdir(parents=True)
    (sibling / "scheduler.h").write_text('#error "the sibling named executorch was built"\n')
    monkeypatch.setenv("EXECUTORCH_ROOT", str(given))
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1, "policy": "fcfs"}, OPAQUE[1:])
    done = cli("replay", trace, "-p", fifo(), "--drain")
    assert done.code == 0, done.stderr


@pytest.mark.parametrize("cxx", [b for b in BUILDS if b[1] == "payload"][:1], indirect=True)
def test_an_opaque_tasks_base_position_is_the_position_that_must_fit(
    cxx: str, cli: Cli, tmp_path: Path
) -> None:
    """What crosses is the backing's base (position - offset), not the slice's start."""

    def task(position: int) -> dict[str, object]:
        opaque = {"size": 2, "offset": 1}
        return {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 1,
                "position": position, "prepared": opaque}  # fmt: skip

    fits = write(tmp_path / "fits.jsonl", {"schedcli": 1, "policy": "fcfs"}, [task(2**31)])
    done = cli("replay", fits, "-p", fifo(), "--drain")
    assert done.code == 0, done.stderr  # base 2**31 - 1: a Position holds it
    past = write(tmp_path / "past.jsonl", {"schedcli": 1, "policy": "fcfs"}, [task(2**31 + 1)])
    done = cli("replay", past, "-p", fifo(), "--drain")
    assert done.code == 2
    assert f"{past}:2: position - prepared.offset 2147483648 does not fit" in done.stderr


# --- the bound calls (#58): the engine reaches the C++ without a Python frame -------------


@st.composite
def calls(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Calls of a task-level policy, with what the interface refuses mixed in: tids and
    sids it cannot hold, sizes it refuses, groups given as tuples or generators."""
    out: list[tuple[str, object]] = []
    serial = 0
    for _ in range(draw(st.integers(1, 30))):
        op = draw(
            st.sampled_from(["submit"] * 4 + ["get_work"] * 2 + ["has_work", "cancel", "clear"])
        )
        if op == "submit":
            group = []
            for _ in range(draw(st.integers(0, 3))):
                serial += 1
                tid = draw(st.sampled_from([serial, serial, 3, 2**70, "t"]))
                decode = draw(st.booleans())
                size = 1 if decode else draw(st.integers(0, 8))
                output = draw(st.sampled_from([None, None, True, False]))
                sid = draw(st.sampled_from([0, 1, 2, -(2**70)]))
                group.append((tid, sid, "decode" if decode else "prefill", size, output))
            out.append(("try_submit", (draw(st.sampled_from(["list", "tuple", "gen"])), group)))
        elif op == "cancel":
            out.append(("cancel", draw(st.sampled_from([0, 1, 2, "1", True, 2**70]))))
        else:
            out.append((op, None))
    return out


def _outcome(policy: object, name: str, arg: object, bound: bool) -> object:
    """One call, through the instance (its bound callables) or the class's method, and what
    it answered: the value (tasks as their tid and cancelled flag; the group's settled
    outputs) or the error's type and words."""
    tasks: list[Task] = []
    args: tuple[object, ...] = ()
    if name == "try_submit":
        assert isinstance(arg, tuple)
        kind, group = arg
        tasks = [Task(t, s, k, n, produce_output=o) for t, s, k, n, o in group]
        given = {"list": list, "tuple": tuple, "gen": lambda ts: (t for t in ts)}[kind](tasks)
        args = (given,)
    elif name == "cancel":
        args = (arg,)
    call = getattr(policy, name) if bound else getattr(type(policy), name).__get__(policy)
    try:
        answer = call(*args)
    except Exception as e:
        return ("error", type(e).__name__, str(e), [t.produce_output for t in tasks])
    if isinstance(answer, list):
        answer = [(t.tid, t.cancelled) for t in answer]
    return ("ok", answer, [t.produce_output for t in tasks])


@pytest.mark.parametrize("cxx", EVERY_SHAPE, indirect=True, ids=[s for _, s in EVERY_SHAPE])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=calls())
def test_a_cpp_policys_calls_cross_without_a_python_frame_answering_as_its_methods(
    cxx: str, script: list[tuple[str, object]]
) -> None:
    from schedcli.runtimes.executorch.policy import policy_class

    cls = policy_class(fifo(b=12, n=3, c=6))
    fast, slow = cls(), cls()
    for name in ("try_submit", "has_work", "get_work", "cancel", "clear"):
        # The instance's own callable, from the extension: no Python function in between.
        assert type(vars(fast)[name]).__name__ == "Bound", name
    for name, arg in script:
        assert _outcome(fast, name, arg, True) == _outcome(slow, name, arg, False), (name, arg)


@pytest.mark.parametrize("how", [1, 2, 5, 6, 13, 15, 16, 17, 18, 23, 24, 26])
def test_a_cpp_policys_bound_calls_break_and_stay_abandoned_as_its_methods_do(
    cxx: str, how: int
) -> None:
    from schedcli.runtimes.executorch.policy import policy_class

    cls = policy_class(crashing(crash_at=2, how=how))
    fast, slow = cls(), cls()
    script: list[tuple[str, object]] = [
        ("try_submit", ("list", [(1, 0, "prefill", 2, None), (2, 0, "prefill", 3, None)])),
        ("get_work", None),
        ("get_work", None),
        ("get_work", None),
        ("has_work", None),
        ("try_submit", ("list", [(3, 1, "decode", 1, None)])),
        ("cancel", 0),
        ("cancel", "0"),
        ("clear", None),
    ]
    for name, arg in script:
        assert _outcome(fast, name, arg, True) == _outcome(slow, name, arg, False), (name, arg)


# --- what the shim holds (#58): a flat table of queued tasks, the history of returned ones ---

# Tids that crowd a hash table's probe runs: multiples of large powers of two, the ends of
# a 32-bit TaskId (every shape holds these), negatives, and a dense run.
CROWDING = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.builds(lambda k, s: (k << s) % 2**31, st.integers(0, 2**10), st.integers(10, 30)),
    st.sampled_from([-(2**31), 2**31 - 1, -1, 0]),
    st.integers(0, 600),
)


@st.composite
def crowds(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Hundreds of tasks queued at once under crowding tids (a tid is used again only after
    a clear has handed every task back), taken and cancelled in between."""
    out: list[tuple[str, object]] = []
    held: set[int] = set()
    for _ in range(draw(st.integers(1, 60))):
        op = draw(st.sampled_from(["submit"] * 6 + ["get_work"] * 2 + ["cancel", "clear"]))
        if op == "submit":
            group = []
            for _ in range(draw(st.integers(1, 12))):
                tid = draw(CROWDING.filter(lambda t: t not in held))
                held.add(tid)
                decode = draw(st.booleans())
                group.append((tid, draw(st.integers(0, 40)), decode, 1 if decode else 2))
            out.append(("submit", group))
        elif op == "cancel":
            out.append(("cancel", draw(st.integers(0, 40))))
        else:
            out.append((op, None))
            if op == "clear":
                held.clear()
    return out


@pytest.mark.parametrize("cxx", EVERY_SHAPE, indirect=True, ids=[s for _, s in EVERY_SHAPE])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=crowds())
def test_a_cpp_policy_holding_hundreds_of_crowding_tids_hands_back_the_very_tasks_fcfs_does(
    cxx: str, script: list[tuple[str, object]]
) -> None:
    """The shim's table of queued tasks grows, wraps and closes its probe runs as tasks go;
    every task handed back must be the very one submitted under that tid, as fcfs hands
    back (a batch of at most 2 sequences, so the queue grows)."""
    from schedcli.policies.fcfs import FcfsScheduler
    from schedcli.runtimes.executorch.policy import policy_class

    twin, ours = policy_class(fifo(b=16, n=2, c=8))(), FcfsScheduler(16, 2, 8)
    made: dict[int, tuple[Task, Task]] = {}  # id of twin's task -> (twin's, ours)
    held: dict[object, int] = {}  # tid -> id of twin's task queued under it
    for name, arg in script:
        if name == "submit":
            assert isinstance(arg, list)
            pairs = [
                tuple(Task(t, s, "decode" if d else "prefill", n) for _ in range(2))
                for t, s, d, n in arg
            ]
            for a, b in pairs:
                made[id(a)] = (a, b)
                held[a.tid] = id(a)
            assert twin.try_submit([a for a, _ in pairs]) is None
            assert ours.try_submit([b for _, b in pairs]) is None
            continue
        args = (arg,) if name == "cancel" else ()
        got, want = getattr(twin, name)(*args), getattr(ours, name)(*args)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert made[id(a)][1] is b, (name, a.tid, b.tid)
            assert a.cancelled == b.cancelled
            assert held.pop(a.tid) == id(a)
    assert twin.has_work() == ours.has_work() == bool(held)


def test_findings_reads_a_cpp_policys_steps_as_it_reads_fcfs(
    cli: Cli, cxx: str, tmp_path: Path
) -> None:
    """findings needs only the replay's facts: under the C++ twin of fcfs (which gives no
    reasons of its own) the priority inversion fcfs shows is found, the same bytes."""
    ops: list[dict[str, object]] = [
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4, "priority": 5},
        {"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 4},
        {"op": "submit", "tid": 3, "sid": 3, "kind": "prefill", "size": 4},
        {"op": "get_work"},
    ]
    for step in range(4):  # later steps with nothing to find
        ops.append(
            {
                "op": "submit",
                "tid": 10 + 2 * step,
                "sid": 10 + 2 * step,
                "kind": "prefill",
                "size": 4,
            }
        )
        ops.append(
            {
                "op": "submit",
                "tid": 11 + 2 * step,
                "sid": 11 + 2 * step,
                "kind": "prefill",
                "size": 4,
            }
        )
        ops.append({"op": "get_work"})
    trace = write(tmp_path / "t.jsonl", {"schedcli": 1}, ops)
    params = ["-P", "max_batch_tokens=8", "-P", "max_prefill_chunk_size=8", "-P", "max_num_seqs=64"]
    ours = cli("findings", trace, "-p", "fcfs", *params, "-f", "json")
    twin = cli("findings", trace, "-p", fifo(b=8, n=64, c=8), "-f", "json")
    assert ours.code == twin.code == 0, twin.stderr
    kinds = {orjson.loads(x)["kind"] for x in twin.lines}
    assert "priority_inversion" in kinds, twin.stdout
    assert twin.stdout == ours.stdout
