"""Shrink against replay on two fair recordings of real traffic whose decisions depend on
the whole run (each session's counter is the sum of everything it was served before):
what a window from the policy's state (docs/shrink.md) is for.

    python bench/shrink_state_bench.py [--case NAME ...] [--repeat N] [--keep DIR]

Both are built here, seeded and deterministic, from the first 400 requests of the Azure
LLM inference trace 2023 (conversation; /work/shared/traces-real/azure-llm-2023, see its
README), arrivals at 10x their rate (``convert --time-scale 0.1``), simulated under fair
(``simulate -p fair -o``: an explicit recording with an ``expect`` on every get_work, some
106,000 lines). Nothing is written into the repository: the traces go to a temporary
folder (or ``--keep DIR``), never copied from traces-real.

- ``step-999``: fair's default weights; the expect of step 999 leaves out one task (the
  last of its batch), as in issue #61's held-out case;
- ``weights-1-3``: ``prefill_weight`` 1, ``decode_weight`` 3; the expect at 60% of the steps
  (the first batch of two or more tasks from there) wrong the same way.

For each: the lines before and after, shrink's CPU / replay's CPU (``replay --check`` of
the recording as it was, the best of ``--repeat``; target <= 10), the lines kept (target
<= 30), and whether the result still fails ``replay --check`` the same way (the same
signature: the same tids missing and extra at the same step). Every command is a
subprocess, measured on its own (``bench/measure.py``).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import Usage, best, measured, verdict

AZURE = Path("/work/shared/traces-real/azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
REQUESTS = 400
TIME_SCALE = "0.1"

# name: (fair's parameters, where the wrong expect is: a step, or a fraction of the steps)
CASES: dict[str, tuple[dict[str, str], int | float]] = {
    "step-999": ({}, 999),
    "weights-1-3": ({"prefill_weight": "1", "decode_weight": "3"}, 0.6),
}


def schedcli(*args: str, stderr: Path | None = None) -> Usage:
    return measured([sys.executable, "-m", "schedcli", *args], stderr=stderr or "")


def recording(folder: Path, name: str, params: dict[str, str]) -> Path:
    """The fair recording of the Azure requests under ``params`` (a workload converted
    once, then simulated)."""
    workload = folder / "azure-400.workload.jsonl"
    if not workload.exists():
        run = schedcli("convert", "auto", str(AZURE), "--limit", str(REQUESTS),
                       "--time-scale", TIME_SCALE, "-o", str(workload))  # fmt: skip
        assert run.code == 0, f"convert exited {run.code}"
    trace = folder / f"{name}.recorded.jsonl"
    given = [arg for k, v in params.items() for arg in ("-P", f"{k}={v}")]
    run = schedcli("simulate", str(workload), "-p", "fair", *given, "-o", str(trace))
    assert run.code == 0, f"simulate exited {run.code}"
    return trace


def planted(recorded: Path, where: int | float) -> tuple[Path, int, int]:
    """The recording with one expect missing its last task: at step ``where`` (an int),
    or at that fraction of the steps, moved on to the first batch of two or more tasks.
    The trace, the step and its line."""
    lines = recorded.read_bytes().splitlines(keepends=True)
    get_works = [i for i, raw in enumerate(lines) if b'"op":"get_work"' in raw]
    step = where if isinstance(where, int) else int(len(get_works) * where)
    while len(orjson.loads(lines[get_works[step]])["expect"]) < (1 if where == step else 2):
        step += 1
    event = orjson.loads(lines[get_works[step]])
    event["expect"] = event["expect"][:-1]
    lines[get_works[step]] = orjson.dumps(event) + b"\n"
    wrong = recorded.with_name(recorded.name.replace(".recorded", ""))
    wrong.write_bytes(b"".join(lines))
    return wrong, step, get_works[step] + 1


def signature(path: Path, params: dict[str, str]) -> tuple[object, ...] | None:
    """How ``replay --check`` fails on ``path`` (shrink's signature of it), in this process."""
    from schedcli.engine.shrink import failure_test

    failure = failure_test("check", None, dict(params))(str(path), None)
    return None if failure is None else (*failure.signature, failure.step)


def bench(name: str, folder: Path, repeat: int) -> bool:
    params, where = CASES[name]
    recorded = recording(folder, name, params)
    trace, step, line = planted(recorded, where)
    replay = best([schedcli("replay", str(recorded), "--check", "-f", "jsonl", "-o", "/dev/null")
                   for _ in range(repeat)])  # fmt: skip
    assert replay.code == 0, replay.code
    out, said = folder / f"{name}.small.jsonl", folder / f"{name}.shrink.stderr"
    run = schedcli("shrink", str(trace), "--until", "check", "-o", str(out), stderr=said)
    assert run.code == 0, f"shrink exited {run.code}: {said.read_text()}"
    replays = re.search(r"\((\d+) replays\)", said.read_text())
    before = len(trace.read_bytes().splitlines())
    after = len(out.read_bytes().splitlines())
    checked = schedcli("replay", str(out), "--check", "-o", "/dev/null")
    same = checked.code == 1 and signature(out, {}) == signature(trace, {})
    cpu = run.cpu / replay.cpu
    print(f"{name}: the wrong expect at step {step} (line {line:,}); replay --check "
          f"{replay.cpu:.2f} s CPU; shrink {run.cpu:.2f} s CPU, "
          f"{replays.group(1) if replays else '?'} replays")  # fmt: skip
    print(f"  lines {before:,} -> {after} (target <= 30: {verdict(after, 30)}); "
          f"shrink / replay CPU {cpu:.2f} (target <= 10: {verdict(cpu, 10)}); "
          f"replay --check on the result: exit {checked.code}, "
          f"{'the same failure' if same else 'NOT the same failure'}")  # fmt: skip
    return after <= 30 and cpu <= 10 and same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="default: both")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the replay")
    ap.add_argument("--keep", type=Path, help="build into this folder and keep the traces")
    args = ap.parse_args()
    from schedcli import CORE

    print(f"core: {CORE}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        met = [bench(name, folder, args.repeat) for name in args.case or CASES]
    print(f"all targets met in this run: {'yes' if all(met) else 'NO'}")


if __name__ == "__main__":
    main()
