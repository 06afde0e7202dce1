"""Shrink against replay on three shapes of failing trace, each with one wrong ``expect``.

    python bench/shrink_bench.py [--shape NAME ...] [--repeat N] [--keep DIR]

The shapes (generated, deterministic):
- ``decode-first-2m``: the 2,000,000-event bench trace (``bench/replay_bench.py``), the
  expect of the get_work at 95% of it leaving out the last task of its batch;
- ``fair-100k``: a 100,000-event trace under ``fair``, an ``expect`` on every get_work (as a
  recorder writes them), the one at the middle wrong the same way;
- ``short-sessions-200k``: 200,000 events of sessions two to six decodes long, under
  decode-first, the expect at 95% wrong.

For each: shrink's CPU / replay's CPU (target <= 10), the replays shrink tried, the lines
kept (target <= 30: the cause is one task), and shrink's peak RSS / replay's (target <= 4).
Then, in this process, the CPU one small candidate costs (the fair shape's result, tried
1,000 times), replayed from memory and written to a file first.
Every command is a subprocess, measured on its own (``bench/measure.py``); replay is the
best of ``--repeat`` runs of ``replay -f jsonl -o /dev/null`` (with ``--check`` where the
recording has expects) on the trace as it was recorded, before the wrong expect.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import Usage, best, measured, verdict
from bench.replay_bench import generate


def batches(path: Path) -> dict[int, list[object]]:
    """Each step's batch (its tids) as replay dispatches it."""
    dump = path.with_suffix(".dump.jsonl")
    run = measured([sys.executable, "-m", "schedcli", "replay", str(path), "-f", "jsonl",
                    "-o", str(dump)])  # fmt: skip
    assert run.code == 0, run.code
    found: dict[int, list[object]] = {}
    with dump.open("rb") as f:
        for raw in f:
            if b'"batch"' in raw:
                record = orjson.loads(raw)
                found[record["step"]] = [entry["tid"] for entry in record["batch"]]
    dump.unlink()
    return found


def record_expects(path: Path, every: bool, wrong_at: float) -> tuple[Path, int]:
    """The trace with the batch each get_work dispatches as its expect (``every``; else
    none), and the one at fraction ``wrong_at`` missing its last task; the recording (every
    expect right) is written beside it. The wrong file and its wrong line's number."""
    dispatched = batches(path)
    lines = path.read_bytes().splitlines(keepends=True)
    get_works = [i for i, raw in enumerate(lines) if raw.startswith(b'{"op": "get_work"')]
    step = int(len(get_works) * wrong_at)
    while len(dispatched.get(step, ())) < 2:
        step += 1
    for n, i in enumerate(get_works):
        if every and n in dispatched:
            lines[i] = orjson.dumps({"op": "get_work", "expect": dispatched[n]}) + b"\n"
    path.with_suffix(".recorded.jsonl").write_bytes(b"".join(lines))
    wrong = dispatched[step][:-1]
    lines[get_works[step]] = orjson.dumps({"op": "get_work", "expect": wrong}) + b"\n"
    path.write_bytes(b"".join(lines))
    return path, get_works[step] + 1


def short_sessions(path: Path, events: int, seed: int = 7) -> None:
    """Many short sessions: up to two new a step, each a prompt of one or two chunks, then
    two to six decodes (the queue stays short: the traffic fits the budget)."""
    rng = random.Random(seed)
    dumps = orjson.dumps
    header = {"schedcli": 1, "policy": "decode-first", "meta": {"source": "shrink_bench"}}
    tid = sid = written = 0
    live: dict[int, int] = {}
    with path.open("wb", buffering=1 << 20) as f:
        f.write(dumps(header) + b"\n")
        while written < events:
            for _ in range(rng.randint(0, 2)):
                sid += 1
                chunks, prompt = [], rng.randint(20, 400)
                for pos in range(0, prompt, 256):
                    tid += 1
                    chunks.append({"tid": tid, "sid": sid, "kind": "prefill",
                                   "size": min(256, prompt - pos), "position": pos})  # fmt: skip
                f.write(dumps({"op": "submit", "tasks": chunks}) + b"\n")
                live[sid] = rng.randint(2, 6)
                written += 1
            for s in list(live):
                tid += 1
                f.write(dumps({"op": "submit", "tid": tid, "sid": s, "kind": "decode",
                               "size": 1}) + b"\n")  # fmt: skip
                written += 1
                live[s] -= 1
                if not live[s]:
                    del live[s]
            f.write(b'{"op": "get_work"}\n')
            written += 1


def fair(path: Path, events: int) -> None:
    """The bench trace under fair (same traffic, its header's policy and params fair's)."""
    generate(path, events)
    lines = path.read_bytes().split(b"\n", 1)
    header = orjson.loads(lines[0])
    header["policy"], header["params"] = "fair", {"max_batch_tokens": 544}
    path.write_bytes(orjson.dumps(header) + b"\n" + lines[1])


SHAPES: dict[str, tuple[Callable[[Path], None], bool, float]] = {
    "decode-first-2m": (lambda p: generate(p, 2_000_000), False, 0.95),
    "fair-100k": (lambda p: fair(p, 100_000), True, 0.5),
    "short-sessions-200k": (lambda p: short_sessions(p, 200_000), False, 0.95),
}


def shrink(path: Path, out: Path) -> tuple[Usage, int]:
    """``shrink --until check`` measured, and the replays it says it tried."""
    said = out.with_suffix(".stderr")
    run = measured([sys.executable, "-m", "schedcli", "shrink", str(path), "--until", "check",
                    "-o", str(out)], stderr=said)  # fmt: skip
    assert run.code == 0, f"shrink exited {run.code}: {said.read_text()}"
    found = re.search(r"\((\d+) replays\)", said.read_text())
    assert found, said.read_text()
    return run, int(found.group(1))


def bench(name: str, folder: Path, repeat: int) -> bool:
    make, every, at = SHAPES[name]
    path = folder / f"{name}.jsonl"
    make(path)
    _, line = record_expects(path, every, at)
    recorded = path.with_suffix(".recorded.jsonl")
    check = ["--check"] if every else []  # a recording with no expect has nothing to check
    replay = best([measured([sys.executable, "-m", "schedcli", "replay", str(recorded), *check,
                             "-f", "jsonl", "-o", "/dev/null"])
                   for _ in range(repeat)])  # fmt: skip
    assert replay.code == 0, replay.code
    out = folder / f"{name}.small.jsonl"
    run, replays = shrink(path, out)
    kept = len(out.read_bytes().splitlines())
    cpu, memory = run.cpu / replay.cpu, run.peak_mb / replay.peak_mb
    print(f"{name}: the wrong expect at line {line:,}; replay {replay.cpu:.2f} s CPU, "
          f"{replay.peak_mb:.0f} MB; shrink {run.cpu:.2f} s CPU, {run.peak_mb:.0f} MB")  # fmt: skip
    print(f"  shrink / replay CPU: {cpu:.2f} (target <= 10: {verdict(cpu, 10)}); "
          f"{replays} replays; {kept} lines kept (target <= 30: {verdict(kept, 30)}); "
          f"peak memory ratio {memory:.2f} (target <= 4: {verdict(memory, 4)})")  # fmt: skip
    return cpu <= 10 and kept <= 30 and memory <= 4


def per_candidate(path: Path, small: Path) -> None:
    """One small candidate (``small``'s lines, found in ``path``) tried again and again:
    CPU per try, replayed from memory and written to a file first."""
    from schedcli.engine.shrink import reduce
    from schedcli.engine.shrink.candidates import Candidate, Lines, Ranges
    from schedcli.engine.shrink.failures import failure_test

    lines = Lines(str(path))
    try:
        with open(lines.path, "rb") as f:
            index = {raw.rstrip(b"\n"): i for i, raw in enumerate(f)}
        kept = Ranges.of(sorted(index[orjson.dumps(orjson.loads(raw))]
                                for raw in small.read_bytes().splitlines()[1:]))  # fmt: skip
        shrinker = reduce._Shrinker(lines, failure_test("check", None, {}), None, lambda *_: None)
        took = {}
        for label, limit in (("memory", reduce.SMALL), ("file", 0)):
            saved, reduce.SMALL = reduce.SMALL, limit
            try:
                start = time.process_time()
                for _ in range(1000):
                    shrinker.run(Candidate(kept))
                took[label] = (time.process_time() - start) / 1000
            finally:
                reduce.SMALL = saved
    finally:
        lines.close()
    print(
        f"a {len(kept)}-line candidate: {took['memory'] * 1e3:.3f} ms CPU from memory, "
        f"{took['file'] * 1e3:.3f} ms through a file (ratio {took['file'] / took['memory']:.2f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES), help="default: all")
    ap.add_argument("--repeat", type=int, default=2, help="best of N for the replay")
    ap.add_argument("--keep", type=Path, help="generate into this folder and keep the traces")
    args = ap.parse_args()
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        met = [bench(name, folder, args.repeat) for name in args.shape or SHAPES]
        if "fair-100k" in (args.shape or SHAPES):
            per_candidate(folder / "fair-100k.jsonl", folder / "fair-100k.small.jsonl")
    print(f"all targets met in this run: {'yes' if all(met) else 'NO'}")


if __name__ == "__main__":
    main()
