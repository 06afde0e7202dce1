"""simulate against sched-sim 0.2.1 on the whole Azure conversation trace, CPU and memory,
both measured in this run.

    python bench/simulate_bench.py [--trace PATH] [--sched-sim PATH] [--repeat N]
                                   [--flat N]

``schedcli convert auto TRACE`` makes the workload; ``schedcli simulate`` plays it under
decode-first with a 512-token budget (256 decodes, 256-token chunks); sched-sim's
``trace`` command plays the same requests (arrival, prompt and output tokens, as the
JSON list it reads) under its chunked-prefill scheduler with the same 512-token budget.
Each figure is the least CPU of N runs and that run's peak RSS (``bench/measure.py``).
Targets: simulate's CPU at most 0.25x sched-sim's; its memory no more than sched-sim's.

``--flat N`` (1,000,000 by default; 0 skips) then measures that memory does not grow with
the run: the workload repeated end to end (each copy after the one before, sids numbered
on) to N/10 and to N requests, simulate's peak RSS on each and their ratio. Targets: at
most 100 MB at 1,000,000 requests, and a ratio of at most 1.2.

sched-sim pins its own typer and pydantic, so it lives in a virtual environment of its
own: ``python -m venv /tmp/ssv && /tmp/ssv/bin/pip install sched-sim==0.2.1``, then pass
``--sched-sim /tmp/ssv/bin/sched-sim``. Without it, only schedcli's figures are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import Usage, measured, schedcli, verdict

# The real traces: $SCHEDCLI_TRACES_REAL, else ../shared/traces-real beside the clone.
REAL = Path(
    os.environ.get("SCHEDCLI_TRACES_REAL")
    or Path(__file__).resolve().parent.parent.parent / "shared" / "traces-real"
)
DEFAULT = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
BUDGET = 512
PARAMS = [f"max_batch_tokens={BUDGET}", "max_decode_sequences=256", "max_prefill_chunk_size=256"]


def for_sched_sim(workload: Path, out: Path) -> None:
    """The workload as sched-sim's trace: a JSON list of id, timestamp and token counts."""
    requests = []
    with workload.open("rb") as f:
        for line in f:
            r = orjson.loads(line)
            requests.append(
                {
                    "id": str(r["sid"]),
                    "timestamp": r["arrival"],
                    "prompt_tokens": r["prompt_tokens"],
                    "output_tokens": r["output_tokens"],
                }
            )
    out.write_bytes(orjson.dumps(requests))


def tiled(workload: Path, n: int, out: Path) -> None:
    """``n`` requests: the workload's, again and again, each copy after the one before."""
    rows = [orjson.loads(line) for line in workload.read_bytes().splitlines()]
    span = rows[-1]["arrival"] + 1.0
    with out.open("wb") as f:
        for i in range(n):
            r = rows[i % len(rows)]
            arrival = round(r["arrival"] + (i // len(rows)) * span, 6)
            f.write(orjson.dumps({**r, "sid": i, "arrival": arrival}) + b"\n")


def flat_memory(workload: Path, n: int, params: list[str], tmp: str) -> None:
    """Peak RSS of simulate at n/10 and n requests, and their ratio."""
    peaks = []
    for size in (n // 10, n):
        path = Path(tmp) / f"w{size}.jsonl"
        tiled(workload, size, path)
        run = schedcli("simulate", str(path), *params, "-f", "json")
        path.unlink()
        assert run.code == 0, run
        print(f"simulate, {size:,} requests: {run.cpu:.1f} s CPU, peak RSS {run.peak_mb:.0f} MB")
        peaks.append(run.peak_mb)
    ratio = peaks[1] / peaks[0]
    print(f"peak RSS at {n:,} / at {n // 10:,} requests: {ratio:.2f}  "
          f"(target <= 1.2: {verdict(ratio, 1.2)}; {peaks[1]:.0f} MB, "
          f"target <= 100 MB: {verdict(peaks[1], 100)})")  # fmt: skip


def least(runs: list[Usage]) -> Usage:
    return min(runs, key=lambda u: u.cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--sched-sim", type=Path, help="the sched-sim 0.2.1 executable")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--flat", type=int, default=1_000_000, help="requests (0: skip)")
    args = ap.parse_args()
    if not args.trace.is_file():
        sys.exit(f"no trace at {args.trace}")
    from schedcli import CORE

    print(f"core: {CORE}; trace: {args.trace.name}")
    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "w.jsonl"
        convert = schedcli("convert", "auto", str(args.trace), "-o", str(workload))
        assert convert.code == 0, convert
        params = [arg for p in PARAMS for arg in ("-P", p)]
        sim = least([schedcli("simulate", str(workload), *params, "-f", "json")
                     for _ in range(args.repeat)])  # fmt: skip
        assert sim.code == 0, sim
        print(f"convert: {convert.cpu:.2f} s CPU, peak RSS {convert.peak_mb:.0f} MB")
        print(f"simulate ({', '.join(PARAMS)}): {sim.cpu:.2f} s CPU, "
              f"peak RSS {sim.peak_mb:.0f} MB")  # fmt: skip
        if args.flat:
            flat_memory(workload, args.flat, params, tmp)
        if args.sched_sim is None:
            print("sched-sim: not measured (see --sched-sim)")
            return
        theirs = Path(tmp) / "sched-sim.json"
        for_sched_sim(workload, theirs)
        command = [str(args.sched_sim), "trace", str(theirs), "-s", "chunked"]
        command += ["--token-budget", str(BUDGET), "--no-gantt"]
        other = least([measured(command) for _ in range(args.repeat)])
        assert other.code == 0, other
        print(f"sched-sim 0.2.1 (chunked, --token-budget {BUDGET}): {other.cpu:.2f} s CPU, "
              f"peak RSS {other.peak_mb:.0f} MB")  # fmt: skip
        cpu, memory = sim.cpu / other.cpu, sim.peak_mb / other.peak_mb
        print(f"ratio simulate / sched-sim CPU: {cpu:.2f}  (target <= 0.25: {verdict(cpu, 0.25)})")
        print(f"ratio simulate / sched-sim peak memory: {memory:.2f}  "
              f"(target <= 1: {verdict(memory, 1)})")  # fmt: skip


if __name__ == "__main__":
    main()
