"""The pytest plugin (entry point ``pytest11``): every trace of a suite a test item, checked
as ``schedcli check`` checks it, a failure shown as its first divergence step by step.

Active only when asked: ``pytest --schedcli [PATH]``, or ``[tool.schedcli] pytest = true``
(then on a run of the whole suite, not when test files are named on the command line).
``pytest --schedcli`` runs the traces alone (not the ``testpaths`` too), unless test files
are named on the command line. ``--schedcli-update`` rewrites differing or missing
goldens, as ``check --update``. Each item checks one trace on its own, so
``pytest -n auto`` spreads them over workers. The verdicts are check's: a trace without
a golden fails, an orphaned golden is a failing item of its own, as configured.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .config import Config


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("schedcli", "schedcli golden suites")
    group.addoption(
        "--schedcli",
        action="append",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="check every trace (a test each) of PATH, or of [tool.schedcli] traces",
    )
    group.addoption(
        "--schedcli-update",
        action="store_true",
        help="rewrite differing or missing goldens from their replays",
    )


def _paths(config: pytest.Config, settings: Config) -> list[str] | None:
    """The suites asked for (empty: the configured ones), or None when the plugin is not
    asked for."""
    asked: list[str] | None = config.getoption("schedcli")
    if asked is not None:
        return [p for p in asked if p]
    if settings.pytest and config.args_source != pytest.Config.ArgsSource.ARGS:
        return []
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``--schedcli`` with no test files named: the traces alone."""
    asked = config.getoption("schedcli")
    if asked is not None and config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    from ..model.errors import SchedcliError
    from .usage import error_text

    try:
        _collect(session, config, items)
    except SchedcliError as e:  # a bad [tool.schedcli] or PATH: pytest's usage error
        raise pytest.UsageError(error_text(e)) from None


def _collect(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    from ..engine.check.suite import find_suite
    from ..model.errors import UsageError
    from .commands.check.report import refuse_aliases
    from .commands.check.suite import CheckRequest, suite_jobs
    from .config import load_config

    settings = load_config(config.rootpath)
    paths = _paths(config, settings)
    if paths is None:
        return
    update = bool(config.getoption("schedcli_update"))
    req = CheckRequest(paths, update=update).with_config(settings)
    suite = find_suite(req.paths, req.golden_dir)
    refuse_aliases(req, suite, None)
    if not suite.traces:
        where = ", ".join(req.paths)
        raise UsageError(f"no traces (*.jsonl, *.jsonl.gz) in {where}: nothing to check")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for note in suite.notes:
        if reporter is not None:
            reporter.write_line(f"schedcli: note: {note}")
    made: list[pytest.Item] = []
    for job in suite_jobs(req, suite):
        # Named as found (a link as the link, never as what it leads to), as check names it.
        collector = TraceFile.from_parent(session, path=Path(os.path.abspath(job.trace)))
        made.append(TraceItem.from_parent(collector, name="check", job=job, req=req))
    for golden in suite.orphans:
        collector = TraceFile.from_parent(session, path=Path(os.path.abspath(golden)))
        made.append(OrphanItem.from_parent(collector, name="orphaned", req=req))
    items.extend(made)
    # Reported as collected, as a file's items are: -m's deselection (which runs after
    # this) then counts them among the collected ("5/1796 collected", not "-5/1791").
    for item in made:
        report = pytest.CollectReport(item.nodeid, "passed", None, [item])
        config.hook.pytest_collectreport(report=report)


class TraceFile(pytest.File):
    """A trace: its one item is made at collection (``pytest_collection_modifyitems``)."""

    def collect(self) -> Iterator[pytest.Item]:
        return iter(())


class TraceFailed(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _SuiteItem(pytest.Item):
    """An item of a suite: its failure is the verdict's text, not a traceback."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, TraceFailed):
            return excinfo.value.text
        return super().repr_failure(excinfo, style)


class TraceItem(_SuiteItem):
    def __init__(self, *, job: Any, req: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job, self.req = job, req

    def runtest(self) -> None:
        from ..engine.check.runner import checked
        from .commands.check.suite import BROKEN, ERROR, FAIL, PASS, UNCHECKED
        from .commands.check.suite import said as in_words

        # A trace whose policy may end the process (a C++ scheduler) is checked in a
        # process of its own, as `check` checks it: its end fails the item, not pytest.
        (verdict,) = checked([self.job], 1, in_words)
        if verdict.status == PASS:
            return
        if verdict.status == UNCHECKED and self.req.allow_unchecked:
            pytest.skip(verdict.coverage)
        said = verdict.status not in (ERROR, BROKEN)  # their detail says it
        lines = [f"{verdict.status}: {verdict.coverage}"] if said else []
        if verdict.updated:
            lines.append(verdict.updated)
        where = f"{self.job.trace}:{verdict.line}" if verdict.line else self.job.trace
        if verdict.detail:
            lines += [f"--- {where}: first divergence ---" if verdict.status == FAIL else where]
            lines.append(verdict.detail)
        if verdict.status in (FAIL, ERROR, BROKEN):
            lines.append(f"reproduce: {verdict.command()}")
        raise TraceFailed("\n".join(lines))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"schedcli check {self.job.trace}"


class OrphanItem(_SuiteItem):
    """A golden that no trace claims: failing, as check fails it (skipped under
    ``strict = false``)."""

    def __init__(self, *, req: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.req = req

    def runtest(self) -> None:
        from .commands.check.report import ORPHAN_TEXT

        if not self.req.strict:
            pytest.skip(f"{ORPHAN_TEXT} (strict = false)")
        raise TraceFailed(f"orphaned: {ORPHAN_TEXT} (its trace was deleted or renamed?)")

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"schedcli check: orphaned golden {self.path}"
