"""The C++ recorder (integrations/executorch/schedcli/recording_scheduler.h), built with g++
against our stand-in of ExecuTorch's interface header, round-trips under threads."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.helpers import ROOT, run_cli

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(
    GXX is None and not os.environ.get("SCHEDCLI_REQUIRE_GXX"),
    reason="no g++ here (CI installs it and requires this test)",
)
FLAGS = ["-std=c++17", "-fno-exceptions", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"]
INCLUDES = [f"-I{ROOT / 'integrations' / 'executorch'}", f"-I{ROOT / 'tests' / 'cpp' / 'include'}"]


@pytest.fixture(scope="module")
def recorder_test(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("cpp") / "recording_test"
    source = ROOT / "tests" / "cpp" / "recording_test.cpp"
    built = subprocess.run(
        [GXX or "g++", *FLAGS, *INCLUDES, str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return binary


def test_the_header_builds_without_exceptions_and_with_every_warning(recorder_test: Path) -> None:
    assert recorder_test.is_file()


def test_a_recording_from_four_threads_replays_exactly(recorder_test: Path, tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"
    run = subprocess.run([str(recorder_test), str(rec)], capture_output=True, check=False)
    assert run.returncode == 0, run.stderr
    lines = [orjson.loads(x) for x in rec.read_bytes().splitlines()]
    assert lines[0]["policy"] == "first-free"
    ops = {x["op"] for x in lines[1:]}
    assert ops == {"submit", "get_work", "cancel"}
    assert all("t" in x for x in lines[1:])
    assert all("tokens" not in t for x in lines[1:] for t in x.get("tasks", ()))
    r = run_cli(
        "replay", str(rec), "-p", "tests.plugin_policies:FirstFree", "--check", "-f", "jsonl"
    )
    assert r.returncode == 0, r.stderr.decode()
    end = orjson.loads(r.stdout.splitlines()[-1])["end"]
    # How many are cancelled rather than dispatched depends on the threads' interleaving.
    assert end["queued"] == 0 and end["dispatched"] + end["cancelled"] == end["accepted"] > 1000
    assert end["dispatched"] > 0


def test_the_cost_per_call_is_printed(recorder_test: Path, tmp_path: Path) -> None:
    run = subprocess.run(
        [str(recorder_test), str(tmp_path / "r.jsonl"), "20000"], capture_output=True, check=False
    )
    assert run.returncode == 0 and b"ns/call" in run.stdout
