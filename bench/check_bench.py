"""``schedcli check`` on a suite against the same replays run back to back, wall time.

    python bench/check_bench.py [--traces N] [--events N] [--jobs N] [--repeat N]

Generates N traces (``bench/replay_bench.py``'s generator, a seed each; 100 of 10,000
events by default) and their goldens, then times, each the least of ``--repeat`` runs:
- ``schedcli check DIR -j JOBS`` (a subprocess, start-up included);
- one process checking the same traces back to back (``--child``: a subprocess too).
Prints check / (back to back / JOBS). Target: at most 1.2 (the pool's cost over perfect
division across the cores).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import verdict
from bench.replay_bench import generate


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def back_to_back(folder: Path) -> None:
    """Every trace of ``folder`` checked in this process, one after another."""
    from schedcli.engine.check.suite import find_suite
    from schedcli.engine.check.trace import Job, check_trace

    for trace, golden in find_suite([str(folder)], None).traces:
        verdict_ = check_trace(Job(trace, golden, None, {}, False, False))
        assert verdict_.status == "pass", verdict_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--traces", type=int, default=100)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        back_to_back(args.child)
        return
    from schedcli import CORE

    print(f"core: {CORE}; {args.traces} traces of {args.events:,} events; {args.jobs} jobs")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "suite"
        folder.mkdir()
        for i in range(args.traces):
            generate(folder / f"t{i:03d}.jsonl", args.events, seed=i)
        script = [sys.executable, "-m", "schedcli", "check", str(folder)]
        made = subprocess.run([*script, "--update"], capture_output=True, check=False)
        assert made.returncode == 0, made.stderr.decode()
        check = min(wall([*script, "-j", str(args.jobs)]) for _ in range(args.repeat))
        here = str(Path(__file__).resolve())
        child = [sys.executable, here, "--child", str(folder)]
        serial = min(wall(child) for _ in range(args.repeat))
        print(f"schedcli check -j {args.jobs}: {check:.2f} s wall")
        print(f"back to back in one process: {serial:.2f} s wall")
        ratio = check / (serial / args.jobs)
        print(f"ratio check / (back to back / {args.jobs}): {ratio:.2f}  "
              f"(target <= 1.2: {verdict(ratio, 1.2)})")  # fmt: skip


if __name__ == "__main__":
    main()
