"""Building C++ on first use (#41: a ``batching::Scheduler`` run as a policy).

A build is compiled with the system C++ compiler (``$CXX``, else c++, g++ or clang++) and
kept under ``$XDG_CACHE_HOME/schedcli/cxx/KEY`` (``SCHEDCLI_CXX_CACHE`` overrides the
folder). KEY covers the compiler's path and version, the flags, the include folders, the
include-path variables ($CPATH, $CPLUS_INCLUDE_PATH) and the sources. A build is reused only
while the compiler would read the same files now (``_unchanged``): the build records every
file the compiler read (its own ``-MD`` output, read exactly by ``_compiler``) as the
compiler named it, with where that name led (links resolved) and a digest, and the places
on the include search that were empty then and would now be found first (a new header
shadowing a recorded one). Builds of one key take turns on a lock: concurrent first uses
(sweep workers) build once. A flag that changes what the compiler makes is refused before
it runs, and a build that made no shared library is never cached."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
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

from ...model.errors import UsageError
from . import _compiler

COMPILERS = ("c++", "g++", "clang++")
INSTALL = (
    "no C++ compiler found (tried $CXX, c++, g++, clang++): install one "
    "(Debian/Ubuntu: apt install g++) or set CXX"
)


@dataclass(frozen=True)
class Build:
    """What to compile: ``sources`` (file name, text) written into the build folder and
    compiled together into ``output``, with ``include_dirs`` on the include path, then
    ``system_dirs`` as a dependency's (``-isystem``: their own warnings are not ours)."""

    sources: tuple[tuple[str, str], ...]
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared")
    output: str = "libscheduler.so"
    label: str = ""  # what the note says was built (default: the first source's name)
    system_dirs: tuple[str, ...] = ()


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
    for refusal in _compiler.refused([*command[1:], *build.flags]):  # nothing cached yet
        raise UsageError(refusal)
    version = compiler_version(command)
    key = _key(build, command, version, env)
    folder = cache_root(env) / key
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / build.output
    with _locked(folder / "lock"):
        if out.exists() and _unchanged(folder / "inputs.json"):
            return out
        start = time.monotonic()
        _compile(build, command, folder, env)
        note(
            f"note: built {build.label or build.sources[0][0]} with {version} in "
            f"{time.monotonic() - start:.1f} s (cached in {folder})"
        )
    return out


# Environment variables that put folders on the compiler's include path.
INCLUDE_VARIABLES = ("CPATH", "CPLUS_INCLUDE_PATH")


def _key(build: Build, command: list[str], version: str, env: Mapping[str, str]) -> str:
    includes = [str(Path(d).resolve()) for d in build.include_dirs]
    system = [str(Path(d).resolve()) for d in build.system_dirs]
    variables = [env.get(name) for name in INCLUDE_VARIABLES]
    blob = json.dumps(  # ASCII: a path that is not UTF-8 is kept, escaped
        [command, version, build.flags, includes, system, variables, build.sources, build.output]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# The record's shape; a record of another shape (an older schedcli's) is rebuilt.
FORMAT = 3


def _unchanged(manifest: Path) -> bool:
    """Whether the compiler would read what the last build read: every name it opened
    still opens the same content, and every place the include search passed over then is
    still empty. A name that opens the very file it did (the same device and inode, links
    followed, so a repointed link is another file) with the recorded size and modification
    time is taken as unchanged (a start reads hundreds of system headers); any other is
    compared by its digest. A stat per recorded header and about two per empty place."""
    try:
        record = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return False
    files, absent = record.get("files"), record.get("absent")
    if not (isinstance(files, list) and isinstance(absent, list)):
        return False
    for seen in files:
        if not (isinstance(seen, list) and len(seen) == 7 and isinstance(seen[0], str)):
            return False
        named, _target, *identity, digest = seen
        try:
            now = os.stat(named)
        except OSError:
            return False
        same = [now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns] == identity
        if not same and (digest is None or _digest(named) != digest):
            return False
    return all(isinstance(p, str) for p in absent) and _all_empty(absent)


def _all_empty(paths: list[str]) -> bool:
    """Whether no path of ``paths`` exists (a dangling link is empty to the compiler too):
    a folder holding many of them is listed once, the others are asked one by one."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        head, name = os.path.split(path)
        by_folder.setdefault(head, []).append(name)
    for head, names in by_folder.items():
        if len(names) < 8:
            there = set(names)
        else:
            try:
                there = set(os.listdir(head))
            except (FileNotFoundError, NotADirectoryError):
                continue  # no folder: nothing in it
            except OSError:
                there = set(names)  # unlistable: ask for each
        if any(n in there and os.path.exists(os.path.join(head, n)) for n in names):
            return False
    return True


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass(frozen=True)
class _Search:
    """The compiler's include search, as ``-v`` prints it: the folders a quoted include
    tries after the including file's own, the folders an angle include tries, in order,
    and the folders it dropped as nonexistent."""

    quote: tuple[str, ...]
    angle: tuple[str, ...]
    missing: tuple[str, ...]


_MISSING = re.compile(rb'^ignoring nonexistent directory "(.*)"$')


def _search(argv: list[str], fallback: list[str], here: Path, env: Mapping[str, str]) -> _Search:
    done = subprocess.run(
        [*argv, "-E", "-v", "-x", "c++", os.devnull, "-o", os.devnull],
        capture_output=True,
        cwd=here,
        env=dict(env),
    )
    quote: list[str] = []
    angle: list[str] = []
    missing: list[str] = []
    into: list[str] | None = None
    # A folder is printed as is after one space (bytes, a trailing space or tab kept).
    for line in done.stderr.split(b"\n"):
        if found := _MISSING.match(line):
            missing.append(os.fsdecode(found.group(1)))
        elif line.startswith(b'#include "..." search starts here'):
            into = quote
        elif line.startswith(b"#include <...> search starts here"):
            into = angle
        elif line.startswith(b"End of search list"):
            into = None
        elif into is not None and line.startswith(b" ") and b" (framework" not in line:
            into.append(os.fsdecode(line[1:]))
    if done.returncode != 0 or not angle:  # a compiler that does not say: the -I folders
        return _Search((), tuple(fallback), ())
    return _Search(tuple(quote), tuple(angle), tuple(missing))


class _Places:
    """Existence of paths (and the search folders' forms), each asked once while a record
    is made."""

    def __init__(self) -> None:
        self.known: dict[str, bool] = {}
        self.seen: dict[tuple[str, ...], list[tuple[int, str]]] = {}

    def prefixes(self, folders: tuple[str, ...]) -> list[tuple[int, str]]:
        """Each folder's place in ``folders`` with the forms a path under it starts with."""
        if folders not in self.seen:
            self.seen[folders] = [
                (i, form.rstrip("/") + "/") for i, f in enumerate(folders) for form in _forms(f)
            ]
        return self.seen[folders]

    def exists(self, path: str) -> bool:
        if path not in self.known:
            self.known[path] = os.path.exists(path)
        return self.known[path]

    def first_missing(self, folder: str, rel: str) -> str | None:
        """The shallowest missing path on the way from ``folder`` to ``folder/rel`` (one
        record covers every header under a folder that is not there), or None when
        ``folder/rel`` exists."""
        path = folder
        for part in rel.split("/"):
            path = os.path.join(path, part)
            if not self.exists(path):
                return path
        return None


def _forms(path: str) -> set[str]:
    """A path as written (normalized) and with its folder's links resolved: how a
    compiler may name a file it found (gcc names system headers by the shorter)."""
    head, name = os.path.split(os.path.normpath(path))
    return {os.path.normpath(path), os.path.join(os.path.realpath(head), name)}


def _passed_over(named: str, search: _Search, places: _Places) -> set[str]:
    """The places the include search tried before it found ``named``, each of which was
    empty (as first missing paths): a file there now would be read instead. Every way
    ``named`` can be found through a search folder counts, except a way some file of the
    build's time already blocked (the compiler did not find it that way)."""
    empty: set[str] = set()
    names = _forms(named)
    for folders, before_all in ((search.quote, ()), (search.angle, search.quote)):
        for i, prefix in places.prefixes(folders):
            for name in names:
                if not name.startswith(prefix):
                    continue
                rel = name[len(prefix) :]
                earlier = [places.first_missing(d, rel) for d in folders[:i]]
                if any(p is None for p in earlier):
                    continue
                empty.update(p for p in earlier if p is not None)
                quoted = [places.first_missing(d, rel) for d in before_all]
                if all(p is not None for p in quoted):  # it may have been a quoted include
                    empty.update(p for p in quoted if p is not None)
    return empty


# A quoted include, whose own folder the compiler tries first.
_QUOTED = re.compile(rb'^[ \t]*#[ \t]*include(?:_next)?[ \t]*"([^"\n]+)"', re.MULTILINE)
# A probe for a header (``#if __has_include(<tbb/tbb.h>)``): a file appearing flips it.
_PROBE = re.compile(rb'__has_include(?:_next)?[ \t]*\([ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)')


def _unseen(named: str | None, text: bytes, search: _Search, places: _Places) -> set[str]:
    """The empty places a read file's own lines made the compiler pass over: a quoted
    include's own folder (``named``'s) when the include was found further on, and every
    place a ``__has_include`` probe for a header found nowhere would look. A file in
    any of them now would be read (or probed) instead."""
    empty: set[str] = set()
    own = () if named is None else (os.path.dirname(named),)
    for head in own:
        for include in _QUOTED.findall(text):
            rel = os.fsdecode(include)
            missing = None if os.path.isabs(rel) else places.first_missing(head, rel)
            if missing is not None:
                empty.add(missing)
    for quoted, angled in _PROBE.findall(text):
        rel = os.fsdecode(quoted or angled)
        if os.path.isabs(rel):
            continue
        folders = [*(own if quoted else ()), *search.quote, *search.angle]
        missing_all = [places.first_missing(d, rel) for d in folders]
        if all(p is not None for p in missing_all):
            empty.update(p for p in missing_all if p is not None)
    return empty


def _record(
    deps: list[str], sources: list[bytes], here: Path, search: _Search
) -> dict[str, object]:
    """What ``_unchanged`` checks: each file the compiler read (not the build folder's
    own sources) as [name, where it led, device, inode, size, mtime, digest], and the
    empty places."""
    places = _Places()
    inside = os.path.realpath(here)
    files: list[list[object]] = []
    absent: set[str] = set(search.missing)
    for text in sources:  # the build folder is made afresh: only its probes count
        absent |= _unseen(None, text, search, places)
    # As named (a lexical ".." may cross a link), in each spelling that exists: a name
    # none of whose spellings exists is recorded as gone, and the next check rebuilds.
    named_as = [os.path.join(here, dep) for dep in dict.fromkeys(deps)]
    readings = (r for n in named_as for r in _compiler.readings(n, places.exists) or [n])
    for named in dict.fromkeys(readings):
        target = os.path.realpath(named)  # where it led, every link resolved
        if Path(target).is_relative_to(inside):
            continue
        try:
            seen = os.stat(named)
            text = Path(named).read_bytes()
        except OSError:  # read, and gone or unreadable already: the next check rebuilds
            files.append([named, target, None, None, None, None, None])
            continue
        digest = hashlib.sha256(text).hexdigest()
        identity = [seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns]
        files.append([named, target, *identity, digest])
        absent |= _passed_over(named, search, places)
        absent |= _unseen(named, text, search, places)
    # Only what is empty now: a place that is not would fail every later check.
    empty = sorted(p for p in absent if not os.path.exists(p))
    return {"format": FORMAT, "files": files, "absent": empty}


def _compile(build: Build, command: list[str], folder: Path, env: Mapping[str, str]) -> None:
    with tempfile.TemporaryDirectory(dir=folder, prefix="build-") as work:
        here = Path(work)
        sources = []
        for name, text in build.sources:
            (here / name).write_text(text)
            sources.append(str(here / name))
        includes = [str(Path(d).resolve()) for d in build.include_dirs]
        system = [str(Path(d).resolve()) for d in build.system_dirs]
        target = here / build.output
        compiler = [
            *command,
            *build.flags,
            *(f"-I{d}" for d in includes),
            *(a for d in system for a in ("-isystem", d)),
        ]
        deps = here / "deps.d"
        argv = [*compiler, "-MD", "-MF", str(deps), "-MT", _compiler.TARGET.decode()]
        done = subprocess.run(
            [*argv, *sources, "-o", str(target)], capture_output=True, cwd=here, env=dict(env)
        )
        stderr = done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise UsageError(f"the C++ build failed: {_first_error(stderr, here)}")
        made = _compiler.made(target, deps)
        if made is not None:  # exit 0 without the library: nothing is cached
            flags = shlex.join([*command, *build.flags])
            raise UsageError(f"the C++ compiler made {made} ({flags}): {_compiler.MODE}")
        search = _search(compiler, [*includes, *system], here, env)
        texts = [text.encode() for _, text in build.sources]
        record = _record(_compiler.rule_names(deps.read_bytes()), texts, here, search)
        (here / "inputs.json").write_text(json.dumps(record, sort_keys=True))
        # The old record goes first: a library is never beside a record not its own.
        (folder / "inputs.json").unlink(missing_ok=True)
        os.replace(target, folder / build.output)
        os.replace(here / "inputs.json", folder / "inputs.json")


def _first_error(stderr: str, here: Path) -> str:
    """The compiler's first error line (``FILE:LINE:COL: error: ...``), the build folder's
    own files named as given."""
    lines = [line.replace(f"{here}/", "") for line in stderr.splitlines()]
    first = next((line for line in lines if _ERROR.search(line)), lines[0] if lines else "")
    return first.strip() or "the compiler failed without a message"


_ERROR = re.compile(r"(^|: )(fatal )?error: ")
