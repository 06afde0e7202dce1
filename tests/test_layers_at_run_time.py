"""What a trace line passes through at run time: the engine calls up into the app only
through the output protocol (``Output.record`` / ``left``) and the progress callback."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import schedcli
from schedcli.app.inprocess import run_cli_in_process
from tests.helpers import TRACES

TRACE = TRACES / "rotation-fairness.jsonl"
GOLDEN = TRACES / "golden" / "rotation-fairness.dump.jsonl"
# The engine's ways up: the callbacks it was handed (the old main also called
# replaying's own ``tell`` to feed the Perfetto writer).
PROTOCOL = {"record", "left", "on_step", "_all", "_left", "__call__"}


def calls_up_from_the_engine(*args: str) -> set[tuple[str, str]]:
    """(module, function) of every app function the engine calls while replaying."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: types.FrameType, event: str, _: object) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith("schedcli.app") and caller.startswith("schedcli.engine"):
            seen.add((callee, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        run = run_cli_in_process(["replay", str(TRACE), *args])
    finally:
        sys.setprofile(None)
    assert run.code == 0, run.stderr
    return seen


@pytest.mark.parametrize(
    "args",
    [
        ("-f", "jsonl", "-o", "-"),
        ("--steps", "1:3"),
        ("--golden", str(GOLDEN), "-o", "-"),
        ("--check", "-f", "jsonl"),
    ],
    ids=["dump", "table-of-some-steps", "golden", "check"],
)
def test_the_engine_reaches_outputs_only_through_the_output_protocol(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    if schedcli.CORE == "compiled":
        pytest.skip("compiled functions are invisible to a profiler: the pure run checks this")
    ups = calls_up_from_the_engine(*args, "--perfetto", str(tmp_path / "t.json"))
    assert ups, "nothing was seen: the profiler saw no engine frames"
    assert {name for _, name in ups} <= PROTOCOL, ups
