"""Shrink against replay, memory and CPU, on a generated trace with one planted wrong
``expect`` near its end.

    python bench/shrink_bench.py [--events N] [--repeat N]

Prints, each measured in this run:
- shrink peak RSS / replay peak RSS: target <= 4, on any trace size (run it at 100k,
  500k and 2M: the ratio must not grow with the trace);
- shrink CPU / replay CPU: target <= 4.
Both are subprocesses, measured one by one (``bench/measure.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import best, schedcli, verdict
from bench.replay_bench import generate


def plant_wrong_expect(path: Path, at: float = 0.95) -> int:
    """Give the get_work at fraction ``at`` of the trace an expect that leaves out the
    last task its batch really holds; the line number planted."""
    dump = path.with_suffix(".dump.jsonl")
    code = schedcli("replay", str(path), "-f", "jsonl", "-o", str(dump)).code
    assert code == 0, code
    lines = path.read_bytes().splitlines(keepends=True)
    get_works = [i for i, raw in enumerate(lines) if b'"get_work"' in raw]
    batches: dict[int, list[object]] = {}  # step (the n-th get_work) -> its tids
    with dump.open("rb") as f:
        for raw in f:
            record = orjson.loads(raw)
            if "batch" in record:
                batches[record["step"]] = [entry["tid"] for entry in record["batch"]]
    dump.unlink()
    step = int(len(get_works) * at)
    while len(batches.get(step, ())) < 2:
        step += 1
    batch = batches[step]
    lines[get_works[step]] = orjson.dumps({"op": "get_work", "expect": batch[:-1]}) + b"\n"
    path.write_bytes(b"".join(lines))
    return get_works[step] + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="best of N for the replay")
    args = ap.parse_args()
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, args.events)
        line = plant_wrong_expect(path)
        print(f"{args.events:,} events, a wrong expect planted at line {line:,}")
        replay = best([schedcli("replay", str(path), "-f", "jsonl", "-o", "/dev/null")
                       for _ in range(args.repeat)])  # fmt: skip
        out = Path(tmp) / "small.jsonl"
        shrink = schedcli("shrink", str(path), "--until", "check", "-o", str(out))
        assert shrink.code == 0, f"shrink exited {shrink.code}"
        kept = len(out.read_bytes().splitlines())
        print(f"replay: {replay.cpu:.2f} s CPU, {replay.peak_mb:.0f} MB peak")
        print(f"shrink --until check: {shrink.cpu:.2f} s CPU, {shrink.peak_mb:.0f} MB peak, "
              f"{kept} lines kept")  # fmt: skip
        memory = shrink.peak_mb / replay.peak_mb
        cpu = shrink.cpu / replay.cpu
        print(f"ratio shrink / replay peak memory: {memory:.2f}  (target <= 4: "
              f"{verdict(memory, 4)})")  # fmt: skip
        print(f"ratio shrink / replay CPU: {cpu:.2f}  (target <= 4: {verdict(cpu, 4)})")


if __name__ == "__main__":
    main()
