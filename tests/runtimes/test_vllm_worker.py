"""``-p vllm@PYTHON``: vLLM's scheduler in a worker run by another interpreter, over a pipe
(runtimes/vllm/worker.py), and two vLLM versions side by side.

The interpreters are this one, where vLLM imports here, and those SCHEDCLI_TEST_VLLM_PYTHONS
names (os.pathsep between them; CI builds vLLM 0.34.0's with .ci/vllm-env). The held-out
second path is bench/vllm_bare.py, a bare loop over vLLM's own Scheduler that runs
under either interpreter (the standard library and vLLM only), one process per interpreter
answering case after case. The failure-mode tests need no vLLM at all, but the one that
kills a worker mid-run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import VLLM_PYTHONS_ENV, Cli, vllm_pythons
from tests.helpers import ROOT
from tests.runtimes.bare_loop import BARE, Bare, trace_steps

HERE = importlib.util.find_spec("vllm") is not None
DEADLOCK = ROOT / "docs" / "examples" / "vllm-kv-deadlock.workload.jsonl"
# A cache of 64 blocks of 16 (1,008 tokens usable) that preempts under a few long prompts.
BASE = {"num_gpu_blocks": 64, "block_size": 16, "max_model_len": 1008}
SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
needs_vllm = pytest.mark.needs("vllm")


def _interpreters() -> list[str]:
    """Every interpreter with vLLM the tests may use: this one first, where it has vLLM."""
    found = [sys.executable] if HERE else []
    return found + [p for p in vllm_pythons() if p not in found]


def _no_interpreter() -> None:
    pytest.skip(
        f"needs vLLM here (the vllm extra) or an interpreter with vLLM in {VLLM_PYTHONS_ENV}"
    )


# --- the held-out bare loop, one process per interpreter -------------------------------------


@pytest.fixture(scope="module")
def bare() -> Iterator[dict[str, Bare]]:
    """The bare loop under each interpreter, started when first asked for."""
    started: dict[str, Bare] = {}

    class Lazy(dict[str, Bare]):
        def __missing__(self, python: str) -> Bare:
            started[python] = self[python] = Bare(python)
            return started[python]

    yield Lazy()
    for b in started.values():
        b.close()


# --- workloads ---------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A small workload and vLLM settings that preempt now and then: chunked prefill on
    (a budget of 64 to 256) or off (then the budget holds a whole prompt, and a long-prefill
    threshold is where 0.33 and 0.34 part: 0.34 applies it only to chunked prefill)."""
    n = draw(st.integers(1, 14))
    t, requests = 0, []
    for i in range(n):
        t += draw(st.integers(0, 40))
        requests.append(
            {
                "sid": i if i % 2 else f"r{i}",
                "arrival": t / 1000,
                "prompt_tokens": draw(st.integers(1, 700)),
                "output_tokens": draw(st.integers(1, 30)),
                "priority": draw(st.integers(0, 2)),
            }
        )
    chunked = draw(st.booleans())
    params = BASE | {
        "max_num_seqs": draw(st.integers(1, 6)),
        "policy": draw(st.sampled_from(["fcfs", "priority"])),
        "enable_chunked_prefill": "true" if chunked else "false",
        "max_num_batched_tokens": draw(st.sampled_from([64, 128, 256])) if chunked else 1008,
        "long_prefill_token_threshold": draw(st.sampled_from([0, 16, 48])),
    }
    return requests, params


# Where 0.33 and 0.34 part: a prompt cut to the long-prefill threshold under 0.33 only.
PARTING = (
    [
        {"sid": 0, "arrival": 0.0, "prompt_tokens": 431, "output_tokens": 5, "priority": 0},
        {"sid": 1, "arrival": 0.001, "prompt_tokens": 524, "output_tokens": 3, "priority": 0},
    ],
    BASE
    | {
        "max_num_seqs": 4,
        "policy": "fcfs",
        "enable_chunked_prefill": "false",
        "max_num_batched_tokens": 1008,
        "long_prefill_token_threshold": 32,
    },
)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _args(params: dict[str, Any]) -> list[str]:
    return [f"-P{k}={v}" for k, v in params.items()]


def _header(trace: Path) -> dict[str, Any]:
    found: dict[str, Any] = orjson.loads(trace.read_bytes().splitlines()[0])
    return found


def _wrapper(path: Path, body: str) -> str:
    """An executable script that stands in for an interpreter."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def wrappers() -> Iterator[list[str]]:
    """Interpreter stand-ins a test makes: their workers are ended with the test."""
    from schedcli.runtimes.vllm import worker

    made: list[str] = []
    yield made
    for path in made:
        found = worker._workers.pop(path, None)
        if found is not None:
            found.close()


# --- one worker, the same bytes ----------------------------------------------------------------


@needs_vllm
@SETTINGS
@given(case=cases(), step=st.integers(0, 30))
def test_vllm_at_this_python_writes_the_bytes_in_process_vllm_writes(
    cli: Cli, tmp_path: Path, case: tuple[list[dict[str, Any]], dict[str, Any]], step: int
) -> None:
    requests, params = case
    workload = _write(tmp_path / "w.jsonl", requests)
    remote = f"vllm@{sys.executable}"
    traces = []
    for name in ("vllm", remote):
        trace = tmp_path / f"{len(traces)}.jsonl"
        r = cli("simulate", workload, "-p", name, *_args(params), "-o", trace, "-f", "json")
        assert r.code == 0, r.stderr
        traces.append(trace)
    ours, theirs = (t.read_bytes().splitlines() for t in traces)
    assert ours[1:] == theirs[1:]
    assert _header(traces[0]) | {"policy": remote} == _header(traces[1])
    assert _header(traces[0])["meta"]["vllm"] == _bare_version(sys.executable)
    for command in (
        ["replay", traces[0], "--check", "-f", "jsonl", "-P", "max_num_seqs=2"],
        ["stats", traces[0], "-f", "json"],
    ):
        done = [cli(*command, "-p", name) for name in ("vllm", remote)]
        assert [d.code for d in done] == [done[0].code] * 2 and done[0].code in (0, 1)
        assert done[0].stdout == done[1].stdout
    steps = len(trace_steps(traces[0]))
    views = [
        cli("explain", traces[0], "--step", str(step % steps), "-p", name, "-f", "json")
        for name in ("vllm", remote)
    ]
    assert [v.code for v in views] == [0, 0], views[1].stderr
    shown = [orjson.loads(v.stdout) for v in views]
    assert shown[0] | {"policy": remote} == shown[1]


def _bare_version(python: str) -> str:
    return subprocess.run(
        [python, str(BARE), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(params=range(3), ids=lambda i: f"interpreter{i}")
def python(request: pytest.FixtureRequest) -> str:
    """Each interpreter with vLLM, this one's first (three at most)."""
    found = _interpreters()
    if not found:
        _no_interpreter()
    if request.param >= len(found):
        pytest.skip(f"{len(found)} interpreter(s) with vLLM here and in {VLLM_PYTHONS_ENV}")
    return found[request.param]


@SETTINGS
@given(case=cases())
def test_simulate_under_each_interpreter_s_vllm_is_that_vllm_s_bare_loop_step_for_step(
    cli: Cli,
    tmp_path: Path,
    bare: dict[str, Bare],
    python: str,
    case: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    requests, params = case
    trace = tmp_path / "sim.jsonl"
    workload = _write(tmp_path / "w.jsonl", requests)
    r = cli("simulate", workload, "-p", f"vllm@{python}", *_args(params), "-o", trace)
    assert r.code == 0, r.stderr
    assert trace_steps(trace) == bare[python].steps(requests, params)
    assert _header(trace)["meta"]["vllm"] == bare[python].version


@pytest.fixture(scope="module")
def versions(bare: dict[str, Bare]) -> tuple[str, str]:
    """Two interpreters with different vLLM versions, the older first."""
    found = _interpreters()
    if not found:
        _no_interpreter()
    by_version = {bare[p].version: p for p in reversed(found)}
    if len(by_version) < 2:
        pytest.skip(
            f"needs two vLLM versions (here and in {VLLM_PYTHONS_ENV}; .ci/vllm-env 0.34.0 DIR "
            f"makes one): found only {', '.join(by_version)}"
        )
    older, newer = sorted(by_version, key=lambda v: [int(x) for x in v.split(".")[:3]])[:2]
    return by_version[older], by_version[newer]


@SETTINGS
@given(case=cases())
@example(case=PARTING)
def test_diff_of_two_vllm_versions_exits_0_exactly_when_their_bare_loops_agree(
    cli: Cli,
    tmp_path: Path,
    bare: dict[str, Bare],
    versions: tuple[str, str],
    case: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    old, new = versions
    requests, params = case
    loops = [bare[p].steps(requests, params) for p in (old, new)]
    trace = tmp_path / "sim.jsonl"
    workload = _write(tmp_path / "w.jsonl", requests)
    r = cli("simulate", workload, "-p", f"vllm@{old}", *_args(params), "-o", trace)
    assert r.code == 0, r.stderr
    r = cli("diff", trace, "--a", f"vllm@{old}", "--b", f"vllm@{new}")
    assert r.code == (0 if loops[0] == loops[1] else 1), r.stdout
    # The trace says the older made it; side B's runs the newer, and says so.
    said = f"was made by vllm {bare[old].version}; 'vllm@{new}' runs vllm {bare[new].version}"
    assert said in r.stderr
    if r.code == 1:
        first = next(i for i, (a, b) in enumerate(zip(*loops, strict=False)) if a != b)
        assert f"first difference: step {first}".encode() in r.stdout
        assert b"what A said of the requests both ran at other sizes" in r.stdout or (
            b"why" in r.stdout and b"left out what the other side dispatched" in r.stdout
        )


def test_a_replay_under_another_vllm_version_says_both_in_a_note_and_check_still_judges(
    cli: Cli, tmp_path: Path, bare: dict[str, Bare], versions: tuple[str, str]
) -> None:
    old, new = versions
    requests, params = PARTING
    assert bare[old].steps(requests, params) != bare[new].steps(requests, params)
    parted = tmp_path / "parted.jsonl"
    workload = _write(tmp_path / "w.jsonl", requests)
    assert cli("simulate", workload, "-p", f"vllm@{new}", *_args(params), "-o", parted).code == 0
    assert _header(parted)["meta"]["vllm"] == bare[new].version
    note = f"note: {parted} was made by vllm {bare[new].version}; 'vllm@{old}' runs vllm"
    r = cli("replay", parted, "-p", f"vllm@{old}", "--check", "-f", "jsonl")
    assert r.code == 1 and "differs from the recorded step" in r.stderr
    assert f"{note} {bare[old].version}" in r.stderr
    r = cli("replay", parted, "-p", f"vllm@{new}", "--check", "-f", "jsonl")
    assert r.code == 0 and "note:" not in r.stderr  # the same version: nothing to say
    agreed = tmp_path / "agreed.jsonl"
    chunked = params | {"enable_chunked_prefill": "true", "max_num_batched_tokens": 256}
    assert cli("simulate", workload, "-p", f"vllm@{new}", *_args(chunked), "-o", agreed).code == 0
    r = cli("replay", agreed, "-p", f"vllm@{old}", "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert "was made by vllm" in r.stderr


@needs_vllm
def test_a_vllm_034_run_of_hundreds_of_requests_keeps_every_token_id_an_int32(
    cli: Cli, tmp_path: Path, bare: dict[str, Bare], other_vllm: str
) -> None:
    # 0.34 keeps prompts in a C int32 array: ids past 2**31 - 1 overflowed at request 128.
    rows = [
        {"sid": i, "arrival": i / 1000, "prompt_tokens": 1 + i % 40, "output_tokens": 2}
        for i in range(200)
    ]
    params = BASE | {"max_num_seqs": 8, "max_num_batched_tokens": 256}
    workload = _write(tmp_path / "w.jsonl", rows)
    for python in (sys.executable, other_vllm):
        trace = tmp_path / "sim.jsonl"
        r = cli("simulate", workload, "-p", f"vllm@{python}", *_args(params), "-o", trace)
        assert r.code == 0, r.stderr
        assert trace_steps(trace) == bare[python].steps(rows, params)


# --- every command through a worker ------------------------------------------------------------


@needs_vllm
def test_the_stall_watch_finds_the_kv_deadlock_through_a_worker_as_in_process(
    cli: Cli, tmp_path: Path
) -> None:
    params = ["-P", "num_gpu_blocks=100", "-P", "skip_kv_startup_check=true"]
    remote = f"vllm@{sys.executable}"
    runs = []
    trace = tmp_path / "run.jsonl"  # one path: stderr names it
    for name in ("vllm", remote):
        r = cli("simulate", DEADLOCK, "-p", name, *params, "-o", trace)
        runs.append((r, trace.read_bytes().splitlines()))
    (local, ours), (worker, theirs) = runs
    assert local.code == worker.code == 3
    assert 'Stuck: request "r4" (kv_blocks: needs 313 KV blocks; 99 free' in worker.stderr
    assert local.stderr.replace("'vllm'", repr(remote)) == worker.stderr
    assert ours[1:-1] == theirs[1:-1] and b'"partial"' in theirs[-1]
    assert ours[-1].replace(b"'vllm'", repr(remote).encode()) == theirs[-1]


@needs_vllm
def test_check_passes_a_folder_of_traces_and_goldens_through_a_worker_as_in_process(
    cli: Cli, tmp_path: Path
) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(ROOT / "docs" / "examples" / "vllm-kv-deadlock", suite)  # pins a break
    requests, params = PARTING
    workload = _write(tmp_path / "w.jsonl", requests)
    made = cli("simulate", workload, "-p", "vllm", *_args(params), "-o", suite / "t.jsonl")
    assert made.code == 0, made.stderr
    assert cli("replay", suite / "t.jsonl", "--golden", suite / "golden" / "t.dump.jsonl",
               "--update-golden").code == 0  # fmt: skip
    remote = f"vllm@{sys.executable}"
    for name in ("vllm", remote):
        r = cli("check", suite, "-p", name, "-j", "1")
        assert r.code == 0, r.stdout
        r = cli("check", suite, "-p", name, "-P", "max_num_seqs=1", "-j", "1")
        assert r.code == 1, r.stdout


@needs_vllm
def test_a_trace_header_may_not_name_a_vllm_interpreter_but_the_command_line_may(
    cli: Cli, tmp_path: Path
) -> None:
    requests, params = PARTING
    remote = f"vllm@{sys.executable}"
    trace = tmp_path / "sim.jsonl"
    workload = _write(tmp_path / "w.jsonl", requests)
    assert cli("simulate", workload, "-p", remote, *_args(params), "-o", trace).code == 0
    r = cli("replay", trace, "--check")
    assert r.code == 2
    assert f"the header names policy {remote!r}" in _one_line(r.stderr, f"{trace}:1: ")
    assert cli("replay", trace, "-p", remote, "--check", "-o", os.devnull).code == 0


def _sweep(cli: Cli, workload: Path, policy: str, tmp_path: Path, *extra: str) -> list[Any]:
    out = tmp_path / f"sweep{len(list(tmp_path.glob('sweep*')))}.jsonl"
    grid = [x for k, v in BASE.items() for x in ("--grid", f"{k}={v}")]
    r = cli("sweep", workload, "-p", policy, "--grid", "max_num_seqs=1,2,3,4", *grid,
            "--cache", tmp_path / "cache", "--fresh", "-o", out, *extra)  # fmt: skip
    assert r.code == 0, r.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


@needs_vllm
def test_a_sweep_starts_one_worker_per_process_not_one_per_point(
    cli: Cli, tmp_path: Path, wrappers: list[str]
) -> None:
    log = tmp_path / "started"
    python = _wrapper(tmp_path / "python", f'echo $$ >> {log}\nexec {sys.executable} "$@"')
    wrappers.append(python)
    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    local = _sweep(cli, workload, "vllm", tmp_path, "-j", "1")
    one = _sweep(cli, workload, f"vllm@{python}", tmp_path, "-j", "1")
    assert len(log.read_text().split()) == 1  # four points, one worker
    two = _sweep(cli, workload, f"vllm@{python}", tmp_path, "-j", "2")
    assert len(log.read_text().split()) <= 1 + 2  # and one in each of the pool's processes

    def unnamed(records: list[Any]) -> list[Any]:
        return [r["metrics"] | {"policy": None} for r in records]

    for records in (one, two):
        assert unnamed(records) == unnamed(local)
        assert [r["params"] for r in records] == [r["params"] for r in local]


@needs_vllm
@pytest.mark.needs("ray")
def test_a_sweep_of_vllm_at_python_on_ray_gives_the_local_pool_s_records(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    args = [str(workload), "-p", f"vllm@{sys.executable}", "--fresh", "--grid", "max_num_seqs=1,4"]
    args += [x for k, v in BASE.items() for x in ("--grid", f"{k}={v}")]
    args += ["--cache", str(tmp_path / "cache")]
    records = []
    for name, backend in (("local.jsonl", []), ("ray.jsonl", ["--backend", "ray"])):
        out = tmp_path / name
        r = run_cli("sweep", *args, *backend, "-j", "2", "-o", str(out), timeout=900)
        assert r.returncode == 0, r.stderr.decode()
        records.append(out.read_bytes())
    assert records[0] == records[1] and records[0].count(b"\n") == 2


# --- what goes wrong, said in one line ---------------------------------------------------------


def _one_line(stderr: str, prefix: str = "schedcli: ") -> str:
    """The one error line: nothing else on stderr begins as it does, or is a traceback."""
    lines = [x for x in stderr.splitlines() if x.startswith(prefix)]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_vllm_interpreter_that_is_missing_or_not_executable_is_exit_2(
    cli: Cli, tmp_path: Path
) -> None:
    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    plain = tmp_path / "python"
    plain.write_text("not a program")
    for named, said in (
        (tmp_path / "nowhere" / "python", "is not an executable file (a Python with vLLM)"),
        (plain, "is not an executable file (a Python with vLLM)"),
        ("no-such-python-on-path", "no interpreter 'no-such-python-on-path' on PATH"),
    ):
        r = cli("simulate", workload, "-p", f"vllm@{named}")
        assert r.code == 2 and said in _one_line(r.stderr), r.stderr


def test_a_program_that_answers_not_as_a_python_with_vllm_is_exit_2(
    cli: Cli, tmp_path: Path, wrappers: list[str]
) -> None:
    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    for name, body, how in (
        ("quiet", "exit 0", "exited with status 0"),
        ("chatty", "echo hello; cat > /dev/null", "answered 'hello', not a reply"),
    ):
        python = _wrapper(tmp_path / name, body)
        wrappers.append(python)
        r = cli("simulate", workload, "-p", f"vllm@{python}")
        assert r.code == 2, r.stderr
        line = _one_line(r.stderr)
        assert f"vllm@{python}: {python} did not start schedcli's vLLM worker ({how})" in line
        assert "a Python interpreter with vLLM 0.33 to 0.34 installed" in line


def test_an_interpreter_without_vllm_is_exit_2_naming_it_and_what_to_install(
    cli: Cli, tmp_path: Path, wrappers: list[str]
) -> None:
    # -S: no site-packages, so no vLLM (and no schedcli) whatever this environment holds.
    python = _wrapper(tmp_path / "bare-python", f'exec {sys.executable} -S "$@"')
    wrappers.append(python)
    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    r = cli("simulate", workload, "-p", f"vllm@{python}")
    assert r.code == 2
    line = _one_line(r.stderr)
    assert line.startswith(f"schedcli: vllm@{python}: ") and "has no vLLM" in line
    assert "install vLLM 0.33 to 0.34 into it" in line and "vLLM versions side by side" in line


def test_a_vllm_outside_the_supported_window_is_exit_2_naming_the_window(
    cli: Cli, tmp_path: Path, wrappers: list[str]
) -> None:
    # A stand-in vLLM 0.8.5 (its package and its metadata) first on the worker's path.
    stub = tmp_path / "stub"
    (stub / "vllm").mkdir(parents=True)
    (stub / "vllm" / "__init__.py").write_text("")
    (stub / "vllm-0.8.5.dist-info").mkdir()
    (stub / "vllm-0.8.5.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.8.5\n"
    )
    python = _wrapper(tmp_path / "old", f'PYTHONPATH={stub} exec {sys.executable} -S "$@"')
    wrappers.append(python)
    workload = _write(tmp_path / "w.jsonl", PARTING[0])
    for command in (["simulate", workload, "-p"], ["policies"]):
        r = cli(*command, f"vllm@{python}")
        assert r.code == 2
        line = _one_line(r.stderr)
        assert f"vllm@{python}: vLLM 0.8.5 is outside the supported window" in line
        assert "vLLM 0.33 to 0.34" in line


@needs_vllm
def test_a_worker_killed_mid_run_is_exit_3_with_the_output_so_far_marked_partial(
    cli: Cli, tmp_path: Path, wrappers: list[str]
) -> None:
    # The worker is core.py itself, its input cut short: SIGKILL at its 60th call.
    killer = tmp_path / "killer.py"
    killer.write_text(
        "import os, runpy, signal, sys\n"
        "core = sys.argv[-1]\n"
        "sys.path.insert(0, os.path.dirname(core))\n"
        "def calls(lines):\n"
        "    for n, line in enumerate(lines):\n"
        "        if n == 60:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        yield line\n"
        "sys.stdin = calls(sys.stdin)\n"
        "sys.argv = [core]\n"
        "runpy.run_path(core, run_name='__main__')\n"
    )
    rows = [
        {"sid": i, "arrival": i / 100, "prompt_tokens": 200 + 37 * i, "output_tokens": 9}
        for i in range(12)
    ]
    workload = _write(tmp_path / "w.jsonl", rows)
    params = PARTING[1]
    made = tmp_path / "made.jsonl"
    assert cli("simulate", workload, "-p", "vllm", *_args(params), "-o", made).code == 0
    for n, command in enumerate(
        (
            ["simulate", workload, "-o", tmp_path / "sim.jsonl"],
            ["replay", made, "--check", "-f", "jsonl", "-o", tmp_path / "dump.jsonl"],
        )
    ):
        python = _wrapper(tmp_path / f"python{n}", f'exec {sys.executable} {killer} "$@"')
        wrappers.append(python)
        r = cli(*command, "-p", f"vllm@{python}", *_args(params))
        assert r.code == 3, r.stderr
        line = _one_line(r.stderr)
        assert f"vllm@{python}: the vLLM worker" in line
        assert "was ended by signal 9 (SIGKILL)" in line
        written = Path(command[-1]).read_bytes().splitlines()
        assert b'"partial"' in written[-1] and b"SIGKILL" in written[-1]
