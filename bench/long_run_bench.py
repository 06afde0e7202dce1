"""A long replay with flat memory: 20,000,000 generated events, peak RSS and throughput.

    python bench/long_run_bench.py [--events N]

Generates the trace (the same generator as replay_bench.py, gzip-free, on disk), then runs
``schedcli replay --format jsonl -o /dev/null`` once and reports peak RSS and events/s.
Target: peak RSS under 150 MB whatever the length: memory follows what is queued.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.replay_bench import generate, replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.jsonl"
        t0 = time.perf_counter()
        generate(path, args.events)
        size_gb = path.stat().st_size / 1e9
        took = time.perf_counter() - t0
        print(f"generated {args.events:,} events ({size_gb:.2f} GB) in {took:.0f} s")
        seconds, rss = replay(path)
    print(f"replay: {seconds:.1f} s, {args.events / seconds:,.0f} events/s")
    print(f"peak RSS: {rss:.0f} MB  (target < 150 MB)")


if __name__ == "__main__":
    main()
