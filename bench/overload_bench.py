"""Replay cost on overloaded recordings (prompts arrive faster than the budget serves them),
for every built-in policy: how it grows with the trace, and against an ordinary trace.

    python bench/overload_bench.py [--small N] [--large N] [--repeat N] [--policy NAME]...

Generates an overloaded trace of ``--small`` (25,000) and ``--large`` (100,000) events
(``generate``: two or three prompts a step, chunked at 256, of 20 to 700 tokens, against a
budget of 544; decodes, cancels and priorities as a runner's log has them) and an ordinary
one of ``--large`` events (``replay_bench.generate``), then replays them with
``schedcli replay -f jsonl -o /dev/null`` under each policy (decode-first in both modes).
Each replay runs in a fresh interpreter, after a replay of the header alone has loaded
every module, and counts the CPU of the replay alone (``time.process_time``): with the
start-up in, a 25,000-event replay is mostly start-up and any policy looks linear. Each
round runs every command once, the commands in turn, and each ratio is taken within a round
(a neighbour's load that slows a round slows both sides); the verdict is the median of the
rounds' ratios. Printed, per policy:
- growth: CPU at ``--large`` / CPU at ``--small`` overloaded events; linear is 4x
  (the issue's target: at most 5x);
- per event: µs of CPU an event, on the large overloaded trace;
- the end-of-trace check: the part of the large overloaded replay that asks the policy for
  the tasks it still holds (the same trace ending in a ``clear`` has none to ask for), and
  how its CPU for each task still queued grows from the small trace to the large one (1x
  when it costs O(queued), as the issue asks; it grew with the steps before);
- decode-first (both modes): CPU on the large overloaded trace / CPU on the large ordinary
  one (target: at most 2x).

Measures whichever core is in use (the first line says which); SCHEDCLI_PURE_PYTHON=1 for
the pure-Python figures.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import verdict
from bench.replay_bench import generate as generate_ordinary

PARAMS = {"max_batch_tokens": 544, "max_decode_sequences": 32, "max_prefill_chunk_size": 256}
# (label, policy, extra replay arguments)
POLICIES: list[tuple[str, str, tuple[str, ...]]] = [
    ("decode-first", "decode-first", ()),
    ("decode-first compat=reference", "decode-first", ("--param", "compat=reference")),
    ("fcfs", "fcfs", ()),
    ("prefill-first", "prefill-first", ()),
    ("priority", "priority", ()),
    ("sjf", "sjf", ()),
    ("fair", "fair", ()),
]
GROWTH_TARGET = 4 * 1.25  # linear, and a quarter more
AGAINST_ORDINARY_TARGET = 2.0


def generate(path: Path, events: int, seed: int = 2058) -> int:
    """An overloaded runner's explicit call log: each step two or three new prompts (20 to
    700 tokens, in chunks of at most 256, one group each; some with a priority), one
    decode for each of up to 24 sessions decoding, the odd cancel of any session seen, and
    a get_work. About 900 prompt tokens arrive a step against a budget of 544, so the queue
    grows all the way. Returns the tokens submitted. Deterministic for a seed."""
    rng = random.Random(seed)
    dumps = orjson.dumps
    tid = sid = written = tokens = 0
    live: dict[int, int] = {}  # sid -> decodes still to submit
    with path.open("wb", buffering=1 << 20) as f:
        header = {
            "schedcli": 1,
            "policy": "decode-first",
            "params": PARAMS,
            "meta": {"source": "bench/overload_bench.py", "seed": seed},
        }
        f.write(dumps(header) + b"\n")
        while written < events:
            for _ in range(rng.choice((2, 3, 3))):
                if written >= events:
                    break
                sid += 1
                prompt = rng.randint(20, 700)
                tokens += prompt
                chunks = []
                pos = 0
                priority = rng.choice((0, 0, 0, 1, 2))
                while pos < prompt:
                    size = min(256, prompt - pos)
                    tid += 1
                    chunk = {"tid": tid, "sid": sid, "kind": "prefill", "size": size}
                    chunk["position"] = pos
                    if priority:
                        chunk["priority"] = priority
                    chunks.append(chunk)
                    pos += size
                f.write(dumps({"op": "submit", "tasks": chunks}) + b"\n")
                written += 1
                if len(live) < 24:
                    live[sid] = rng.randint(5, 120)
            for s in list(live):
                if written >= events:
                    break
                tid += 1
                tokens += 1
                f.write(
                    dumps({"op": "submit", "tid": tid, "sid": s, "kind": "decode", "size": 1})
                    + b"\n"
                )
                written += 1
                live[s] -= 1
                if live[s] == 0:
                    del live[s]
            if rng.random() < 0.05 and written < events:
                victim = rng.randint(1, sid)
                f.write(dumps({"op": "cancel", "sid": victim}) + b"\n")
                written += 1
                live.pop(victim, None)
            if written < events:
                f.write(b'{"op": "get_work"}\n')
                written += 1
    return tokens


def with_clear(path: Path, out: Path) -> None:
    """The same trace ending in a ``clear``: nothing is held at its end."""
    out.write_bytes(path.read_bytes() + b'{"op": "clear"}\n')


def replay(path: Path, header: Path, policy: str, extra: tuple[str, ...]) -> float:
    """CPU seconds of ``schedcli replay PATH -p POLICY EXTRA`` alone, in a fresh interpreter
    whose modules a replay of ``header`` loaded first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    here = Path(__file__).resolve()
    args = [sys.executable, str(here), "--child", str(path), str(header), policy, *extra]
    out = subprocess.run(args, env=env, capture_output=True, check=True).stdout
    return float(out)


def queued_at_end(path: Path, policy: str, extra: tuple[str, ...]) -> int:
    """The tasks still queued when ``path``'s last event has been replayed (the end record's
    ``queued``): what the end-of-trace check asks the policy for."""
    from schedcli.app.inprocess import run_cli_in_process

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        run = run_cli_in_process(
            ["replay", str(path), "-p", policy, *extra, "-f", "jsonl", "-o", out.name]
        )
        assert run.code == 0, run.stderr.decode()
        last = Path(out.name).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return int(orjson.loads(last)["end"]["queued"])


def child(path: str, header: str, policy: str, extra: list[str]) -> None:
    from schedcli.app.inprocess import run_cli_in_process

    def command(trace: str) -> list[str]:
        return ["replay", trace, "-p", policy, *extra, "-f", "jsonl", "-o", os.devnull]

    assert run_cli_in_process(command(header)).code == 0
    start = time.process_time()
    run = run_cli_in_process(command(path))
    took = time.process_time() - start
    assert run.code == 0, run.stderr.decode()
    print(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", type=int, default=25_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every command")
    ap.add_argument(
        "--policy", action="append", help="only this label (repeatable; default: every one)"
    )
    if sys.argv[1:2] == ["--child"]:  # PATH HEADER POLICY EXTRA...: one replay, timed
        child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
        return
    args = ap.parse_args()
    from schedcli import CORE

    chosen = [p for p in POLICIES if not args.policy or p[0] in args.policy]
    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        small, large, ordinary = d / "small.jsonl", d / "large.jsonl", d / "ordinary.jsonl"
        cleared, header = d / "large-cleared.jsonl", d / "header.jsonl"
        small_cleared = d / "small-cleared.jsonl"
        for path, n in ((small, args.small), (large, args.large)):
            tokens = generate(path, n)
            print(f"overloaded: {n:,} events, {tokens:,} tokens submitted")
        generate_ordinary(ordinary, args.large)
        with_clear(large, cleared)
        with_clear(small, small_cleared)
        held = {
            (label, name): queued_at_end(path, policy, extra)
            for label, policy, extra in chosen
            for name, path in (("small", small), ("large", large))
        }
        header.write_bytes(large.read_bytes().split(b"\n", 1)[0] + b"\n")
        rounds: list[dict[str, float]] = []
        for _ in range(args.repeat):
            r: dict[str, float] = {}
            for label, policy, extra in chosen:
                traces = (("small", small), ("large", large), ("cleared", cleared))
                for name, path in (*traces, ("small-cleared", small_cleared)):
                    r[f"{label}/{name}"] = replay(path, header, policy, extra)
                if label.startswith("decode-first"):
                    r[f"{label}/ordinary"] = replay(ordinary, header, policy, extra)
            rounds.append(r)
    worst = 0.0
    for label, _, _ in chosen:
        print(f"{label}:")
        g = _ratio(rounds, f"{label}/large", f"{label}/small")
        worst = max(worst, g)
        print(
            f"  growth {args.small:,} -> {args.large:,} overloaded events: {g:.2f}x "
            f"(linear {args.large / args.small:g}x; target <= {GROWTH_TARGET:g}: "
            f"{verdict(g, GROWTH_TARGET)})"
        )
        _rounds(rounds, f"{label}/large", f"{label}/small")
        large_cpu = statistics.median(r[f"{label}/large"] for r in rounds)
        per_event = large_cpu / args.large * 1e6
        print(f"  {args.large:,} overloaded: {large_cpu:.2f} s CPU, {per_event:.1f} µs an event")
        check = statistics.median(1 - r[f"{label}/cleared"] / r[f"{label}/large"] for r in rounds)
        print(f"  the end-of-trace check: {100 * check:.0f}% of that replay")
        small_held, large_held = held[label, "small"], held[label, "large"]
        if small_held and large_held:
            each = statistics.median(
                ((r[f"{label}/large"] - r[f"{label}/cleared"]) / large_held)
                / ((r[f"{label}/small"] - r[f"{label}/small-cleared"]) / small_held)
                for r in rounds
            )
            print(
                f"  its CPU a task still queued ({small_held:,} -> {large_held:,} tasks): "
                f"{each:.2f}x from {args.small:,} to {args.large:,} events (O(queued): 1x)"
            )
        if label.startswith("decode-first"):
            a = _ratio(rounds, f"{label}/large", f"{label}/ordinary")
            print(
                f"  {args.large:,} overloaded / {args.large:,} ordinary events: {a:.2f}x "
                f"(target <= {AGAINST_ORDINARY_TARGET:g}: {verdict(a, AGAINST_ORDINARY_TARGET)})"
            )
            _rounds(rounds, f"{label}/large", f"{label}/ordinary")
    print(
        f"worst growth: {worst:.2f}x (target <= {GROWTH_TARGET:g}: {verdict(worst, GROWTH_TARGET)})"
    )


def _ratio(rounds: list[dict[str, float]], top: str, bottom: str) -> float:
    return statistics.median(r[top] / r[bottom] for r in rounds)


def _rounds(rounds: list[dict[str, float]], top: str, bottom: str) -> None:
    print(f"    each round: {', '.join(f'{r[top] / r[bottom]:.2f}' for r in rounds)}")


if __name__ == "__main__":
    main()
