"""Small builders shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from schedcli import DecodeFirstScheduler, Task
from schedcli.model.task import Id

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
REAL = ROOT.parent / "shared" / "traces-real"


def make(d: int, c: int) -> DecodeFirstScheduler:
    """The spec's make(D, C): max_batch_tokens = 2C + D."""
    return DecodeFirstScheduler(2 * c + d, d, c)


def pf(tid: Id, sid: Id, size: int) -> Task:
    return Task(tid, sid, "prefill", size)


def dc(tid: Id, sid: Id) -> Task:
    return Task(tid, sid, "decode", 1)


def ids(batch: Sequence[Task]) -> list[Id]:
    return [t.tid for t in batch]


def run_cli(
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``schedcli`` command in a subprocess."""
    full_env = dict(os.environ)
    full_env.pop("FORCE_COLOR", None)
    full_env["COLUMNS"] = "120"
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "schedcli", *args],
        input=input,
        capture_output=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=timeout,
        check=False,
    )
