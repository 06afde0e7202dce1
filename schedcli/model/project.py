"""The project a command runs in: the nearest ``pyproject.toml`` at or above a folder (as
ruff and pytest find theirs), and its ``[tool.schedcli]`` section, which the command line
(app/config.py) and the C++ runtime (``[tool.schedcli.cxx]``) both read."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

from .errors import UsageError


def find_pyproject(start: Path) -> Path | None:
    here = start.resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def schedcli_section(start: Path) -> tuple[Path | None, object]:
    """The nearest ``pyproject.toml`` at or above ``start`` and its ``[tool.schedcli]``
    (None when either is missing; the section as TOML gave it, unchecked)."""
    file = find_pyproject(start)
    if file is None:
        return None, None
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{file}: cannot read it: {e}") from None
    tool = data.get("tool", {})
    return file, tool.get("schedcli") if isinstance(tool, dict) else None


def check_keys(file: Path, where: str, table: dict[str, Any], keys: tuple[str, ...]) -> None:
    """A key of ``table`` not in ``keys`` is a UsageError naming the closest known one."""
    for key in table:
        if key not in keys:
            hint = difflib.get_close_matches(key, keys, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise UsageError(
                f"{file}: {where} has no key {key!r}{suggestion}; known: {', '.join(keys)}"
            )
