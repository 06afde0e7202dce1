"""``schedcli check --staged``: the suite as the staged commit holds it (the index written
out by ``engine/check/staged.py``), checked with the configuration the commit stages, its
verdicts said with the repository's paths."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ....engine.check.staged import StagedView
from ....engine.check.suite import shown_as
from ...config import Config, load_config
from .suite import Said


def staged_config(view: StagedView) -> Config:
    """``[tool.schedcli]`` as staged: the nearest ``pyproject.toml`` at or above the
    current folder in the index, else (none in the repository) the one above it."""
    project = view.project()
    if project is not None:
        return load_config(Path(project).parent)
    outside = Path(view.top).parent
    if outside == Path(view.top):
        return Config()
    config = load_config(outside)
    config.traces = [view.into(t) for t in config.traces]
    if config.golden_dir is not None:
        config.golden_dir = view.into(config.golden_dir)
    config.folders = {Path(view.into(str(f))): s for f, s in config.folders.items()}
    return config


def staged_root(view: StagedView, config: Config) -> Path:
    """The folder paths are shown relative to, as the repository's."""
    return Path(shown_as(view.alias, str(config.root)))


def real_verdict(alias: tuple[str, str], verdict: Said) -> Said:
    """A verdict reached in the view, its paths said as the repository's."""
    view, top = alias

    def text(said: str) -> str:
        return said.replace(view, top)

    job = verdict.job
    if job is not None:
        golden = shown_as(alias, job.golden) if job.golden else None
        job = replace(job, trace=shown_as(alias, job.trace), golden=golden)
    return replace(
        verdict,
        trace=shown_as(alias, verdict.trace),
        golden=shown_as(alias, verdict.golden) if verdict.golden else None,
        coverage=text(verdict.coverage),
        detail=text(verdict.detail),
        updated=text(verdict.updated),
        job=job,
    )
