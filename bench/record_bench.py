"""What recording costs: the same calls on a bare scheduler and through RecordingScheduler.

    python bench/record_bench.py [--calls N]

A million calls by default (submits, get_work, the odd cancel) on decode-first, bare, then
recorded to a file, then recorded to a .gz file, then in ring mode (the last 10,000 calls
kept). Prints each time, the ratio recorded / bare (target <= 2), and the peak memory each
mode adds (each run in its own process, so peaks do not hide each other).
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
mode, calls, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
policy = DecodeFirstScheduler()
if mode == "file":
    policy = RecordingScheduler(policy, path)
elif mode == "gz":
    policy = RecordingScheduler(policy, path + ".gz")
elif mode == "ring":
    policy = RecordingScheduler(policy, path, ring=10_000)
rng = random.Random(7)
tid = 0
start = time.perf_counter()
done = 0
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
elapsed = time.perf_counter() - start
print(elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def run(mode: str, calls: int, path: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(calls), path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/rec.jsonl"
        bare, bare_rss = run("bare", args.calls, path)
        print(
            f"{args.calls:,} calls on decode-first, bare: {bare:.2f} s, peak RSS {bare_rss:.0f} MB"
        )
        for mode, label in (
            ("file", "recorded to a file"),
            ("gz", "recorded to .gz"),
            ("ring", "ring of 10,000 calls"),
        ):
            took, rss = run(mode, args.calls, path)
            verdict = "met" if took / bare <= 2 else "NOT met"
            print(
                f"{label}: {took:.2f} s, ratio {took / bare:.2f} (target <= 2: {verdict}), "
                f"peak RSS {rss:.0f} MB (+{rss - bare_rss:.0f} MB)"
            )


if __name__ == "__main__":
    main()
