"""Signals, accounting breaches and threads: runs end cleanly and nothing is lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.replay_bench import generate
from schedcli import Task, policy_sources
from schedcli.catalog.registry import build_policy
from tests.helpers import ROOT, TRACES, run_cli, run_process


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    generate(path, 600_000)
    return path


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_replay_cuts_output_at_a_record_boundary(
    tmp_path: Path, big_trace: Path, sig: int, code: int
) -> None:
    out = tmp_path / "dump.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "replay", str(big_trace), "-o", str(out)],
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while (not out.exists() or out.stat().st_size < 2_000_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err.decode()
    assert b"Traceback" not in err
    data = out.read_bytes()
    assert data and data.endswith(b"\n")
    records = [json.loads(line) for line in data.splitlines()]
    assert "end" not in records[-1]  # cut short, not finished


def test_signal_mid_replay_to_stdout_ends_at_a_record_boundary(big_trace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "replay", str(big_trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        bufsize=0,  # no read-ahead that communicate() would not see
    )
    assert proc.stdout is not None
    first = b""
    while len(first) < 1_000_000:
        first += proc.stdout.read(1_000_000 - len(first))
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    data = first + rest
    assert data.endswith(b"\n")
    for line in data.splitlines():
        json.loads(line)


def test_a_policy_that_loses_a_task_is_reported_loudly_with_exit_3() -> None:
    r = run_cli(
        "replay", str(TRACES / "rejections.jsonl"), "-p", "tests.plugin_policies:LosesTasks"
    )
    assert r.returncode == 3
    err = r.stderr.decode()
    assert "policy 'loses-tasks' broke the Scheduler contract" in err
    assert "accepted tasks are queued" in err


def test_end_record_carries_the_accounting(tmp_path: Path) -> None:
    r = run_cli("replay", str(TRACES / "cancel-and-rejoin.jsonl"))
    end = json.loads(r.stdout.splitlines()[-1])["end"]
    assert end["accepted"] == end["dispatched"] + end["cancelled"] + end["queued"]
    assert (end["accepted"], end["dispatched"], end["cancelled"], end["queued"]) == (7, 4, 3, 0)


@pytest.mark.parametrize(
    "name", sorted(n for n, s in policy_sources().items() if s.level == "task")
)
def test_producers_consumer_and_canceller_threads_lose_nothing(name: str) -> None:
    policy = build_policy(name)
    accepted: list[Task] = []
    dispatched: list[Task] = []
    cancelled: list[Task] = []
    lock = threading.Lock()
    producing = threading.Event()
    producing.set()

    def produce(p: int) -> None:
        rng = random.Random(p)
        for i in range(500):
            sid = f"s{rng.randrange(12)}"
            if rng.random() < 0.5:
                group = [Task(f"{p}.{i}", sid, "decode", 1)]
            else:
                group = [
                    Task(f"{p}.{i}.{c}", sid, "prefill", rng.randint(1, 200)) for c in range(3)
                ]
            if policy.submit(group):
                with lock:
                    accepted.extend(group)

    def consume() -> None:
        while producing.is_set() or policy.has_work():
            batch = policy.get_work()
            with lock:
                dispatched.extend(batch)
            time.sleep(0.0005)  # let queues build up, so the canceller finds work

    def cancel() -> None:
        rng = random.Random(99)
        while producing.is_set():
            dropped = policy.cancel(f"s{rng.randrange(12)}")
            with lock:
                cancelled.extend(dropped)
            time.sleep(0.0001)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    others = [threading.Thread(target=consume), threading.Thread(target=cancel)]
    for th in producers + others:
        th.start()
    for th in producers:
        th.join()
    producing.clear()
    for th in others:
        th.join(timeout=60)
    queued = policy.clear()
    ids = [id(t) for t in dispatched + cancelled + queued]
    assert len(ids) == len(set(ids)), "a task came back twice"
    assert sorted(ids) == sorted(id(t) for t in accepted), "a task was lost"
    assert all(t.cancelled for t in cancelled + queued)
    assert len(cancelled) > 0 and len(dispatched) > 0


def test_the_quick_exit_still_delivers_every_byte_to_stdout_and_to_o(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    generate(trace, 30_000)
    whole = run_cli("replay", str(trace), "-f", "jsonl").stdout  # in process: no quick exit
    out = tmp_path / "dump.jsonl"
    with (tmp_path / "stdout.jsonl").open("wb") as stdout:
        cmd = [sys.executable, "-m", "schedcli", "replay", str(trace), "-f", "jsonl"]
        assert subprocess.run(cmd, stdout=stdout, cwd=ROOT, check=False).returncode == 0
        assert subprocess.run([*cmd, "-o", str(out)], cwd=ROOT, check=False).returncode == 0
    assert len(whole) > 1_000_000
    assert (tmp_path / "stdout.jsonl").read_bytes() == whole
    assert out.read_bytes() == whole


def test_a_plugins_exit_hooks_and_unclosed_files_are_seen_to(tmp_path: Path) -> None:
    hook, log = tmp_path / "hook-ran", tmp_path / "plugin.log"
    (tmp_path / "hooked.py").write_text(
        "import atexit\n"
        "from tests.plugin_policies import OnePerBatch\n"
        f"atexit.register(lambda: open({str(hook)!r}, 'w').write('ran'))\n"
        f"LOG = open({str(log)!r}, 'w')  # never closed: the teardown flushes it\n"
        "LOG.write('loaded')\n"
        "class Hooked(OnePerBatch):\n"
        "    name = 'hooked'\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = run_process("replay", str(TRACES / "rejections.jsonl"), "-p", "hooked:Hooked", env=env)
    assert r.returncode == 0, r.stderr
    assert hook.read_text() == "ran"
    assert log.read_text() == "loaded"
