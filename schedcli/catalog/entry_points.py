"""Installed plugins' entry points, found as ``importlib.metadata.entry_points`` finds them.

Loading importlib.metadata costs a start-up 30 ms (it imports email, zipfile, csv), and
every replay looks for plugins (a plugin may not reuse a built-in's name). What pip and
setuptools install, directories on ``sys.path`` holding ``*.dist-info`` and ``*.egg-info``
directories, is read here directly, in importlib.metadata's order and with its rules: the
first distribution of a name on the path wins, ``entry_points.txt`` is parsed as its
``Sectioned`` reader parses it. Anything else (a zip or an ``.egg`` on the path, another
distribution finder, text it would read differently or refuse) is answered by
importlib.metadata itself, so the answer is always its answer (tests/policies/test_entry_points.py
compares the two on generated layouts).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import PathFinder
from typing import Any, NamedTuple

_INFO_SUFFIXES = (".dist-info", ".egg-info")
_SEPARATORS = re.compile(r"[-_.]+")
# What importlib.metadata's PathDistribution.read_text takes for "no such file".
_ABSENT = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class Plugin(NamedTuple):
    """One entry point of a group: ``name = value``, declared by distribution ``dist``."""

    name: str
    value: str
    group: str
    dist: str

    def load(self) -> Any:
        from importlib.metadata import EntryPoint

        return EntryPoint(name=self.name, value=self.value, group=self.group).load()


class _Unusual(Exception):
    """A layout or text that only importlib.metadata answers exactly."""


def find(group: str, path: Sequence[str]) -> tuple[Plugin, ...]:
    """Every entry point of ``group`` on ``path`` (which must be ``sys.path``, as
    importlib.metadata reads it), in importlib.metadata's order."""
    try:
        return read_directly(group, path)
    except _Unusual:
        return _by_importlib(group)


def _by_importlib(group: str) -> tuple[Plugin, ...]:
    from importlib.metadata import entry_points

    return tuple(
        Plugin(ep.name, ep.value, ep.group, ep.dist.name if ep.dist is not None else "?")
        for ep in entry_points(group=group)
    )


def read_directly(group: str, path: Sequence[str]) -> tuple[Plugin, ...]:
    """The fast reading; raises ``_Unusual`` where it could differ from importlib.metadata."""
    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        raise _Unusual
    seen: set[str] = set()
    found: list[Plugin] = []
    for root in path:
        for info in _infos(root):
            key = _stem_name(os.path.basename(info))
            if key not in seen:
                seen.add(key)
                found.extend(_declared(info, group))
    return tuple(found)


def _normalize(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower().replace("-", "_")


def _infos(root: str) -> Iterator[str]:
    """A path entry's metadata directories: grouped by name in order of first sight,
    each group in directory order (importlib.metadata's ``Lookup``)."""
    try:
        children = os.listdir(root or ".")
    except OSError:
        if os.path.isfile(root):
            raise _Unusual from None  # a zip: its own reader
        return
    if os.path.basename(root).lower().endswith(".egg"):
        raise _Unusual
    groups: dict[str, list[str]] = {}
    for child in children:
        low = child.lower()
        if low.endswith(_INFO_SUFFIXES):
            key = _normalize(low.rpartition(".")[0].partition("-")[0])
            groups.setdefault(key, []).append(os.path.join(root, child))
    for infos in groups.values():
        yield from infos


def _stem_name(stem: str) -> str:
    """The name a distribution is told apart by (``PathDistribution._normalized_name``)."""
    filename, ext = os.path.splitext(stem)
    if ext not in _INFO_SUFFIXES:
        raise _Unusual  # a suffix in other case: importlib reads the metadata's Name
    return _normalize(filename.partition("-")[0])


def _read(info: str, name: str) -> str | None:
    try:
        with open(os.path.join(info, name), encoding="utf-8") as f:
            return f.read()
    except _ABSENT:
        return None
    except (OSError, UnicodeDecodeError):
        raise _Unusual from None


def _declared(info: str, group: str) -> list[Plugin]:
    text = _read(info, "entry_points.txt")
    if not text:
        return []
    section: str | None = None
    pairs: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        if "=" not in line:
            raise _Unusual  # importlib.metadata raises on it: let it
        if section == group:
            name, value = line.split("=", 1)
            pairs.append((name.strip(), value.strip()))
    if not pairs:
        return []
    dist = _dist_name(info)
    return [Plugin(name, value, group, dist) for name, value in pairs]


def _dist_name(info: str) -> str:
    """The ``Name`` of the metadata's header block, where it is plainly written."""
    text = _read(info, "METADATA") or _read(info, "PKG-INFO")
    if not text:
        raise _Unusual
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line:
            break
        key, colon, value = line.partition(":")
        if colon and key.lower() == "name":
            folded = i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t")
            if folded or not value.strip() or value.strip() != value[1:]:
                raise _Unusual
            return value.strip()
    raise _Unusual
