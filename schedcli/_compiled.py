"""The compiled core: which modules setup.py compiles with mypyc, and whether they are used.

The compiled modules are the same source as the ``.py`` files beside them, built into C
extensions at install time when a C compiler is there (docs/architecture.md). They are
used only when they were built from the sources now on disk; otherwise, or when
``SCHEDCLI_PURE_PYTHON`` is set, every module is imported from its ``.py`` file, and the
output is the same byte for byte (CI runs the whole suite both ways).

This module imports nothing of schedcli and nothing outside the standard library:
setup.py loads it on its own to learn what to compile.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# The hot path of a replay and of a recording, and everything they call per event.
COMPILED_MODULES = (
    "schedcli.model.task",
    "schedcli.model.scheduler",
    "schedcli.model.tally",
    "schedcli.model.steps",
    "schedcli.policies._queues",
    "schedcli.policies._rotation",
    "schedcli.policies._decode_first_reference",
    "schedcli.policies.decode_first",
    "schedcli.policies.fcfs",
    "schedcli.policies.fair",
    "schedcli.policies.priority",
    "schedcli.policies.prefill_first",
    "schedcli.policies.sjf",
    "schedcli.streams.source",
    "schedcli.formats.trace",
    "schedcli.formats.trace.events",
    "schedcli.formats.trace.lines",
    "schedcli.formats.trace.scan",
    "schedcli.formats.trace.reader",
    "schedcli.formats.writer",
    "schedcli.formats.step_lines",
    "schedcli.streams.interrupt",
    "schedcli.engine.clock",
    "schedcli.engine.ledger",
    "schedcli.engine.recorded",
    "schedcli.engine.replay",
    "schedcli.engine.levels.task.replay",
    "schedcli.engine.levels.request.replay",
    "schedcli.engine.lockstep",
    "schedcli.engine.metrics",
    "schedcli.engine.flight",
    "schedcli.engine.origins",
    "schedcli.engine.recorder",
    "schedcli.engine.results",
    "schedcli.engine.simulate",
)
# mypyc's shared library for the group: every compiled module's code lives in it. One
# group: mypyc's separate compilation (a group per module or two, built in parallel) was
# a third faster to build but crashed the interpreter on a stop signal mid-replay
# (tests/policies/test_faults.py), under mypy 2.4.
GROUP = "schedcli_core"
DIGEST_FILE = "_core.sha256"
PURE_ENV = "SCHEDCLI_PURE_PYTHON"
STALE = "the compiled core is older than its sources; rebuild it with pip install -e ."


def source_paths(package_dir: Path) -> list[Path]:
    """The ``.py`` file of each compiled module, under the ``schedcli`` directory (a
    package's ``__init__.py``)."""
    paths = []
    for m in COMPILED_MODULES:
        path = package_dir.joinpath(*m.split(".")[1:])
        paths.append(path / "__init__.py" if path.is_dir() else path.with_suffix(".py"))
    return paths


def source_digest(package_dir: Path) -> str:
    """What the compiled core was built from: a hash of its modules' sources."""
    import hashlib  # only when the stamps differ: OpenSSL's hashlib costs a start-up 5 ms

    h = hashlib.sha256()
    for path in source_paths(package_dir):
        h.update(
            path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0"
        )
    return h.hexdigest()


def source_stamps(package_dir: Path) -> str:
    """Each compiled module's source size and modification time. Where they are the
    build's, so are the sources (the rule by which Python trusts its bytecode cache);
    where not, the digest decides (a checkout rewrites files without changing them)."""
    stamps = []
    for path in source_paths(package_dir):
        st = path.stat()
        stamps.append(f"{path.relative_to(package_dir)}:{st.st_size}:{st.st_mtime_ns}")
    return " ".join(stamps)


def build_record(package_dir: Path) -> str:
    """The digest file's text: the sources' digest, then their stamps."""
    return f"{source_digest(package_dir)}\n{source_stamps(package_dir)}\n"


class _SourceOnly:
    """Imports the compiled modules from their ``.py`` files, never from an extension.
    (A meta path finder by its ``find_spec``; importlib.abc costs a start-up 12 ms.)"""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        loader = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
        for entry in path or ():
            spec = importlib.machinery.FileFinder(entry, loader).find_spec(fullname, target)
            if spec is not None:
                return spec
        return None


def _why_pure(package_dir: Path) -> str | None:
    """None when the compiled core can be used; otherwise why not."""
    if os.environ.get(PURE_ENV):
        return f"{PURE_ENV} is set"
    try:
        digest, _, stamps = (package_dir / DIGEST_FILE).read_text().partition("\n")
    except OSError:
        return "not compiled at install"
    if stamps.strip() != source_stamps(package_dir) and digest != source_digest(package_dir):
        return STALE
    try:
        __import__(f"{GROUP}__mypyc")
    except ImportError:
        return "the compiled core failed to build at install"
    return None


def choose() -> str:
    """Decide once, before any compiled module is imported; returns the core in use."""
    why = _why_pure(Path(__file__).parent)
    if why is None:
        return "compiled"
    if not any(isinstance(f, _SourceOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceOnly())
    return f"pure Python ({why})"


CORE = choose()
"""``compiled``, or ``pure Python (why)``."""
CORE_IS_STALE = STALE in CORE
