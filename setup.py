"""Compiles schedcli's hot path with mypyc when it can; pure Python when it cannot.

Everything else about the package is in pyproject.toml. ``SCHEDCLI_COMPILE=0`` skips
compiling; ``SCHEDCLI_PREBUILD_OFF=1`` compiles in pip's build step instead of early. A
machine without a C compiler still installs: the extensions are optional, and
schedcli/_compiled.py falls back to the ``.py`` files at import.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _compiled_spec():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_compiled", HERE / "schedcli" / "_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ext_modules() -> list[Extension]:
    core = _compiled_spec()
    digest = HERE / "schedcli" / core.DIGEST_FILE
    digest.unlink(missing_ok=True)
    if os.environ.get("SCHEDCLI_COMPILE", "1") == "0":
        return []
    try:
        key = _key(core)
        if _describing() and _prebuild(key):
            return []  # the build takes what the compile started here makes
        prebuilt_lib(key)  # a compile started earlier keeps the extensions for _reused
        extensions = _reused(key) or _remembered(key, _mypycify(core))
    except SystemExit as e:  # mypyc exits on a type error, after printing it
        print(f"schedcli: mypyc refused the sources (exit {e.code}); pure Python", file=sys.stderr)
        return []
    except Exception as e:
        print(f"schedcli: not compiling, pure Python ({e})", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # no C compiler: install pure Python instead of failing
    digest.write_text(core.build_record(HERE / "schedcli"))
    return extensions


def _mypycify(core: Any) -> list[Extension]:
    from mypyc.build import mypycify

    _say(
        f"schedcli: compiling its hot path with mypyc ({len(core.COMPILED_MODULES)} "
        "modules, about 40 s of CPU); SCHEDCLI_COMPILE=0 skips this"
    )
    paths = [str(p.relative_to(HERE)) for p in core.source_paths(HERE / "schedcli")]
    # One group (one shared library: separate groups crashed on a stop signal), its
    # modules in C files of their own, compiled side by side (ParallelBuildExt): 75 s to
    # 36 s on two cores. No debug info (-g0): 5 s less, the same code. -O1: the C
    # compiles in 0.6x the time of -O3, and the benches measure no loss (replay of 2M
    # events 5.60 s CPU either way, simulate of Azure conv 0.94x).
    built: list[Extension] = mypycify(
        paths, group_name=core.GROUP, opt_level="1", debug_level="0", multi_file=True
    )
    return built


def _describing() -> bool:
    """Whether pip runs setup.py to learn about the package, not to build it (its first
    two runs: egg_info for the build's requirements, dist_info for the metadata)."""
    commands = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    return bool(commands) and commands[0] in ("egg_info", "dist_info")


# pip runs setup.py three times in one install (for the build's requirements, for the
# metadata, for the build) and mypyc, which type-checks the sources and writes the C,
# took 8 s each time: its extensions are kept in build/ for the runs that follow, keyed on
# everything they depend on.
_KEPT = Path("build") / "schedcli-mypyc.pickle"


def _key(core: Any) -> str:
    import hashlib

    import mypy.version

    # Each pip run builds in an environment of its own, and the extensions name its
    # mypyc runtime's headers; kept from an earlier run, they would not compile.
    record = core.build_record(HERE / "schedcli")
    text = f"{record}{mypy.version.__version__}{sys.version}{_runtime_headers()}"
    text += Path(__file__).read_text()
    return hashlib.sha256(text.encode()).hexdigest()


def _runtime_headers() -> str:
    """mypyc's lib-rt folder (mypyc.build.include_dir(), without importing mypyc.build:
    0.7 s a run)."""
    spec = importlib.util.find_spec("mypyc")
    assert spec is not None and spec.origin is not None
    return str(Path(spec.origin).parent / "lib-rt")


def _reused(key: str) -> list[Extension] | None:
    import pickle

    try:
        kept_key, extensions = pickle.loads(_KEPT.read_bytes())
    except (OSError, pickle.UnpicklingError, ValueError, EOFError):
        return None
    if kept_key != key:
        return None
    sources = [Path(src) for ext in extensions for src in ext.sources]
    return extensions if all(src.exists() for src in sources) else None


def _remembered(key: str, extensions: list[Extension]) -> list[Extension]:
    """Keeps the extensions under ``key``, taken before mypyc read the sources (an edit
    meanwhile makes the next run's key differ, and mypyc run again)."""
    import pickle

    _KEPT.parent.mkdir(exist_ok=True)
    partial = _KEPT.with_suffix(f".{os.getpid()}")
    partial.write_bytes(pickle.dumps((key, extensions)))
    partial.replace(_KEPT)
    return extensions


def _say(line: str) -> None:
    """A line on the terminal: pip shows a build's own output only when it fails."""
    print(line, file=sys.stderr)
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
    except OSError:
        pass  # no terminal (CI): the line is in pip -v's output


# pip runs setup.py to build ~20 s after its first run, having resolved and unpacked the
# dependencies in between on one core. The first run starts mypyc and the C compiling
# then, in a process of its own (`setup.py build_ext` into build/prebuilt/, niced), which
# holds a lock until it exits; the build waits on the lock and takes what it made if it
# finished for the same key, else compiles as before. At most one per key.
_PREBUILT = Path("build") / "prebuilt"
_PREBUILD_ENV = "SCHEDCLI_PREBUILD"


def _prebuild(key: str) -> bool:
    """Starts the compile for `key` unless it was started; False where it cannot be."""
    try:
        import fcntl
    except ImportError:
        return False  # no flock (Windows): the build compiles
    if os.environ.get(_PREBUILD_ENV) or os.environ.get("SCHEDCLI_PREBUILD_OFF"):
        return False
    _PREBUILT.mkdir(parents=True, exist_ok=True)
    _forget_other_prebuilds(key)
    lock = _PREBUILT / f"{key}.lock"
    # Locked before it is linked in, so another install never finds it free while the
    # compile it stands for runs (it would remove that compile's files).
    fresh = _PREBUILT / f"{key}.{os.getpid()}.new"
    fd = os.open(fresh, os.O_CREAT | os.O_TRUNC | os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the child's too: flock belongs to the open file
        try:
            os.link(fresh, lock)
        except FileExistsError:
            return True  # by an earlier run
        started = _start_compile(key, fd)
    finally:
        os.close(fd)
        fresh.unlink(missing_ok=True)
    if started:
        _say("schedcli: compiling its hot path in the background while pip resolves")
    return started


def _start_compile(key: str, lock_fd: int) -> bool:
    import subprocess

    try:
        with open(_PREBUILT / f"{key}.log", "wb") as log:
            subprocess.Popen(
                [sys.executable, str(HERE / "setup.py"), "build_ext", *_dirs(_PREBUILT / key)],
                cwd=HERE,
                env={**os.environ, _PREBUILD_ENV: key},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(lock_fd,),
                preexec_fn=lambda: os.nice(10),  # pip's own work first
            )
    except OSError:
        return False  # the lock is left free and the build compiles
    return True


def _dirs(where: Path) -> list[str]:
    return ["--build-lib", str(where / "lib"), "--build-temp", str(where / "tmp")]


def _forget_other_prebuilds(key: str) -> None:
    """Removes what earlier installs prebuilt, unless a compile still holds it."""
    import fcntl
    import shutil

    for lock in _PREBUILT.glob("*.lock"):
        if lock.stem == key:
            continue
        with open(lock, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # still compiling
            shutil.rmtree(_PREBUILT / lock.stem, ignore_errors=True)
            for leftover in (lock.with_suffix(".log"), lock):
                leftover.unlink(missing_ok=True)


def prebuilt_lib(key: str) -> Path | None:
    """The prebuilt extensions for this key once their compile ended, if it finished."""
    try:
        import fcntl
    except ImportError:
        return None
    lock = _PREBUILT / f"{key}.lock"
    if os.environ.get(_PREBUILD_ENV) or not lock.exists():
        return None
    with open(lock, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _say(f"schedcli: waiting for the compile started earlier (log: {lock.stem}.log)")
            fcntl.flock(f, fcntl.LOCK_EX)
        done = _PREBUILT / key / "done"
        return done.parent / "lib" if done.exists() and done.read_text() == key else None


class ParallelBuildExt(build_ext):
    """Builds the extensions side by side and each one's C files on every core
    (setuptools compiles one file at a time); copies them if they were prebuilt."""

    def build_extensions(self) -> None:
        key = _key(_compiled_spec()) if self.extensions else ""
        lib = prebuilt_lib(key) if key else None
        if lib is not None:
            _say("schedcli: using the extensions compiled in the background")
            for ext in self.extensions:
                target = Path(self.get_ext_fullpath(ext.name))
                target.parent.mkdir(parents=True, exist_ok=True)
                self.copy_file(str(lib / self.get_ext_filename(ext.name)), str(target))
            return
        from concurrent.futures import ThreadPoolExecutor

        compiler = self.compiler
        one_by_one = compiler.compile

        def compile(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            if len(sources) < 2:
                return one_by_one(sources, *args, **kwargs)
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                objects = pool.map(lambda source: one_by_one([source], *args, **kwargs), sources)
                return [o for each in objects for o in each]

        compiler.compile = compile
        self.parallel = True  # the group's C files and the modules' shims at once
        try:
            super().build_extensions()
        finally:
            compiler.compile = one_by_one
        if os.environ.get(_PREBUILD_ENV) == key and all(
            Path(self.get_ext_fullpath(ext.name)).exists() for ext in self.extensions
        ):
            (Path(self.build_lib).parent / "done").write_text(key)


if __name__ == "__main__":  # as pip and setuptools run it; tests import its parts
    setup(ext_modules=ext_modules(), cmdclass={"build_ext": ParallelBuildExt})
