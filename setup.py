"""Compiles schedcli's hot path with mypyc when it can; pure Python when it cannot.

Everything else about the package is in pyproject.toml. ``SCHEDCLI_COMPILE=0`` skips
compiling. A machine without a C compiler still installs: the extensions are optional,
and schedcli/_compiled.py falls back to the ``.py`` files at import.
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
        from mypyc.build import mypycify

        paths = [str(p.relative_to(HERE)) for p in core.source_paths(HERE / "schedcli")]
        extensions = _reused(core)
        if extensions is None:
            _say(
                f"schedcli: compiling its hot path with mypyc ({len(core.COMPILED_MODULES)} "
                "modules, about 30 s on two cores); SCHEDCLI_COMPILE=0 skips this"
            )
            # One group (one shared library: separate groups crashed on a stop signal),
            # its modules in C files of their own, compiled side by side
            # (ParallelBuildExt): 75 s to 36 s on two cores. No debug info (-g0): 5 s
            # less, the same code. -O1: the C compiles in 0.6x the time of -O3, and the
            # benches measure no loss (replay of 2M events 5.60 s CPU either way,
            # simulate of Azure conv 0.94x).
            built = mypycify(
                paths, group_name=core.GROUP, opt_level="1", debug_level="0", multi_file=True
            )
            extensions = _remembered(core, built)
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


# pip runs setup.py three times in one install (for the build's requirements, for the
# metadata, for the build) and mypyc, which type-checks the sources and writes the C,
# took 8 s each time: its extensions are kept in build/ for the runs that follow, keyed on
# everything they depend on.
_KEPT = Path("build") / "schedcli-mypyc.pickle"


def _key(core: Any) -> str:
    import hashlib

    import mypy.version

    record = core.build_record(HERE / "schedcli")
    text = f"{record}{mypy.version.__version__}{sys.version}{Path(__file__).read_text()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _reused(core: Any) -> list[Extension] | None:
    import pickle

    try:
        key, extensions = pickle.loads(_KEPT.read_bytes())
    except (OSError, pickle.UnpicklingError, ValueError, EOFError):
        return None
    if key != _key(core):
        return None
    sources = [Path(src) for ext in extensions for src in ext.sources]
    return extensions if all(src.exists() for src in sources) else None


def _remembered(core: Any, extensions: list[Extension]) -> list[Extension]:
    import pickle

    _KEPT.parent.mkdir(exist_ok=True)
    partial = _KEPT.with_suffix(f".{os.getpid()}")
    partial.write_bytes(pickle.dumps((_key(core), extensions)))
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


class ParallelBuildExt(build_ext):
    """Compiles an extension's C files on every core (setuptools compiles one at a time)."""

    def build_extension(self, ext: Extension) -> None:
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
        try:
            super().build_extension(ext)
        finally:
            compiler.compile = one_by_one


setup(ext_modules=ext_modules(), cmdclass={"build_ext": ParallelBuildExt})
