"""What recording costs: the same calls on a bare scheduler and through RecordingScheduler.

    python bench/record_bench.py [--calls N] [--repeat N]

A million calls by default (submits, get_work, the odd cancel) on decode-first, bare and
recorded: to a file, to a .gz file, in ring mode (the last 10,000 calls kept). Each mode
runs in its own process, which times the bare loop and the recorded loop there in turns
(CPU time, the least of N each), so the ratio compares like with like; the peak memory
a mode adds is that process's peak against the bare one's. Target: recorded / bare <= 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

_CHILD = """
import random, sys, time, resource
from schedcli import DecodeFirstScheduler, Task
from schedcli.record import RecordingScheduler
mode, calls, path, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def policy_for(mode):
    policy = DecodeFirstScheduler()
    if mode == "file":
        return RecordingScheduler(policy, path)
    if mode == "gz":
        return RecordingScheduler(policy, path + ".gz")
    if mode == "ring":
        return RecordingScheduler(policy, path, ring=10_000)
    return policy

def loop(mode):
    policy = policy_for(mode)
    rng = random.Random(7)
    tid = 0
    done = 0
    start = time.process_time()
    while done < calls:
        for sid in range(24):
            tid += 1
            policy.submit([Task(tid, sid, "decode", 1)])
        if rng.random() < 0.2:
            tid += 1
            policy.submit([Task(tid, 1000 + tid, "prefill", 200)])
        if rng.random() < 0.02:
            policy.cancel(rng.randrange(24))
        policy.get_work()
        done += 26
    if mode in ("file", "gz"):
        policy.close()
    return time.process_time() - start

bare, recorded = [], []
for _ in range(repeat):
    bare.append(loop("bare"))
    if mode != "bare":
        recorded.append(loop(mode))
print(min(bare), min(recorded or bare), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def run(mode: str, calls: int, path: str, repeat: int) -> tuple[float, float, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(calls), path, str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/rec.jsonl"
        bare, _, bare_rss = run("bare", args.calls, path, 1)
        print(f"{args.calls:,} calls on decode-first, bare: {bare:.2f} s CPU, "
              f"peak RSS {bare_rss:.0f} MB")  # fmt: skip
        for mode, label in (
            ("file", "recorded to a file"),
            ("gz", "recorded to .gz"),
            ("ring", "ring of 10,000 calls"),
        ):
            bare, took, rss = run(mode, args.calls, path, args.repeat)
            ratio = took / bare
            verdict = "met" if ratio <= 2 else "NOT met"
            print(
                f"{label}: {took:.2f} s CPU against {bare:.2f} s bare in the same process, "
                f"ratio {ratio:.2f} (target <= 2: {verdict}), "
                f"peak RSS {rss:.0f} MB (+{rss - bare_rss:.0f} MB)"
            )


if __name__ == "__main__":
    main()
