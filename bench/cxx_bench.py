"""Replay through a C++ scheduler (``-p cxx:...``) against our own policies, on the
generated 2,000,000-event trace of ``replay_bench``.

    python bench/cxx_bench.py [--events N] [--repeat N] [--executorch PATH]
                              [--against CHECKOUT] [--quick]

Each a ratio of CPU seconds, every side a subprocess with its start-up (``measure.py``),
taken within a round and judged on the median of the rounds (as ``replay_bench`` does):
- ``cxx:decode-first`` (ExecuTorch's own, from ``--executorch`` or ``$EXECUTORCH_ROOT``)
  / ``decode-first`` on the compiled core: target <= 1.2; and / the same replay in pure
  Python (``SCHEDCLI_PURE_PYTHON=1``).
- tests/cpp/schedulers/fifo_scheduler.h (the C++ twin of ``fcfs``) / ``fcfs``, compiled and
  pure: the boundary's cost on a scheduler of our own, measured without a checkout.
The build happens once, before the rounds (it is cached; its time is printed).
``--against CHECKOUT`` (another schedcli checkout, its compiled core built in place) also
replays ``cxx:decode-first`` from there in every round, interleaved with this one's, and
prints its ratio beside: a change to the boundary measured before and after in one time
window. ``--quick`` leaves out the pure-Python sides and the FIFO pair.
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


def replay(
    path: Path, policy: str, root: Path, pure: bool = False, checkout: Path | None = None
) -> float:
    """CPU seconds of one replay; from ``checkout``'s schedcli when given (run there)."""
    env = ["env", *([f"--chdir={checkout}"] if checkout else []), f"EXECUTORCH_ROOT={root}"]
    env += ["SCHEDCLI_PURE_PYTHON=1"] if pure else []
    args = [*env, sys.executable, "-m", "schedcli", "replay", str(path), "-p", policy]
    usage = measured([*args, "-f", "jsonl", "-o", "/dev/null"])
    assert usage.code == 0, (policy, usage)
    return usage.cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--executorch", type=Path, default=os.environ.get("EXECUTORCH_ROOT"))
    ap.add_argument("--against", type=Path, help="another checkout's cxx:decode-first too")
    ap.add_argument("--quick", action="store_true", help="no pure-Python sides, no FIFO pair")
    args = ap.parse_args()
    from schedcli import CORE

    if CORE != "compiled":
        sys.exit("run this with the compiled core (pip install -e .); it measures both")
    pairs = [] if args.quick else [("fifo", FIFO, "fcfs", SEED)]
    if args.executorch:
        root = args.executorch.resolve()
        pairs.insert(0, ("cxx:decode-first", "cxx:decode-first", "decode-first", root))
    else:
        print("no --executorch or $EXECUTORCH_ROOT: cxx:decode-first is not measured")
    against = args.against.resolve() if args.against and args.executorch else None
    sides = ("compiled",) if args.quick else ("compiled", "pure")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, args.events)
        print(f"generated {args.events:,} events")
        for label, policy, _, root in pairs:
            t0 = time.perf_counter()
            replay(path, policy, root)  # builds, if not cached yet
            print(f"{label}: first replay (build included) {time.perf_counter() - t0:.1f} s")
            if against is not None and policy == "cxx:decode-first":
                replay(path, policy, root, checkout=against)
                print(f"{label}: {against}'s first replay done")
        for label, policy, ours, root in pairs:
            rounds = []
            other = against if policy == "cxx:decode-first" else None
            for _ in range(args.repeat):
                r = {"cxx": replay(path, policy, root), "compiled": replay(path, ours, root)}
                if "pure" in sides:
                    r["pure"] = replay(path, ours, root, pure=True)
                if other is not None:
                    r["against"] = replay(path, policy, root, checkout=other)
                rounds.append(r)
            least = {k: min(r[k] for r in rounds) for k in rounds[0]}
            print(
                f"{label}: {least['cxx']:.2f} s CPU; {ours} compiled {least['compiled']:.2f} s"
                + (f", pure {least['pure']:.2f} s" if "pure" in sides else "")
                + (f"; {other}'s {least['against']:.2f} s" if other else "")
                + " (least of rounds)"
            )
            for side in sides:
                target = 1.2 if side == "compiled" else None
                each = [r["cxx"] / r[side] for r in rounds]
                median = statistics.median(each)
                judged = f"  (target <= {target:g}: {verdict(median, target)})" if target else ""
                print(f"  ratio {label} / {ours} {side}: {median:.2f}{judged}")
                print(f"    each round: {', '.join(f'{x:.2f}' for x in each)}")
                if other is not None and side == "compiled":
                    each = [r["against"] / r[side] for r in rounds]
                    median = statistics.median(each)
                    print(f"  ratio {other}'s {label} / {ours} {side}: {median:.2f}")
                    print(f"    each round: {', '.join(f'{x:.2f}' for x in each)}")


if __name__ == "__main__":
    main()
