"""Start-up: schedcli's small commands against ``python -c pass``, CPU time, in one run.

    python bench/startup_bench.py [--repeat N]

Runs the installed ``schedcli`` console script (beside this interpreter) as a user does;
each figure is the least CPU (user + system) of N runs, measured per child
(``bench/measure.py``), the commands taken in turns. Target: ``--help`` and a tiny replay
at most 4x ``python -c pass``. Run it twice and trust the lower: on a shared two-core
machine one run in ten is slowed by a neighbour.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import measured, verdict

TINY = str(Path(__file__).resolve().parent.parent / "traces" / "rotation-fairness.jsonl")
COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "policies": ["policies"],
    "tiny replay (dump)": ["replay", TINY, "-f", "jsonl", "-o", "/dev/null"],
    "tiny replay (table)": ["replay", TINY],
}
TARGETS = {"--help": 4.0, "tiny replay (dump)": 4.0}


def least_cpus(commands: dict[str, list[str]], repeat: int) -> dict[str, float]:
    """The least CPU of each command over ``repeat`` rounds, each round running every
    command once: a slow spell of the machine falls on all of them, not on one."""
    least = dict.fromkeys(commands, float("inf"))
    for _ in range(repeat):
        for label, argv in commands.items():
            least[label] = min(least[label], measured(argv).cpu)
    return least


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    script = shutil.which("schedcli", path=str(Path(sys.executable).parent))
    if script is None:
        sys.exit("no schedcli console script beside this interpreter: pip install -e . first")
    from schedcli import CORE

    print(f"core: {CORE}; script: {script}")
    commands = {"python -c pass": [sys.executable, "-c", "pass"]}
    commands.update({label: [script, *argv] for label, argv in COMMANDS.items()})
    least = least_cpus(commands, args.repeat)
    base = least.pop("python -c pass")
    print(f"python -c pass: {base * 1000:.0f} ms")
    for label, cpu in least.items():
        ratio = cpu / base
        target = TARGETS.get(label)
        said = f"  (target <= {target:g}: {verdict(ratio, target)})" if target else ""
        print(f"{label}: {cpu * 1000:.0f} ms, ratio {ratio:.1f}{said}")


if __name__ == "__main__":
    main()
