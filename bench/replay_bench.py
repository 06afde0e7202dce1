"""Replay speed against parsing alone, and replay memory, on a generated 2,000,000-event trace.

    python bench/replay_bench.py [--events N] [--keep PATH] [--repeat N]

Prints, each as a ratio of CPU seconds, every side a subprocess with its start-up
(``bench/measure.py``). Every command runs once in each round, the commands in turn, and
each ratio is taken within a round (a neighbour's load that slows a round slows both of its
sides); the verdict is the median of the rounds' ratios, printed with each round's own and
the ratio of each side's least CPU (which pairs runs from different moments):
- replay / parse-only: ``schedcli replay -f jsonl -o /dev/null`` against ``orjson.loads``
  of every line. Target <= 2.5 compiled (4 in pure Python).
- minimal loop / parse-only: the same policy driven by a bare Python loop over orjson's
  dicts (parse, build the Task, call the policy; no validation, ledger or output): the
  policy behind a generic parse. replay / minimal loop is what the engine adds to that,
  less what its reader saves: it reads the recorder's spelling of a plain submit without
  building a dict, so it can come in under 1.
- diff (decode-first vs fcfs) / one replay: target <= 2.5 (and diff / the two replays).
- stats and report / replay: target <= 1.5.
Peak RSS of the replay: target < 60 MB.

Measures whichever core is in use (the first line says which); run it again with
SCHEDCLI_PURE_PYTHON=1 for the pure-Python figures.
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
from bench.measure import measured, schedcli, verdict


def generate(path: Path, events: int, seed: int = 2026) -> None:
    """A runner's explicit call log: prompts in chunk groups, one decode per live session
    per step, the odd cancel, and a get_work per step. Deterministic for a seed."""
    rng = random.Random(seed)
    dumps = orjson.dumps
    tid = 0
    sid = 0
    live: dict[int, int] = {}  # sid -> decodes still to submit
    written = 0
    with path.open("wb", buffering=1 << 20) as f:
        f.write(
            dumps(
                {
                    "schedcli": 1,
                    "policy": "decode-first",
                    "params": {
                        "max_batch_tokens": 544,
                        "max_decode_sequences": 32,
                        "max_prefill_chunk_size": 256,
                    },
                    "meta": {"source": "bench/replay_bench.py", "seed": seed},
                }
            )
            + b"\n"
        )
        while written < events:
            if len(live) < 24 or rng.random() < 0.3:
                sid += 1
                prompt = rng.randint(20, 700)
                chunks = []
                pos = 0
                while pos < prompt:
                    size = min(256, prompt - pos)
                    tid += 1
                    chunks.append(
                        {"tid": tid, "sid": sid, "kind": "prefill", "size": size, "position": pos}
                    )
                    pos += size
                f.write(dumps({"op": "submit", "tasks": chunks}) + b"\n")
                written += 1
                live[sid] = rng.randint(5, 120)
            for s in list(live):
                if written >= events:
                    break
                tid += 1
                f.write(
                    dumps({"op": "submit", "tid": tid, "sid": s, "kind": "decode", "size": 1})
                    + b"\n"
                )
                written += 1
                live[s] -= 1
                if live[s] == 0:
                    del live[s]
            if live and rng.random() < 0.02 and written < events:
                victim = rng.choice(sorted(live))
                f.write(dumps({"op": "cancel", "sid": victim}) + b"\n")
                written += 1
                del live[victim]
            if written < events:
                f.write(b'{"op": "get_work"}\n')
                written += 1


def parse_only(path: Path) -> float:
    start = time.perf_counter()
    loads = orjson.loads
    with path.open("rb") as f:
        for line in f:
            loads(line)
    return time.perf_counter() - start


def minimal_loop(path: Path) -> float:
    """Parse each line to a dict, build the Task, call decode-first: the policy behind a
    generic parse, with no checks and no output."""
    from schedcli import DecodeFirstScheduler, Task

    policy = DecodeFirstScheduler(544, 32, 256)
    submit, get_work, cancel = policy.try_submit, policy.get_work, policy.cancel
    loads = orjson.loads
    start = time.perf_counter()
    with path.open("rb") as f:
        next(f)  # the header
        for line in f:
            o = loads(line)
            op = o["op"]
            if op == "submit":
                group = o.get("tasks")
                if group is None:
                    submit([Task(o["tid"], o["sid"], o["kind"], o["size"])])
                else:
                    submit([Task(d["tid"], d["sid"], d["kind"], d["size"]) for d in group])
            elif op == "get_work":
                get_work()
            else:
                cancel(o["sid"])
    return time.perf_counter() - start


def command(*args: str) -> float:
    """CPU seconds of ``schedcli ARGS`` in a subprocess, output discarded."""
    return schedcli(*args).cpu


def replay(path: Path, policy: str = "decode-first") -> tuple[float, float]:
    """CPU seconds and peak RSS (MB) of the real command."""
    usage = schedcli("replay", str(path), "-p", policy, "--format", "jsonl", "-o", "/dev/null")
    assert usage.code == 0, usage
    return usage.cpu, usage.peak_mb


def child(kind: str, path: Path) -> float:
    """CPU seconds of ``parse_only`` or ``minimal_loop`` in a fresh interpreter, start-up
    included: measured like the commands it is set against."""
    here = Path(__file__).resolve()
    return measured([sys.executable, str(here), "--child", kind, str(path)]).cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every command")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, where = args.child
        (parse_only if kind == "parse" else minimal_loop)(Path(where))
        return
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.jsonl"
        t0 = time.perf_counter()
        generate(path, args.events)
        size_mb = path.stat().st_size / 1e6
        took = time.perf_counter() - t0
        print(f"generated {args.events:,} events ({size_mb:.0f} MB) in {took:.1f} s")
        # Rounds of every command in turn: a neighbour's load shifts over minutes, and it
        # would land on one side if each side's runs came in a block.
        rounds: list[dict[str, float]] = []
        rss = 0.0
        for _ in range(args.repeat):
            cpu, peak = replay(path)
            rss = max(rss, peak)
            rounds.append(
                {
                    "parse": child("parse", path),
                    "minimal": child("minimal", path),
                    "replay": cpu,
                    "fcfs": replay(path, "fcfs")[0],
                    "diff": command("diff", str(path), "--b", "fcfs", "-f", "json"),
                    "stats": command("stats", str(path), "-f", "json"),
                    "report": command("report", str(path), "-o", "/dev/null"),
                }
            )
        least = {k: min(r[k] for r in rounds) for k in rounds[0]}
        print(f"parse only (orjson, every line): {least['parse']:.2f} s CPU (least of rounds)")
        print(f"minimal loop (parse + Task + decode-first): {least['minimal']:.2f} s CPU")
        print(
            f"schedcli replay -f jsonl -o /dev/null: {least['replay']:.2f} s CPU "
            f"(fcfs: {least['fcfs']:.2f} s)"
        )
        target = 2.5 if CORE == "compiled" else 4.0
        _ratio(rounds, least, "replay", "parse", "replay / parse-only", target)
        _ratio(
            rounds, least, "minimal", "parse", "minimal loop / parse-only (the policy's own cost)"
        )
        _ratio(rounds, least, "replay", "minimal", "replay / minimal loop (engine vs bare loop)")
        _ratio(rounds, least, "diff", "replay", "diff / replay", 2.5)
        _ratio(rounds, least, "diff", "replay+fcfs", "diff / (replay A + replay B)")
        _ratio(rounds, least, "stats", "replay", "stats / replay", 1.5)
        _ratio(rounds, least, "report", "replay", "report / replay", 1.5)
        rep = least["replay"]
        print(f"replay peak RSS: {rss:.0f} MB  (target < 60 MB: {verdict(rss, 60)})")
        print(f"replay throughput: {args.events / rep:,.0f} events/s")


def _ratio(
    rounds: list[dict[str, float]],
    least: dict[str, float],
    top: str,
    bottom: str,
    label: str,
    target: float | None = None,
) -> None:
    """``top / bottom`` in each round; the verdict on their median. ``bottom`` may be a
    sum (``replay+fcfs``)."""

    def below(r: dict[str, float]) -> float:
        return sum(r[k] for k in bottom.split("+"))

    each = [r[top] / below(r) for r in rounds]
    median = statistics.median(each)
    judged = f"  (target <= {target:g}: {verdict(median, target)})" if target else ""
    print(f"ratio {label}: {median:.2f}{judged}")
    print(
        f"  each round: {', '.join(f'{x:.2f}' for x in each)}; "
        f"least / least: {least[top] / below(least):.2f}"
    )


if __name__ == "__main__":
    main()
