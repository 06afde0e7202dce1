"""The in-process CLI fixture: most CLI tests run ``schedcli.app.entry.main`` in this process.

Subprocesses (``tests.helpers.run_cli``) are for what needs a real process: signals,
pipes, and the installed console script.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from schedcli.app.inprocess import run_cli_in_process
from schedcli.policies import REQUEST_POLICIES
from tests.helpers import ROOT, TOY_NAME, TOY_WHERE


@pytest.fixture(autouse=True)
def toy_is_a_named_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy request-level policy under its name, in this process (as an installed
    plugin's would be), so that a trace header may name it; a subprocess gives it with -p."""
    monkeypatch.setitem(REQUEST_POLICIES, TOY_NAME, TOY_WHERE)

pytest_plugins = ["pytester"]


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # addopts asks for -n auto (both cores); with pytest-xdist switched off (-p no:xdist)
    # nothing would define -n, and pytest would refuse its own configuration.
    if not pluginmanager.has_plugin("xdist") and not pluginmanager.has_plugin("xdist.plugin"):
        # _addoption: the public one reserves lowercase short options for pytest itself.
        parser.getgroup("xdist")._addoption(
            "-n", "--numprocesses", dest="numprocesses", help="(xdist is off: ignored)"
        )


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
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("FORCE_COLOR", raising=False)

    def run(*args: str | Path, input: bytes = b"", cwd: Path | None = None) -> CliResult:
        old_cwd = os.getcwd()
        os.chdir(cwd or ROOT)
        try:
            done = run_cli_in_process([str(a) for a in args], input=input)
        finally:
            os.chdir(old_cwd)
        return CliResult(done.code, done.stdout, done.stderr.decode("utf-8", "replace"))

    yield run


@pytest.fixture(params=["task", "request"])
def level_trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A trace of each level (``t.jsonl``, ``r.jsonl``), three steps, an expect on its
    first step only: a test that takes it runs at both levels."""
    from tests.helpers import request_trace, task_trace

    if request.param == "task":
        return task_trace(tmp_path)
    return request_trace(tmp_path, {"batch": [["a", 8], ["b", 8]], "preempted": [], "finished": []})
