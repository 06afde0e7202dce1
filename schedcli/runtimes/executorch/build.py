"""Building C++ on first use (#41: a ``batching::Scheduler`` run as a policy).

A build is compiled with the system C++ compiler (``$CXX``, else c++, g++ or clang++) and
kept under ``$XDG_CACHE_HOME/schedcli/cxx/KEY`` (``SCHEDCLI_CXX_CACHE`` overrides the
folder). KEY covers the compiler's path and version, the flags, the include folders and the
sources; the build also records every file the compiler read (its own ``-MD`` dependency
output) with a digest, so an edited header is rebuilt though the key is the same. Builds of
one key take turns on a lock: concurrent first uses (sweep workers) build once.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import orjson

from ...model.errors import UsageError

COMPILERS = ("c++", "g++", "clang++")
INSTALL = (
    "no C++ compiler found (tried $CXX, c++, g++, clang++): install one "
    "(Debian/Ubuntu: apt install g++) or set CXX"
)


@dataclass(frozen=True)
class Build:
    """What to compile: ``sources`` (file name, text) written into the build folder and
    compiled together into ``output``, with ``include_dirs`` on the include path."""

    sources: tuple[tuple[str, str], ...]
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared")
    output: str = "libscheduler.so"
    label: str = ""  # what the note says was built (default: the first source's name)


def extension_build(
    module: str,
    sources: tuple[tuple[str, str], ...],
    include_dirs: tuple[str, ...] = (),
    flags: tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fno-exceptions"),
) -> Build:
    """A build of the CPython extension module ``module``: this interpreter's headers on
    the include path and its suffix on the file (so another interpreter builds its own).
    A call into one costs what a Python call does; one through ctypes, thousands of
    instructions more."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return Build(sources, (*include_dirs, include), flags, f"{module}{suffix}")


def load_extension(path: Path, module: str) -> ModuleType:
    """The extension module built at ``path``, imported under ``module``."""
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not an extension module this Python can load")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    given = env.get("SCHEDCLI_CXX_CACHE")
    if given:
        return Path(given)
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedcli" / "cxx"


def find_compiler(env: Mapping[str, str] = os.environ) -> list[str]:
    """The compiler command: ``$CXX`` (split as a shell would), else the first of
    COMPILERS on ``PATH``; a UsageError saying what to install when there is none."""
    given = env.get("CXX", "").strip()
    if given:
        command = shlex.split(given)
        if shutil.which(command[0], path=env.get("PATH")) is None:
            raise UsageError(f"CXX={given!r} is not a program on PATH; {INSTALL}")
        return command
    for name in COMPILERS:
        found = shutil.which(name, path=env.get("PATH"))
        if found is not None:
            return [found]
    raise UsageError(INSTALL)


def compiler_version(command: list[str]) -> str:
    """The first line ``--version`` prints (part of the cache key)."""
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise UsageError(f"the C++ compiler {command[0]} does not run: {e}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise UsageError(f"the C++ compiler {command[0]} does not answer --version")
    return lines[0]


def built(
    build: Build,
    note: Callable[[str], None],
    env: Mapping[str, str] = os.environ,
) -> Path:
    """The compiled ``build``, from the cache when nothing it read has changed, else
    compiled now (``note`` says so, and how long it took)."""
    command = find_compiler(env)
    version = compiler_version(command)
    key = _key(build, command, version)
    folder = cache_root(env) / key
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / build.output
    with _locked(folder / "lock"):
        if out.exists() and _unchanged(folder / "inputs.json"):
            return out
        start = time.monotonic()
        _compile(build, command, folder)
        note(
            f"note: built {build.label or build.sources[0][0]} with {version} in "
            f"{time.monotonic() - start:.1f} s (cached in {folder})"
        )
    return out


def _key(build: Build, command: list[str], version: str) -> str:
    includes = [str(Path(d).resolve()) for d in build.include_dirs]
    blob = orjson.dumps([command, version, build.flags, includes, build.sources, build.output])
    return hashlib.sha256(blob).hexdigest()[:32]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _unchanged(manifest: Path) -> bool:
    """Whether every file the last build read still has the content it had then: a file
    whose size and modification time are as recorded is taken as unchanged (a start reads
    hundreds of system headers); any other is compared by its digest."""
    try:
        read = orjson.loads(manifest.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    if not isinstance(read, dict):
        return False
    for path, seen in read.items():
        if not (isinstance(seen, list) and len(seen) == 3):
            return False
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if [stat.st_size, stat.st_mtime_ns] != seen[:2] and _digest(Path(path)) != seen[2]:
            return False
    return True


def _seen(path: Path) -> list[object]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, _digest(path)]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _compile(build: Build, command: list[str], folder: Path) -> None:
    with tempfile.TemporaryDirectory(dir=folder, prefix="build-") as work:
        here = Path(work)
        sources = []
        for name, text in build.sources:
            (here / name).write_text(text)
            sources.append(str(here / name))
        includes = [f"-I{Path(d).resolve()}" for d in build.include_dirs]
        target = here / build.output
        argv = [*command, *build.flags, *includes, "-MD", "-MF", str(here / "deps.d")]
        done = subprocess.run(
            [*argv, *sources, "-o", str(target)], capture_output=True, text=True, cwd=here
        )
        if done.returncode != 0:
            raise UsageError(f"the C++ build failed: {_first_error(done.stderr, here)}")
        read = {
            str(Path(p).resolve()): _seen(Path(p))
            for p in _dependencies(here / "deps.d")
            if not Path(p).resolve().is_relative_to(here.resolve())
        }
        (here / "inputs.json").write_bytes(orjson.dumps(read, option=orjson.OPT_SORT_KEYS))
        os.replace(target, folder / build.output)
        os.replace(here / "inputs.json", folder / "inputs.json")


def _first_error(stderr: str, here: Path) -> str:
    """The compiler's first error line (``FILE:LINE:COL: error: ...``), the build folder's
    own files named as given."""
    lines = [line.replace(f"{here}/", "") for line in stderr.splitlines()]
    first = next((line for line in lines if _ERROR.search(line)), lines[0] if lines else "")
    return first.strip() or "the compiler failed without a message"


_ERROR = re.compile(r"(^|: )(fatal )?error: ")


def _dependencies(path: Path) -> list[str]:
    """The files a make-style dependency file lists (after the target's colon)."""
    text = path.read_text().replace("\\\n", " ")
    found: list[str] = []
    for rule in text.splitlines():
        _, sep, deps = rule.partition(": ")
        if sep:  # an escaped space is part of a name
            found.extend(d.replace("\0", " ") for d in deps.replace("\\ ", "\0").split())
    return found
