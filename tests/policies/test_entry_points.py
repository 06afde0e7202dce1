"""Plugins are found as importlib.metadata finds them, without loading it at start-up."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.catalog import entry_points
from schedcli.catalog.entry_points import Plugin, find, read_directly

GROUP = "schedcli.policies"

NAMES = ["alpha", "Alpha", "al-pha", "al_pha", "al.pha", "beta"]
VERSIONS = ["-1.0", "-2.0", ""]
KINDS = [".dist-info", ".egg-info", ".egg-info file", ".DIST-INFO"]
LINES = [
    "[schedcli.policies]",
    "  [schedcli.policies]  ",
    "[console_scripts]",
    "[]",
    "# a = b:C",
    "",
    "one = pkg.mod:One",
    "  two=pkg.mod:Two [extra]  ",
    "three = a = b",
    "broken line",
]
METADATA = [
    "Metadata-Version: 2.1\nName: {name}\nVersion: 1\n",
    "Metadata-Version: 2.1\nname: {name}\n\nName: other\n",
    "Name:{name}\n",
    "Version: 1\n",
    None,
]

# Mostly what installers write, so that most layouts are read directly.
usual_text = st.lists(st.sampled_from(LINES[:2] + LINES[6:8]), min_size=1, max_size=4)
dist = st.tuples(
    st.sampled_from(NAMES),
    st.sampled_from(VERSIONS),
    st.sampled_from(KINDS[:2] * 4 + KINDS),
    st.one_of(usual_text, usual_text, st.lists(st.sampled_from(LINES), max_size=6)),
    st.sampled_from(METADATA[:1] * 6 + METADATA),
)
layout = st.lists(st.lists(dist, max_size=4), min_size=1, max_size=3)


def build(root: Path, dists: list[tuple[str, str, str, list[str], str | None]]) -> None:
    root.mkdir()
    for name, version, kind, lines, metadata in dists:
        stem = f"{name}{version}"
        if kind == ".egg-info file":
            if (root / f"{stem}.egg-info").exists():
                continue
            (root / f"{stem}.egg-info").write_text((metadata or "").format(name=name))
            continue
        info = root / f"{stem}{kind}"
        if info.exists():
            continue
        info.mkdir()
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        if metadata is not None:
            (info / ("METADATA" if "dist" in kind.lower() else "PKG-INFO")).write_text(
                metadata.format(name=name)
            )


def by_importlib() -> tuple[Plugin, ...] | str:
    from importlib.metadata import entry_points as real

    try:
        return tuple(
            Plugin(ep.name, ep.value, ep.group, ep.dist.name if ep.dist is not None else "?")
            for ep in real(group=GROUP)
        )
    except Exception as e:  # importlib.metadata refuses some texts: so must we
        return type(e).__name__


def ours() -> tuple[Plugin, ...] | str:
    try:
        return find(GROUP, tuple(sys.path))
    except Exception as e:
        return type(e).__name__


@settings(max_examples=300, deadline=None)
@given(layout)
def test_plugins_are_found_as_importlib_metadata_finds_them(
    roots: list[list[tuple[str, str, str, list[str], str | None]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        paths = []
        for i, dists in enumerate(roots):
            build(Path(tmp) / f"p{i}", dists)
            paths.append(str(Path(tmp) / f"p{i}"))
        paths.append(str(Path(tmp) / "missing"))
        mp.setattr(sys, "path", paths)
        assert ours() == by_importlib()


def test_a_plain_installation_is_read_without_importlib_metadata(tmp_path: Path) -> None:
    build(
        tmp_path / "site",
        [
            (
                "fake_plug",
                "-1.0",
                ".dist-info",
                ["[schedcli.policies]", "one = m:One"],
                METADATA[0],
            ),
            (
                "Fake.Plug",
                "-2.0",
                ".dist-info",
                ["[schedcli.policies]", "two = m:Two"],
                METADATA[0],
            ),
        ],
    )
    found = read_directly(GROUP, [str(tmp_path / "site"), str(tmp_path / "nowhere")])
    assert found in (
        (Plugin("one", "m:One", GROUP, "fake_plug"),),
        (Plugin("two", "m:Two", GROUP, "Fake.Plug"),),
    )  # the first in directory order, as importlib.metadata takes it


def test_a_zip_on_the_path_is_left_to_importlib_metadata(tmp_path: Path) -> None:
    (tmp_path / "eggs.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    with pytest.raises(entry_points._Unusual):
        read_directly(GROUP, [str(tmp_path / "eggs.zip")])


def test_this_environment_reads_alike_both_ways() -> None:
    assert find(GROUP, tuple(sys.path)) == by_importlib()
