"""Which of schedcli's modules a replay enters, and its calls from a lower layer up into
a higher one (model < formats, policies < engine < app), counted in one process.

    SCHEDCLI_PURE_PYTHON=1 python bench/modules_walk.py [TRACE] [REPLAY OPTIONS ...]

Pure Python only: a profiler sees no compiled frames. Prints the modules entered by the
whole command and by the lines alone (calls under ``Replayer.apply``), and each upward
call with its count: the engine should reach the app only through what it was handed
(an ``Output``'s ``record``/``left``, the progress callback).
"""

from __future__ import annotations

import sys
import types
from collections import Counter
from pathlib import Path

LAYER = {"model": 0, "formats": 1, "policies": 1, "engine": 2, "app": 3}
TRACE = Path(__file__).resolve().parent.parent / "traces" / "rotation-fairness.jsonl"


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYER.get(parts[1], 4) if len(parts) > 1 else 4


def under_a_line(frame: types.FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name in ("apply", "feed") and (
            frame.f_globals.get("__name__") == "schedcli.engine.replay"
        ):
            return True
        frame = frame.f_back
    return False


def main() -> None:
    from schedcli import CORE

    try:
        from schedcli.app.inprocess import run_cli_in_process
    except ImportError:  # a checkout from before the runner moved (to compare with)
        from schedcli.testing import run_cli_in_process  # type: ignore[no-redef]

    if CORE == "compiled":
        sys.exit("run it with SCHEDCLI_PURE_PYTHON=1: a profiler sees no compiled frames")
    trace = sys.argv[1] if len(sys.argv) > 1 else str(TRACE)
    argv = ["replay", trace, *(sys.argv[2:] or ["-f", "jsonl", "-o", "/dev/null"])]
    run_cli_in_process(argv)  # imports done before counting
    entered: set[str] = set()
    per_line: set[str] = set()
    upward: Counter[tuple[str, str, str]] = Counter()

    def profile(frame: types.FrameType, event: str, _: object) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("schedcli.") or callee in (
            "schedcli.app.inprocess",
            "schedcli.testing",
        ):
            return
        entered.add(callee)
        if under_a_line(frame):
            per_line.add(callee)
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if caller.startswith("schedcli.") and layer(caller) < layer(callee):
            upward[(caller, callee, frame.f_code.co_name)] += 1

    sys.setprofile(profile)
    try:
        run_cli_in_process(argv)
    finally:
        sys.setprofile(None)
    short = sorted(m.removeprefix("schedcli.") for m in entered)
    print(f"the command enters {len(entered)} modules: {' '.join(short)}")
    lines = sorted(m.removeprefix("schedcli.") for m in per_line)
    print(f"its trace lines enter {len(per_line)}: {' '.join(lines)}")
    print(f"{len(upward)} upward calls:")
    for (caller, callee, name), n in sorted(upward.items()):
        print(f"  {caller.removeprefix('schedcli.')} -> {callee.removeprefix('schedcli.')}"
              f".{name}  x{n}")  # fmt: skip


if __name__ == "__main__":
    main()
