"""A 16-point sweep, serial against a process pool against Ray, on this machine.

    python bench/sweep_bench.py [--requests N]

16 points: decode-first and fcfs, four budgets, two chunk sizes, on a generated workload
(--requests, 3,000 by default). Each run is ``schedcli sweep --fresh`` in a subprocess, so
start-up is included. Prints the times, the pool's speed-up over serial (target >= 1.7
on two cores), and Ray's overhead per point over the pool (Ray only if installed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

GRID = ["--grid", "max_batch_tokens=288,416,544,800", "--grid", "chunk_size=128,256"]


def workload(path: str, requests: int) -> None:
    rng = random.Random(11)
    t = 0.0
    with open(path, "w") as f:
        for i in range(requests):
            t += rng.expovariate(20.0)
            prompt = rng.randint(50, 1500)
            f.write(
                json.dumps(
                    {
                        "sid": i,
                        "arrival": round(t, 6),
                        "prompt_tokens": prompt,
                        "output_tokens": rng.randint(10, 200),
                    }
                )
                + "\n"
            )


def run(tmp: str, path: str, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "schedcli",
            "sweep",
            path,
            "-p",
            "decode-first",
            "-p",
            "fcfs",
            *GRID,
            "--fresh",
            "--cache",
            f"{tmp}/cache",
            "-o",
            f"{tmp}/r.jsonl",
            *extra,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/w.jsonl"
        workload(path, args.requests)
        serial = run(tmp, path, "--jobs", "1")
        cores = os.cpu_count() or 1
        pool = run(tmp, path, "--jobs", str(cores))
        print(f"16 points, {args.requests} requests each: serial {serial:.2f} s")
        speedup = serial / pool
        verdict = "met" if speedup >= 1.7 else "NOT met"
        print(
            f"process pool, {cores} workers: {pool:.2f} s, {speedup:.2f}x serial "
            f"(target >= 1.7: {verdict})"
        )
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray: not installed (pip install 'schedcli[ray]')")
            return
        on_ray = run(tmp, path, "--backend", "ray", "--jobs", str(cores))
        overhead = (on_ray - pool) / 16 * 1000
        print(
            f"ray, local, {cores} CPUs: {on_ray:.2f} s, {serial / on_ray:.2f}x serial; "
            f"overhead over the pool {overhead:.0f} ms per point"
        )


if __name__ == "__main__":
    main()
