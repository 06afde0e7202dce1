"""``[tool.schedcli]`` in ``pyproject.toml``: where a repository's traces and goldens are,
and the policy each folder replays under, so ``schedcli check`` needs no arguments there.

The nearest ``pyproject.toml`` at or above the current directory is read (as ruff and
pytest find theirs); paths in it are relative to its folder. Command-line options
override it. An unknown key is an error naming the closest known one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.errors import UsageError
from ..model.limits import OPTIONS, BoundError
from ..model.project import check_keys, schedcli_section

SECTION = "[tool.schedcli]"
KEYS = (
    "traces",
    "golden-dir",
    "golden",
    "jobs",
    "allow-unchecked",
    "allow-incomplete",
    "strict",
    "pytest",
    "folders",
    "cxx",
)
FOLDER_KEYS = ("policy", "params", "golden")
GOLDEN_RULES = ("required", "optional")


@dataclass
class FolderSettings:
    """What the traces of one folder (and the folders below it) replay under, and whether
    they must have a golden (None: as the section says)."""

    policy: str | None = None
    params: dict[str, object] = field(default_factory=dict)
    golden: str | None = None


@dataclass
class Config:
    file: Path | None = None  # the pyproject.toml read, if any
    traces: list[str] = field(default_factory=list)
    golden_dir: str | None = None
    golden: str = "required"  # every trace has a golden, or "optional"
    jobs: int | None = None
    allow_unchecked: bool = False
    allow_incomplete: bool = False
    strict: bool = True  # a golden no trace claims fails
    pytest: bool = False
    folders: dict[Path, FolderSettings] = field(default_factory=dict)  # by resolved path

    @property
    def root(self) -> Path:
        """The folder paths are shown relative to: the project's (its pyproject.toml's),
        else the repository's, else the current one."""
        if self.file is not None:
            return self.file.parent.resolve()
        here = Path.cwd().resolve()
        for folder in (here, *here.parents):
            if (folder / ".git").exists():
                return folder
        return here

    def settings_for(self, trace: str) -> FolderSettings:
        """The settings of the nearest configured folder holding ``trace``: the folder it
        is found in (a link's, not that of the file it leads to, as its golden is)."""
        here = Path(trace).absolute().parent.resolve()
        for folder in (here, *here.parents):
            if folder in self.folders:
                return self.folders[folder]
        return FolderSettings()

    def golden_optional(self, trace: str) -> bool:
        rule = self.settings_for(trace).golden or self.golden
        return rule == "optional"


def load_config(start: Path | None = None) -> Config:
    """The configuration of the project holding ``start`` (default: the current folder)."""
    file, section = schedcli_section(start or Path.cwd())
    if file is None:
        return Config()
    if section is None:
        return Config(file)
    return _parse(file, _table(file, SECTION, section))


def _parse(file: Path, section: dict[str, Any]) -> Config:
    check_keys(file, SECTION, section, KEYS)
    base = file.parent
    config = Config(file)
    if "traces" in section:
        traces = section["traces"]
        if not isinstance(traces, list) or not all(isinstance(t, str) for t in traces):
            raise _bad(file, "traces", "a list of folders or files", traces)
        config.traces = [str(base / t) for t in traces]
    if "golden-dir" in section:
        config.golden_dir = str(base / _string(file, "golden-dir", section["golden-dir"]))
    if "golden" in section:
        config.golden = _golden_rule(file, "golden", section["golden"])
    if "jobs" in section:
        try:
            config.jobs = OPTIONS["jobs"].check(f"{file}: {SECTION} jobs", section["jobs"])
        except BoundError as e:
            raise UsageError(str(e)) from None
    for key in ("allow-unchecked", "allow-incomplete", "strict", "pytest"):
        if key in section:
            value = section[key]
            if not isinstance(value, bool):
                raise _bad(file, key, "true or false", value)
            setattr(config, key.replace("-", "_"), value)
    folders = _table(file, f"{SECTION} folders", section.get("folders", {}))
    for name, settings in folders.items():
        folder = (base / name).resolve()
        if not folder.is_dir():
            raise UsageError(
                f'{file}: {SECTION} folders."{name}": no such folder ({folder}); its '
                "settings would apply to nothing"
            )
        config.folders[folder] = _folder(file, name, settings)
    return config


def _golden_rule(file: Path, key: str, value: object) -> str:
    if value not in GOLDEN_RULES:
        raise _bad(file, key, " or ".join(repr(r) for r in GOLDEN_RULES), value)
    return str(value)


def _folder(file: Path, name: str, raw: object) -> FolderSettings:
    where = f'{SECTION} folders."{name}"'
    table = _table(file, where, raw)
    check_keys(file, where, table, FOLDER_KEYS)
    settings = FolderSettings()
    if "policy" in table:
        settings.policy = _string(file, f"folders.{name}.policy", table["policy"])
    params = _table(file, f"{where} params", table.get("params", {}))
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _bad(file, f"folders.{name}.params.{key}", "a number or a string", value)
    settings.params = dict(params)
    if "golden" in table:
        settings.golden = _golden_rule(file, f"folders.{name}.golden", table["golden"])
    return settings


def _table(file: Path, where: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"{file}: {where} must be a table, not {value!r}")
    return value


def _string(file: Path, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise _bad(file, key, "a string", value)
    return value


def _bad(file: Path, key: str, expected: str, value: object) -> UsageError:
    return UsageError(f"{file}: {SECTION} {key} must be {expected}, not {value!r}")
