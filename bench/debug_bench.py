"""``schedcli debug``'s time travel at scale, as ratios against ``replay`` of the same trace.

    python bench/debug_bench.py [--steps N] [--every N] [--keep DIR]

Two generated traces of 2,000,000 events each: *long*, N steps (default 1,000,000; one
submit and one ``get_work`` a step), and *wide*, replay_bench.py's runner log (prompts in
chunk groups, decodes, cancels: about 74,000 steps). For each, through the debugger's own client
(``schedcli.engine.travel.Travel``, the server process the app talks to):
- first screen: from start to the first step's view, as the app opens with it; against
  replay's CPU for the whole trace (``schedcli replay -f jsonl -o /dev/null``). Target <= 2 s.
- index: the server's one pass over the trace, against that replay. (It runs in the
  background behind the screen.)
- step back at the last step, and jumps to random steps: each answer's seconds (median and
  worst of 50). Target <= 0.3 s.
- memory: the server, its checkpoints and workers together (proportional set size, PSS,
  from /proc), against the replay's peak RSS.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import schedcli


def generate(path: Path, steps: int, seed: int = 43) -> None:
    """Chats of 1-4 live sessions: a session's prompt in chunks, then its decodes; one task
    submitted before each get_work. Deterministic for a seed."""
    rng = random.Random(seed)
    dumps = orjson.dumps
    params = {"max_batch_tokens": 256, "max_decode_sequences": 8, "max_prefill_chunk_size": 128}
    live: dict[int, int] = {}  # sid -> decodes still to submit
    tid = sid = 0
    with path.open("wb", buffering=1 << 20) as f:
        f.write(dumps({"schedcli": 1, "policy": "decode-first", "params": params}) + b"\n")
        for _ in range(steps):
            if (len(live) < 4 and rng.random() < 0.05) or not live:
                sid += 1
                live[sid] = rng.randint(5, 60)
                kind, size, who = "prefill", rng.randint(16, 128), sid
            else:
                who = rng.choice(list(live))
                live[who] -= 1
                if live[who] == 0:
                    del live[who]
                kind, size = "decode", 1
            tid += 1
            f.write(dumps({"op": "submit", "tid": tid, "sid": who, "kind": kind, "size": size}))
            f.write(b'\n{"op":"get_work"}\n')


def pss_of_group(pgid: int) -> float:
    """MB of proportional set size of every process in a process group."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1024


def measure(path: Path, every: int) -> None:
    from schedcli.engine.travel import Travel

    replay = schedcli("replay", str(path), "-f", "jsonl", "-o", "/dev/null")
    print(f"replay: {replay.cpu:.2f} s CPU, peak RSS {replay.peak_mb:.0f} MB")
    t0 = time.perf_counter()
    with Travel(str(path), every=every) as travel:
        travel.wait("hello")
        travel.view(0)
        first = time.perf_counter() - t0
        travel.wait("indexed")
        index = time.perf_counter() - t0
        steps = travel.steps
        last = travel.numbers[-1]
        backs = []
        for i in range(50):
            t = time.perf_counter()
            travel.view(travel.numbers[steps - 2 - i])
            backs.append(time.perf_counter() - t)
        rng = random.Random(1)
        jumps = []
        for _ in range(50):
            t = time.perf_counter()
            travel.view(travel.numbers[rng.randrange(steps)])
            jumps.append(time.perf_counter() - t)
        pss = pss_of_group(travel._process.pid)
        kept = len(travel.checkpoints)
    print(f"steps: {steps:,} (the last {last:,}); checkpoints kept: {kept}")
    print(f"first screen: {first:.2f} s = {first / replay.cpu:.2f}x replay (target <= 2 s)")
    print(f"index (background): {index:.2f} s = {index / replay.cpu:.2f}x replay")
    for label, times in (("step back from the end", backs), ("jump anywhere", jumps)):
        print(
            f"{label}: median {statistics.median(times):.3f} s, worst {max(times):.3f} s"
            f" = {max(times) / replay.cpu:.3f}x replay (target <= 0.3 s)"
        )
    print(f"memory: {pss:.0f} MB PSS = {pss / replay.peak_mb:.2f}x replay's peak RSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--keep", type=Path, help="a folder to keep the traces in, and reuse")
    args = ap.parse_args()
    from bench.replay_bench import generate as generate_wide
    from schedcli._compiled import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        long, wide = folder / f"long-{args.steps}.jsonl", folder / "wide-2000000.jsonl"
        if not long.exists():
            generate(long, args.steps)
        if not wide.exists():
            generate_wide(wide, 2_000_000)
        for label, path in (("long", long), ("wide", wide)):
            print(f"--- {label}: {path.name}")
            measure(path, args.every)


if __name__ == "__main__":
    main()
