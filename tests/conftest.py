"""The in-process CLI fixture: most CLI tests run ``schedcli.app.entry.main`` in this process.

Subprocesses (``tests.helpers.run_cli``) are for what needs a real process: signals,
pipes, and the installed console script.

``@pytest.mark.needs("vllm")`` (or ``pytestmark`` for a module) marks a test that needs an
extra: skipped, with the reason, where the extra is absent (the README's ``pytest`` on a
fresh clone), and failed where ``SCHEDCLI_REQUIRE_<EXTRA>`` is set (CI installs them all).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from schedcli.app.inprocess import run_cli_in_process
from schedcli.catalog import REQUEST_POLICIES
from schedcli.model.requests import RequestScheduler
from tests.helpers import ROOT, TOY_NAME


def _toy() -> type[RequestScheduler]:
    from tests.doubles.requests import ToyRequests

    return ToyRequests


@pytest.fixture(autouse=True)
def toy_is_a_named_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy request-level policy under its name, in this process (as an installed
    plugin's would be), so that a trace header may name it; a subprocess gives it with -p."""
    monkeypatch.setitem(REQUEST_POLICIES, TOY_NAME, _toy)


pytest_plugins = ["pytester"]

# pytester puts sys.modules back as it found it after each test that uses it, dropping what
# the test imported first; numpy's core refuses to load twice in a process, so a double
# whose fingerprint is a numpy array failed on a worker where a pytester test had imported
# numpy first (CI's fresh leg). Loaded here, numpy is part of every snapshot.
with contextlib.suppress(ImportError):
    import numpy  # noqa: F401


@dataclass(frozen=True)
class Extra:
    """An extra of pyproject.toml that some tests need, as a test can see it installed."""

    modules: tuple[str, ...]  # what it installs, as imported
    require: str  # set where it is installed (CI): a test that needs it must then run
    program: tuple[str, ...] = ()  # and one of these on PATH (Debian's, not pip's)

    @functools.cached_property
    def missing(self) -> str | None:
        absent = [m for m in self.modules if importlib.util.find_spec(m) is None]
        if self.program and not any(shutil.which(p) for p in self.program):
            absent.append(f"{' or '.join(self.program)} on PATH")
        return ", ".join(absent) or None


# Every extra a test needs; `dev` (the README's install) holds the rest, textual and
# matplotlib included. The fuzz extra (atheris) is fuzz/run.py's alone: no test needs it.
EXTRAS = {
    "vllm": Extra(("vllm",), "SCHEDCLI_REQUIRE_VLLM"),
    "ray": Extra(("ray",), "SCHEDCLI_REQUIRE_RAY"),
    "browser": Extra(
        ("playwright",), "SCHEDCLI_REQUIRE_BROWSER", program=("chromium", "chromium-browser")
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(*extras): the test needs these extras of pyproject.toml (tests/conftest.py "
        "EXTRAS); skipped where one is absent, failed where its SCHEDCLI_REQUIRE_* is set",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("needs"):
        for name in marker.args:
            if name not in EXTRAS:
                raise pytest.UsageError(f"needs({name!r}): not an extra in tests/conftest.py")
            extra = EXTRAS[name]
            if extra.missing is None:
                continue
            if os.environ.get(extra.require):
                pytest.fail(
                    f"{extra.require} is set, so this test must run, but the {name} extra "
                    f"is not all here (missing: {extra.missing})",
                    pytrace=False,
                )
            pytest.skip(
                f"needs the {name} extra (missing: {extra.missing}; pip install -e "
                f"'.[dev,{name}]'); CI installs it and requires this test"
            )


# A test starts a process of its own (schedcli, pytest, a shell) where its source says so.
STARTS_A_PROCESS = re.compile(
    r"\brun_process\(|\bsubprocess\.|\bPopen\(|runpytest_subprocess|\bpty\.|\benv="
)
# What a skip's reason names, as the marker that selects the tests it skips.
NEEDS_BY_REASON = {"g++": "cxx", "C++ compiler": "cxx", "SCHEDCLI_TEST_EXECUTORCH": "executorch",
                   "tmux": "tmux"}  # fmt: skip


def _markers_of(item: pytest.Item) -> set[str]:
    """The markers pyproject.toml registers that ``item`` earns: by the extras it needs, the
    fixtures it takes, its folder, its skips' reasons, and whether it starts a process."""
    found = {name for marker in item.iter_markers("needs") for name in marker.args}
    fixtures = getattr(item, "fixturenames", ())
    if "other_vllm" in fixtures:
        found.add("vllm")
    if "tests/debug/" in item.path.as_posix():
        found.add("debug")
    for marker in item.iter_markers("skipif"):
        reason = str(marker.kwargs.get("reason", ""))
        found |= {name for words, name in NEEDS_BY_REASON.items() if words in reason}
    function = getattr(item, "function", None)
    if function is not None:
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            source = ""
        if STARTS_A_PROCESS.search(source) or "pytester" in fixtures:
            found.add("slow")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only ever adds markers: which tests run is the command line's -m, never this hook.
    for item in items:
        for name in sorted(_markers_of(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(name)


# Interpreters with another vLLM release, for -p vllm@PYTHON (#57): os.pathsep-separated in
# SCHEDCLI_TEST_VLLM_PYTHONS (CI builds one with .ci/vllm-env and sets it, with
# SCHEDCLI_REQUIRE_VLLM_PYTHONS: a test that needs one must then run).
VLLM_PYTHONS_ENV = "SCHEDCLI_TEST_VLLM_PYTHONS"


def vllm_pythons() -> list[str]:
    """The other interpreters' paths (executables that exist), in the order given."""
    given = os.environ.get(VLLM_PYTHONS_ENV, "")
    return [p for p in given.split(os.pathsep) if p and os.access(p, os.X_OK)]


@pytest.fixture
def other_vllm() -> str:
    """An interpreter with another vLLM (the first given); skipped where none is given,
    failed where SCHEDCLI_REQUIRE_VLLM_PYTHONS says one must be."""
    found = vllm_pythons()
    if found:
        return found[0]
    if os.environ.get("SCHEDCLI_REQUIRE_VLLM_PYTHONS"):
        pytest.fail(
            f"SCHEDCLI_REQUIRE_VLLM_PYTHONS is set, but {VLLM_PYTHONS_ENV} names no "
            "interpreter that runs",
            pytrace=False,
        )
    pytest.skip(
        f"needs another vLLM's interpreter in {VLLM_PYTHONS_ENV} (.ci/vllm-env 0.34.0 DIR "
        "makes one); CI builds it and requires this test"
    )


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
