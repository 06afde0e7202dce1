"""convert + simulate of the whole Azure conversation trace, timed, with peak RSS.

    python bench/simulate_bench.py [--trace PATH] [--policy NAME]

Runs the real commands in subprocesses pinned to one core (taskset, when present):
``schedcli convert auto TRACE -o W`` then ``schedcli simulate W -f json`` (metrics only).
Target: under 20 s together and under 100 MB peak RSS each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The real traces: $SCHEDCLI_TRACES_REAL, else ../shared/traces-real beside the clone.
REAL = Path(
    os.environ.get("SCHEDCLI_TRACES_REAL")
    or Path(__file__).resolve().parent.parent.parent / "shared" / "traces-real"
)
DEFAULT = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS in MB of one child process."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    wrapper = [sys.executable, "-c", _CHILD, *pin, *cmd]
    start = time.perf_counter()
    out = subprocess.run(wrapper, check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    return elapsed, float(out.stdout.strip().splitlines()[-1])


# Runs the command and prints its own children's peak RSS, so each figure is one command's.
_CHILD = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--policy", default="decode-first")
    args = ap.parse_args()
    if not args.trace.is_file():
        sys.exit(f"no trace at {args.trace}")
    schedcli = [sys.executable, "-m", "schedcli"]
    with tempfile.TemporaryDirectory() as tmp:
        workload = os.path.join(tmp, "w.jsonl")
        conv_s, conv_mb = timed([*schedcli, "convert", "auto", str(args.trace), "-o", workload])
        sim_s, sim_mb = timed([*schedcli, "simulate", workload, "-p", args.policy, "-f", "json"])
    print(f"trace: {args.trace.name}, policy {args.policy}")
    print(f"convert:  {conv_s:6.2f} s  peak RSS {conv_mb:5.0f} MB")
    print(f"simulate: {sim_s:6.2f} s  peak RSS {sim_mb:5.0f} MB")
    print(
        f"total:    {conv_s + sim_s:6.2f} s  (target < 20 s; sched-sim 0.2.1: about 19 s, 200 MB)"
    )


if __name__ == "__main__":
    main()
