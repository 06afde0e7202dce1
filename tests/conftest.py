"""The in-process CLI fixture: most CLI tests run ``schedcli.app.cli.main`` in this process.

Subprocesses (``tests.helpers.run_cli``) are for what needs a real process: signals,
pipes, and the installed console script.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from schedcli.app.cli import main
from tests.helpers import ROOT


@dataclass
class CliResult:
    code: int
    stdout: bytes
    stderr: str

    @property
    def lines(self) -> list[bytes]:
        return self.stdout.splitlines()


Cli = Callable[..., CliResult]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """``cli("replay", path, ...)`` runs the command in-process and returns what it did."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("FORCE_COLOR", raising=False)

    def run(*args: str | Path, input: bytes = b"", cwd: Path | None = None) -> CliResult:
        out, err = io.BytesIO(), io.BytesIO()
        stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
        stdin = io.TextIOWrapper(io.BytesIO(input), encoding="utf-8")
        old_cwd = os.getcwd()
        saved = sys.stdout, sys.stderr, sys.stdin
        os.chdir(cwd or ROOT)
        sys.stdout, sys.stderr, sys.stdin = stdout, stderr, stdin
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
        finally:
            sys.stdout, sys.stderr, sys.stdin = saved
            os.chdir(old_cwd)
            for s, h in handlers.items():
                signal.signal(s, h)
        return CliResult(code, out.getvalue(), err.getvalue().decode("utf-8", "replace"))

    yield run
