"""Replay through a C++ scheduler (``-p cxx:...``) against our own policies, on the
generated 2,000,000-event trace of ``replay_bench``.

    python bench/cxx_bench.py [--events N] [--repeat N] [--executorch PATH]

Each a ratio of CPU seconds, every side a subprocess with its start-up (``measure.py``),
taken within a round and judged on the median of the rounds (as ``replay_bench`` does):
- ``cxx:decode-first`` (ExecuTorch's own, from ``--executorch`` or ``$EXECUTORCH_ROOT``)
  / ``decode-first`` on the compiled core: target <= 1.2; and / the same replay in pure
  Python (``SCHEDCLI_PURE_PYTHON=1``).
- tests/cpp/schedulers/fifo_scheduler.h (the C++ twin of ``fcfs``) / ``fcfs``, compiled and
  pure: the boundary's cost on a scheduler of our own, measured without a checkout.
The build happens once, before the rounds (it is cached; its time is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import measured, verdict
from bench.replay_bench import generate

HERE = Path(__file__).resolve().parent

FIFO = (
    f"cxx:{HERE.parent / 'tests' / 'cpp' / 'schedulers' / 'fifo_scheduler.h'}="
    "schedcli_test::FifoScheduler::create(max_batch_tokens=544, max_num_seqs=64, "
    "max_prefill_chunk_size=256)"
)
SEED = HERE.parent / "tests" / "cpp" / "seed" / "executorch"


def replay(path: Path, policy: str, root: Path, pure: bool = False) -> float:
    env = ["env", f"EXECUTORCH_ROOT={root}"] + (["SCHEDCLI_PURE_PYTHON=1"] if pure else [])
    args = [*env, sys.executable, "-m", "schedcli", "replay", str(path), "-p", policy]
    usage = measured([*args, "-f", "jsonl", "-o", "/dev/null"])
    assert usage.code == 0, (policy, usage)
    return usage.cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--executorch", type=Path, default=os.environ.get("EXECUTORCH_ROOT"))
    args = ap.parse_args()
    from schedcli import CORE

    if CORE != "compiled":
        sys.exit("run this with the compiled core (pip install -e .); it measures both")
    pairs = [("fifo", FIFO, "fcfs", SEED)]
    if args.executorch:
        pairs.insert(0, ("cxx:decode-first", "cxx:decode-first", "decode-first", args.executorch))
    else:
        print("no --executorch or $EXECUTORCH_ROOT: cxx:decode-first is not measured")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, args.events)
        print(f"generated {args.events:,} events")
        for label, policy, _, root in pairs:
            t0 = time.perf_counter()
            replay(path, policy, root)  # builds, if not cached yet
            print(f"{label}: first replay (build included) {time.perf_counter() - t0:.1f} s")
        for label, policy, ours, root in pairs:
            rounds = []
            for _ in range(args.repeat):
                rounds.append(
                    {
                        "cxx": replay(path, policy, root),
                        "compiled": replay(path, ours, root),
                        "pure": replay(path, ours, root, pure=True),
                    }
                )
            least = {k: min(r[k] for r in rounds) for k in rounds[0]}
            print(
                f"{label}: {least['cxx']:.2f} s CPU; {ours} compiled {least['compiled']:.2f} s, "
                f"pure {least['pure']:.2f} s (least of rounds)"
            )
            for side, target in (("compiled", 1.2), ("pure", None)):
                each = [r["cxx"] / r[side] for r in rounds]
                median = statistics.median(each)
                judged = f"  (target <= {target:g}: {verdict(median, target)})" if target else ""
                print(f"  ratio {label} / {ours} {side}: {median:.2f}{judged}")
                print(f"    each round: {', '.join(f'{x:.2f}' for x in each)}")


if __name__ == "__main__":
    main()
