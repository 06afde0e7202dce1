"""The project a command runs in: the nearest ``pyproject.toml`` at or above a folder (as
ruff and pytest find theirs)."""

from __future__ import annotations

from pathlib import Path


def find_pyproject(start: Path) -> Path | None:
    here = start.resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None
