"""A suite as the staged commit holds it, not as the working tree does (``check
--staged``). The index is written out in a temporary folder that mirrors the repository
(folders, links, ``pyproject.toml``, every trace and golden by name, and the contents of
those checked), and the traces and goldens the commit touches are checked there as any
suite is; every path is shown as the repository's.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ...model.errors import Option, SchedcliError, UsageError
from .suite import DUMP_SUFFIX, Suite, find_suite, golden_of, is_trace, shown_as

LINK, GITLINK = "120000", "160000"  # the index's modes of a symbolic link, a submodule
PROJECT = "pyproject.toml"
# Git's environment names a path relative to the folder git was started in: made absolute,
# as git runs here in the repository's top folder.
_GIT_PATHS = ("GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE", "GIT_OBJECT_DIRECTORY")


@dataclass
class StagedView:
    """The index written out at ``view`` as the repository at ``top`` would be checked out;
    ``entries``: each path in the index (relative to the top, with ``/``) and its mode;
    ``touched``: the paths the staged commit adds, changes or deletes; ``cwd``: where
    the command runs, relative to the top (``""`` at the top)."""

    top: str
    view: str
    cwd: str
    entries: dict[str, str] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    links_touched: set[str] = field(default_factory=set)  # a link on either side
    unstaged: set[str] = field(default_factory=set)  # the working tree's copy differs
    env: dict[str, str] = field(default_factory=dict)

    @property
    def alias(self) -> tuple[str, str]:
        return self.view, self.top

    def real_text(self, text: str) -> str:
        """A message with the view's paths said as the repository's."""
        return text.replace(self.view, self.top)

    def into(self, path: str) -> str:
        """A path of the repository as the view's (others as they are)."""
        full = os.path.abspath(path)
        if _below(full, self.view) is not None:
            return full
        below = _below(full, self.top)
        return full if below is None else os.path.join(self.view, below)

    def relevant(self) -> bool:
        """The commit touches a trace, a golden, a link or the configuration."""
        projects = set(self._projects())
        return any(
            is_trace(name) or _golden_name(name) or path in projects
            for path in self.touched
            for name in [posixpath.basename(path)]
        ) or bool(self.links_touched)

    def _projects(self) -> Iterator[str]:
        """The ``pyproject.toml`` paths at or above the current folder, nearest first."""
        parts = [p for p in self.cwd.split("/") if p]
        for depth in range(len(parts), -1, -1):
            yield posixpath.join(*parts[:depth], PROJECT)

    def project(self) -> str | None:
        """The staged ``pyproject.toml`` nearest the current folder, at or above it, as the
        view's path; None when the index has none there."""
        for project in self._projects():
            if self.entries.get(project, GITLINK) != GITLINK:
                return str(Path(self.view, project))
        return None

    def suite(self, paths: Sequence[str] | None, golden_dir: str | None) -> Suite:
        """What the staged commit touches of the suite of ``paths`` (None: the whole
        repository): a trace changed (or what it links to, or its golden), a golden no
        trace claims that it touches or whose trace it deletes; every trace and orphan
        when it changes the configuration."""
        whole = paths is None
        roots = [self.view] if paths is None else [self.into(p) for p in paths]
        golden_dir = self.into(golden_dir) if golden_dir else None
        everything = find_suite(roots, golden_dir, require_traces=not whole)
        if self.touched & set(self._projects()):
            chosen = everything
        else:
            claims = {
                os.path.realpath(golden_of(Path(self.view, path), golden_dir))
                for path in self.touched
                if is_trace(posixpath.basename(path))
            }
            chosen = Suite(
                [(t, g) for t, g in everything.traces if self._touches(t, g)],
                [o for o in everything.orphans if self._touches(o) or _claimed(o, claims)],
            )
        chosen.notes, chosen.alias = everything.notes, self.alias
        self._write_contents([p for pair in chosen.traces for p in pair if p is not None])
        return chosen

    def differing(self, suite: Suite) -> list[str]:
        """The suite's files (as the repository's paths) whose working-tree copies
        differ from the index's: what a reproduce command would read instead."""
        paths = [p for pair in suite.traces for p in pair if p is not None]
        found = []
        for path in paths:
            below = _below(os.path.abspath(path), self.view)
            if below is not None and below.replace(os.sep, "/") in self.unstaged:
                found.append(os.path.join(self.top, below))
        return found

    def _touches(self, *paths: str | None) -> bool:
        """The commit touches one of ``paths``, as spelt (a link, or a folder on the way
        to it) or as the file it leads to."""
        for path in paths:
            if path is None:
                continue
            for spelling in (os.path.abspath(path), os.path.realpath(path)):
                below = _below(spelling, self.view)
                if below is None:
                    continue
                parts = below.split(os.sep)
                if any("/".join(parts[: i + 1]) in self.touched for i in range(len(parts))):
                    return True
        return False

    def _write_contents(self, paths: Sequence[str]) -> None:
        """The files the check reads (traces and goldens, the files their links lead to)
        written with their staged contents over their empty stand-ins."""
        wanted = set()
        for path in paths:
            below = _below(os.path.realpath(path), self.view)
            if below is not None:
                name = below.replace(os.sep, "/")
                if self.entries.get(name, LINK) not in (LINK, GITLINK):
                    wanted.add(name)
        self._checkout(sorted(wanted))

    def _checkout(self, paths: Sequence[str]) -> None:
        if paths:
            listed = "".join(f"{p}\0" for p in paths).encode("utf-8", "surrogateescape")
            prefix = f"--prefix={self.view}/"
            self.git("checkout-index", "-f", "-z", "--stdin", prefix, input=listed)

    def git(self, *args: str, input: bytes | None = None) -> bytes:
        return _git(*args, cwd=self.top, env=self.env, input=input)


def _golden_name(path: str) -> bool:
    return path.endswith(DUMP_SUFFIX)


def _below(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` when it lies below it (or is it: ``.``)."""
    rel = os.path.relpath(path, folder)
    return None if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _claimed(orphan: str, claims: set[str]) -> bool:
    return os.path.realpath(orphan) in claims


def _git(
    *args: str, cwd: str | None, env: dict[str, str] | None, input: bytes | None = None
) -> bytes:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, check=True, cwd=cwd, env=env, input=input
        )
    except OSError as e:
        raise UsageError(Option("staged"), f" asks git what the commit holds: {e}") from None
    except subprocess.CalledProcessError as e:
        why = e.stderr.decode(errors="replace").strip()
        raise UsageError(Option("staged"), f" asks git what the commit holds: {why}") from None
    return done.stdout


@contextmanager
def staged_view() -> Iterator[StagedView]:
    """The index written out in a temporary folder (removed after), and what the staged
    commit touches; messages that name the folder name the repository instead."""
    env = dict(os.environ)
    for name in _GIT_PATHS:
        if env.get(name):
            env[name] = os.path.abspath(env[name])
    where = _git("rev-parse", "--show-toplevel", "--show-prefix", cwd=None, env=env)
    top, cwd, *_ = [*where.decode("utf-8", "surrogateescape").split("\n"), "", ""]
    folder = os.path.realpath(tempfile.mkdtemp(prefix="schedcli-staged-"))
    view = StagedView(top, folder, cwd.rstrip("/"), env=env)
    try:
        try:
            _read_index(view)
            yield view
        except SchedcliError as e:
            e.args = tuple(view.real_text(a) if isinstance(a, str) else a for a in e.args)
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read_index(view: StagedView) -> None:
    """The index's paths and what the commit changes (against HEAD, or against nothing
    before the first commit); the view's folders, links and configuration written, every
    trace and golden (and every file a link leads to) an empty stand-in until checked."""
    listed = view.git("ls-files", "--stage", "-z").decode("utf-8", "surrogateescape")
    for item in filter(None, listed.split("\0")):
        meta, path = item.split("\t", 1)
        mode, _, stage = meta.split(" ")
        if stage != "0":
            raise UsageError(
                f"{os.path.join(view.top, path)}: unmerged in the index (a merge under way): "
                "resolve it and stage the result before checking the commit"
            )
        view.entries[path] = mode
    diff = view.git("diff", "--cached", "--raw", "-z", "--no-renames", "--no-ext-diff")
    fields = diff.decode("utf-8", "surrogateescape").split("\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(":"):
            continue
        old, new = meta[1:].split(" ")[:2]
        view.touched.add(path)
        if LINK in (old, new):
            view.links_touched.add(path)
    if not view.relevant():
        return
    unstaged = view.git("diff", "--raw", "-z", "--no-renames", "--no-ext-diff")
    view.unstaged = set(unstaged.decode("utf-8", "surrogateescape").split("\0")[1::2])
    root = Path(view.view)
    for path, mode in view.entries.items():
        (root / path if mode == GITLINK else (root / path).parent).mkdir(
            parents=True, exist_ok=True
        )
    (root / view.cwd).mkdir(parents=True, exist_ok=True)
    links = [p for p, mode in view.entries.items() if mode == LINK]
    view._checkout(links)
    projects = {p for p in view._projects() if view.entries.get(p, GITLINK) != GITLINK}
    for project in [p for p in projects if p in links]:
        projects |= _follow(view, project)  # a linked pyproject.toml: what it leads to
    view._checkout(sorted(projects - set(links)))
    stand_ins = {
        p
        for p, mode in view.entries.items()
        if mode not in (LINK, GITLINK) and (is_trace(posixpath.basename(p)) or _golden_name(p))
    }
    for link in links:
        stand_ins |= _follow(view, link)
    for path in sorted(stand_ins - projects):
        (root / path).touch()


def _follow(view: StagedView, link: str) -> set[str]:
    """A written-out link made to lead where the repository's does: one leaving the
    repository points at the real place it leads to; one to a file of the index has
    that file's stand-in (returned)."""
    at = Path(view.view, link)
    if not at.is_symlink():
        return set()  # core.symlinks off: the link is a file holding its target
    target = os.readlink(at)
    if os.path.isabs(target):
        return set()
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    if inside == os.pardir or inside.startswith(os.pardir + "/"):
        at.unlink()
        at.symlink_to(os.path.normpath(os.path.join(view.top, os.path.dirname(link), target)))
        return set()
    mode = view.entries.get(inside)
    return {inside} if mode is not None and mode not in (LINK, GITLINK) else set()


def real_suite(suite: Suite) -> Suite:
    """The suite's paths said as the repository's."""
    if suite.alias is None:
        return suite
    alias = suite.alias
    return Suite(
        [(shown_as(alias, t), shown_as(alias, g) if g else None) for t, g in suite.traces],
        [shown_as(alias, o) for o in suite.orphans],
        [n.replace(alias[0], alias[1]) for n in suite.notes],
    )
