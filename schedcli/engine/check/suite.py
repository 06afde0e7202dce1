"""A check suite's traces as found on disk: each trace with its golden, the goldens no
trace claims, and the folders not searched again.

A trace ``DIR/NAME.jsonl`` (or ``.jsonl.gz``) has its golden at
``DIR/golden/NAME.dump.jsonl`` unless a golden folder is given, which holds every folder's.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...model.errors import Option, UsageError

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz")
DUMP_SUFFIX = ".dump.jsonl"


@dataclass
class Suite:
    """The traces found, the goldens with no trace, and the folders not searched again
    (a link back into the suite)."""

    traces: list[tuple[str, str | None]] = field(default_factory=list)  # (trace, golden)
    orphans: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # --staged: (the folder the index is written out in, the repository it stands for);
    # a path below the first is shown as the same path below the second.
    alias: tuple[str, str] | None = None


def find_suite(paths: Sequence[str], golden_dir: str | None, require_traces: bool = True) -> Suite:
    """Every trace in ``paths`` and the folders below them, sorted, each with its golden's
    path; goldens in a searched folder's golden folder that no trace claims are orphans.
    A golden given by name stands for its trace (a commit that changes only a golden
    checks the trace it belongs to). Each real folder is searched once. A folder given
    with no trace in it or below (unless not ``require_traces``), and two traces claiming
    one golden, are usage errors.

    A trace is named by where it is found, a link too: the golden of ``DIR/NAME.jsonl``
    is ``DIR/golden/NAME.dump.jsonl`` whatever the link points at. A link named as a trace
    that leads to no file (dangling, a loop, a folder) is a trace all the same: its check
    is an error naming the link (``link_trouble``), never a silent skip."""
    suite = Suite()
    traces: list[Path] = []
    folders: list[Path] = []
    searched: dict[tuple[int, int], Path] = {}
    for given in paths:
        p = Path(given)
        if given == "-":
            raise UsageError("check reads trace files and folders, not standard input (-)")
        if p.is_dir() and not _trace_link(p):
            fresh = list(_folders(p, searched, suite.notes))  # none: searched already
            folders += fresh
            found = [c for f in fresh for c in f.iterdir() if _is_trace_entry(c)]
            if fresh and not found and require_traces:
                raise UsageError(
                    f"{given}: no traces (*.jsonl, *.jsonl.gz) in this folder or below: "
                    "nothing to check"
                )
            traces += found
        elif p.is_file() and p.name.endswith(DUMP_SUFFIX):
            traces += _traces_of(p, golden_dir)
        elif p.is_file() or p.is_symlink():
            traces.append(p)
        else:
            raise UsageError(f"{given}: no such file or folder")
    claimed: dict[str, Path] = {}
    # One spelling of each (file, golden) pair: a file given twice is checked once, but a
    # link beside its target is a trace of its own, with a golden of its own.
    unique = {(_real(t), _real(golden_of(t, golden_dir))): t for t in reversed(traces)}
    for trace in sorted(unique.values()):
        golden = golden_of(trace, golden_dir)
        other = claimed.setdefault(_real(golden), trace)
        if other != trace:
            raise UsageError(
                f"{other} and {trace} both claim the golden {golden}: a golden belongs to "
                "one trace (rename one of them, or give each folder its own ",
                Option("golden_dir"),
                ")",
            )
        suite.traces.append((str(trace), str(golden)))
    for where in sorted({Path(golden_dir) if golden_dir else f / "golden" for f in folders}):
        if where.is_dir():
            goldens = sorted(where.glob(f"*{DUMP_SUFFIX}"))
            suite.orphans += [str(g) for g in goldens if _real(g) not in claimed]
    suite.orphans = sorted(set(suite.orphans))
    return suite


def link_trouble(path: str) -> str | None:
    """Why ``path``, a link, leads to no file a trace could be read from (to nothing, round
    a loop, to a folder); None when it does, or is no link."""
    if not os.path.islink(path):
        return None
    target = os.readlink(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"a link ({target}) in a loop of links: it leads to no file"
        return f"a link to {target}, which does not exist"
    if stat.S_ISDIR(st.st_mode):
        return f"a link to the folder {target}, not to a trace"
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device: reading it could wait forever
        return f"a link to {target}, which is not a regular file"
    return None


def shown_as(alias: tuple[str, str] | None, path: str) -> str:
    """``path`` as the user knows it: below ``alias``'s first folder (a written-out
    index), the same path below its second (the repository)."""
    if alias is None:
        return path
    view, real = alias
    below = os.path.relpath(path, view) if os.path.isabs(path) else os.pardir
    if below == os.curdir:
        return real
    if below == os.pardir or below.startswith(os.pardir + os.sep):
        return path
    return os.path.join(real, below)


def _real(path: Path) -> str:
    """The file ``path`` is, links followed (never raising on a loop, as Path.resolve
    does before Python 3.13)."""
    return os.path.realpath(path)


def _is_trace_entry(entry: Path) -> bool:
    """A folder's entry that is a trace: a file, or any link, named as one."""
    return is_trace(entry.name) and (entry.is_symlink() or entry.is_file())


def _trace_link(path: Path) -> bool:
    """A link named as a trace: taken for a trace (to be checked, or refused naming the
    link), never searched as a folder."""
    return is_trace(path.name) and path.is_symlink()


def _folders(top: Path, searched: dict[tuple[int, int], Path], notes: list[str]) -> Iterator[Path]:
    """``top`` and every folder below it but golden folders and hidden ones, each real
    folder once, in sorted depth-first order (walked with a stack of our own: a tree of
    any depth): a link to a folder searched already, or to one holding the folder it sits
    in (a loop), is noted and not followed."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in searched:
            if folder.is_symlink():
                notes.append(
                    f"{folder}: a link to {searched[key]}, searched already: not searched again"
                )
            continue
        searched[key] = folder
        yield folder
        below = []
        for child in sorted(folder.iterdir()):
            if not child.is_dir() or child.name == "golden" or child.name.startswith("."):
                continue
            if _trace_link(child):
                continue  # a trace, refused as one
            if child.is_symlink() and folder.resolve().is_relative_to(child.resolve()):
                notes.append(f"{child}: a link to a folder holding it (a loop): not followed")
                continue
            below.append(child)
        stack.extend(reversed(below))


def _traces_of(golden: Path, golden_dir: str | None) -> list[Path]:
    """The traces a golden belongs to, by the default layout (``DIR/golden/NAME.dump.jsonl``
    for ``DIR/NAME.jsonl`` and ``DIR/NAME.jsonl.gz``); none under ``--golden-dir``, which
    holds every folder's."""
    if golden_dir is not None:
        return []
    stem = golden.name.removesuffix(DUMP_SUFFIX)
    found = [golden.parent.parent / f"{stem}{suffix}" for suffix in TRACE_SUFFIXES]
    return [t for t in found if _is_trace_entry(t)]


def is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith(DUMP_SUFFIX)


def golden_of(trace: Path, golden_dir: str | None) -> Path:
    """Where the golden of ``trace`` is, by the name and folder the trace is found under."""
    stem = trace.name.removesuffix(".gz").removesuffix(".jsonl")
    folder = Path(golden_dir) if golden_dir else trace.parent / "golden"
    return folder / f"{stem}{DUMP_SUFFIX}"
