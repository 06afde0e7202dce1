"""Reasons at the cost of one replay: ``explain --step`` near the end of a trace and a
``replay --check`` whose first mismatch is near the end, against a plain replay.

    python bench/reasons_bench.py [--events N] [--repeat N]

On a generated trace (``bench/replay_bench.py``'s, 2,000,000 events by default) with one
wrong expect planted at 95% of it (``bench/shrink_bench.py``'s), prints, each measured in
this run as the least CPU of N subprocesses (``bench/measure.py``), the three commands
taken in turns in each round so a slow spell of the machine falls on all of them (each
round's own ratios are printed too):
- explain --step (a step at 95%) / replay: target <= 1.3;
- replay --check (exit 1, with the mismatch and its reasons) / replay: target <= 1.3.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import Usage, schedcli, verdict
from bench.replay_bench import generate
from bench.shrink_bench import plant_wrong_expect


def least_in_turns(repeat: int, commands: dict[str, list[str]]) -> dict[str, Usage]:
    """The least CPU of each command over ``repeat`` rounds, each round running every
    command once; prints each round's ratios to the first command."""
    least: dict[str, Usage] = {}
    for n in range(repeat):
        now = {label: schedcli(*args) for label, args in commands.items()}
        first = next(iter(now.values())).cpu
        ratios = ", ".join(f"{label} {u.cpu / first:.2f}" for label, u in list(now.items())[1:])
        print(f"  round {n + 1}: {ratios}")
        for label, u in now.items():
            if label not in least or u.cpu < least[label].cpu:
                least[label] = u
    return least


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, args.events)
        steps = path.read_bytes().count(b'"get_work"')
        line = plant_wrong_expect(path)
        step = int(steps * 0.95)
        print(f"{args.events:,} events, {steps:,} steps; explain --step {step:,}; "
              f"a wrong expect at line {line:,}")  # fmt: skip
        runs = least_in_turns(
            args.repeat,
            {
                "replay": ["replay", str(path), "-f", "jsonl", "-o", "/dev/null"],
                "explain --step": ["explain", str(path), "--step", str(step)],
                "replay --check": [
                    "replay",
                    str(path),
                    "--check",
                    "-f",
                    "jsonl",
                    "-o",
                    "/dev/null",
                ],
            },
        )
        replay, explain, check = runs["replay"], runs["explain --step"], runs["replay --check"]
        assert replay.code == 0 and explain.code == 0, (replay, explain)
        assert check.code == 1, f"replay --check exited {check.code}, not 1"
        print(f"replay: {replay.cpu:.2f} s CPU")
        for label, usage in (("explain --step", explain), ("replay --check", check)):
            ratio = usage.cpu / replay.cpu
            print(f"{label}: {usage.cpu:.2f} s CPU, ratio {ratio:.2f}  "
                  f"(target <= 1.3: {verdict(ratio, 1.3)})")  # fmt: skip


if __name__ == "__main__":
    main()
