"""C++ built on first use (#41, the build half): cached by everything the compiler read, an
edited header rebuilt, a compile error or a missing compiler said as bad input, and
concurrent first uses built once; reused only while the compiler would read the same files
now (#54: a repointed link, a header found first, a probe flipped); what it read is read
back exactly under folders named with make's characters, and a flag that changes what the
compiler makes refused, nothing cached (#55), with g++ and clang++."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.model.errors import UsageError
from schedcli.runtimes.executorch.build import Build, built, find_compiler
from tests.helpers import ROOT

SOURCE = '#include "answer.h"\nextern "C" int answer() { return ANSWER; }\n'


def _setup(tmp_path: Path, answer: str = "42") -> tuple[Build, dict[str, str]]:
    include = tmp_path / "include"
    include.mkdir(exist_ok=True)
    (include / "answer.h").write_text(f"#pragma once\n#define ANSWER {answer}\n")
    env = {**os.environ, "SCHEDCLI_CXX_CACHE": str(tmp_path / "cache")}
    env.pop("CXX", None)
    return Build((("answer.cpp", SOURCE),), (str(include),)), env


def _call(library: Path) -> int:
    # A process of its own: dlopen would hand this one the library it loaded before.
    code = f"import ctypes; print(ctypes.CDLL({str(library)!r}).answer())"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True).stdout)


def test_a_build_is_made_once_and_reused_until_a_header_it_read_changes(tmp_path: Path) -> None:
    build, env = _setup(tmp_path)
    notes: list[str] = []
    library = built(build, notes.append, env)
    assert _call(library) == 42
    assert len(notes) == 1 and "built answer.cpp" in notes[0]
    again = built(build, notes.append, env)
    assert again == library and len(notes) == 1  # from the cache, silently
    (tmp_path / "include" / "answer.h").write_text("#pragma once\n#define ANSWER 7\n")
    rebuilt = built(build, notes.append, env)
    assert len(notes) == 2 and _call(rebuilt) == 7


def test_a_compile_error_is_bad_input_naming_the_file_and_line(tmp_path: Path) -> None:
    build, env = _setup(tmp_path, answer="42 +")
    with pytest.raises(UsageError, match=r"the C\+\+ build failed: .*answer\.(h|cpp):\d+"):
        built(build, lambda _: None, env)


def test_no_compiler_says_what_to_install(tmp_path: Path) -> None:
    build, env = _setup(tmp_path)
    env["PATH"] = str(tmp_path / "empty")
    with pytest.raises(UsageError, match=r"no C\+\+ compiler found .*apt install g\+\+"):
        built(build, lambda _: None, env)
    env["CXX"] = "no-such-compiler-xyz"
    with pytest.raises(UsageError, match="CXX='no-such-compiler-xyz' is not a program"):
        built(build, lambda _: None, env)


def test_concurrent_first_uses_build_once(tmp_path: Path) -> None:
    _, env = _setup(tmp_path)
    script = (
        "import sys\n"
        "from schedcli.runtimes.executorch.build import Build, built\n"
        f"b = Build((('answer.cpp', {SOURCE!r}),), ({str(tmp_path / 'include')!r},))\n"
        "print(built(b, lambda m: print('BUILT', file=sys.stderr)))\n"
    )
    env["PYTHONPATH"] = str(ROOT)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(3)
    ]
    results = [run.communicate() for run in runs]
    assert all(run.returncode == 0 for run in runs), results
    assert sum(err.count(b"BUILT") for _, err in results) == 1
    assert len({out for out, _ in results}) == 1


def test_a_header_deleted_since_the_build_is_rebuilt_and_its_absence_said(tmp_path: Path) -> None:
    build, env = _setup(tmp_path)
    built(build, lambda _: None, env)
    (tmp_path / "include" / "answer.h").unlink()
    with pytest.raises(UsageError, match=r"answer\.cpp:1:\d+: fatal error: answer\.h"):
        built(build, lambda _: None, env)


EXTENSION = """
#include <Python.h>
#include "answer.h"
static PyObject* answer(PyObject*, PyObject* const* args, Py_ssize_t n) {
  long long total = ANSWER;
  for (Py_ssize_t i = 0; i < n; ++i) total += PyLong_AsLongLong(args[i]);
  return PyLong_FromLongLong(total);
}
static PyMethodDef methods[] = {
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "answer_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_answer_ext(void) { return PyModule_Create(&module); }
"""


def test_an_extension_module_builds_without_exceptions_and_imports(tmp_path: Path) -> None:
    # The boundary a C++ policy will cross per call: a CPython extension, not ctypes.
    from schedcli.runtimes.executorch.build import extension_build, load_extension

    _, env = _setup(tmp_path)
    build = extension_build(
        "answer_ext", (("answer_ext.cpp", EXTENSION),), (str(tmp_path / "include"),)
    )
    assert "-fno-exceptions" in build.flags
    path = built(build, lambda _: None, env)
    assert path.name.startswith("answer_ext.") and path.suffix == ".so"
    assert load_extension(path, "answer_ext").answer(1, 2) == 45


# What the compiler reads now, not what it read then (#54): a header link repointed, or a
# header that the include search would now find first, rebuilds. The library carries its
# answer as text, so what a build holds is read without loading it.
TAGGED = '#include <wrapper.h>\nextern "C" const char tag[] = "ANSWER=" TEXT(ANSWER);\n'
WRAPPER = '#pragma once\n#define TEXT_(x) #x\n#define TEXT(x) TEXT_(x)\n#include "answer.h"\n'


def _answer(library: Path) -> int:
    found = re.search(rb"ANSWER=(\d+)", library.read_bytes())
    assert found is not None, library
    return int(found.group(1))


def _header(path: Path, answer: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#pragma once\n#define ANSWER {answer}\n")


def _relink(link: Path, target: str) -> None:
    """``link`` pointing at ``target`` (relative to the link's folder), swapped in at once."""
    fresh = link.with_name(link.name + ".new")
    os.symlink(target, fresh)
    os.replace(fresh, link)


def _tagged(tmp_path: Path, dirs: tuple[str, ...], flags: tuple[str, ...] = ()) -> Build:
    folders = tuple(str(tmp_path / d) for d in dirs)
    return Build((("tag.cpp", TAGGED),), folders, ("-std=c++17", "-fPIC", "-shared", *flags))


@pytest.mark.parametrize("linked", ["the header", "a folder on its path"])
def test_a_header_link_repointed_since_the_build_is_rebuilt(tmp_path: Path, linked: str) -> None:
    _, env = _setup(tmp_path)
    (tmp_path / "wrap").mkdir()
    (tmp_path / "wrap" / "wrapper.h").write_text(WRAPPER.replace("answer.h", "v/answer.h"))
    for version, answer in (("one", 42), ("two", 7)):  # same size: only the link tells
        _header(tmp_path / version / "answer.h", answer)
    include = tmp_path / "include"
    if linked == "the header":
        (include / "v").mkdir(parents=True)
        link, old, new = include / "v" / "answer.h", "../../one/answer.h", "../../two/answer.h"
    else:
        link, old, new = include / "v", "../one", "../two"
    _relink(link, old)
    build = _tagged(tmp_path, ("wrap", "include"))
    notes: list[str] = []
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1  # cached
    _relink(link, new)
    assert _answer(built(build, notes.append, env)) == 7
    assert len(notes) == 2 and "built tag.cpp" in notes[1]  # the note says it rebuilt


@pytest.mark.parametrize(
    ("shadow", "dirs", "flags"),
    [
        ("early/answer.h", ("early", "wrap", "lib"), ()),  # an earlier -I folder
        ("wrap/answer.h", ("lib", "wrap"), ()),  # the quoted include's own folder
        ("early/answer.h", ("wrap",), ("-isystem", "EARLY", "-isystem", "LIB")),
        ("late/answer.h", ("late", "wrap", "lib"), ()),  # a folder absent at the build
    ],
    ids=["earlier -I folder", "own folder of a quoted include", "-isystem", "new folder"],
)
def test_a_new_header_found_first_since_the_build_is_rebuilt(
    tmp_path: Path, shadow: str, dirs: tuple[str, ...], flags: tuple[str, ...]
) -> None:
    _, env = _setup(tmp_path)
    (tmp_path / "wrap").mkdir()
    (tmp_path / "wrap" / "wrapper.h").write_text(WRAPPER)
    (tmp_path / "early").mkdir()
    _header(tmp_path / "lib" / "answer.h", 42)
    where = {"EARLY": str(tmp_path / "early"), "LIB": str(tmp_path / "lib")}
    build = _tagged(tmp_path, dirs, tuple(where.get(f, f) for f in flags))
    notes: list[str] = []
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1  # cached
    _header(tmp_path / shadow, 7)
    assert _answer(built(build, notes.append, env)) == 7
    assert len(notes) == 2 and "built tag.cpp" in notes[1]
    assert _answer(built(build, notes.append, env)) == 7 and len(notes) == 2  # cached again


@pytest.mark.parametrize("spelled", ['"override.h"', "<override.h>"])
def test_a_header_a_probe_now_finds_since_the_build_is_rebuilt(
    tmp_path: Path, spelled: str
) -> None:
    # __has_include flips when the file appears, though nothing read it at the build.
    _, env = _setup(tmp_path)
    (tmp_path / "wrap").mkdir()
    probe = f"#if __has_include({spelled})\n#include {spelled}\n#else\n#define ANSWER 42\n#endif\n"
    (tmp_path / "wrap" / "wrapper.h").write_text(WRAPPER.replace('#include "answer.h"\n', probe))
    (tmp_path / "early").mkdir()
    build = _tagged(tmp_path, ("early", "wrap"))
    notes: list[str] = []
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1  # cached
    _header(tmp_path / "early" / "override.h", 7)
    assert _answer(built(build, notes.append, env)) == 7 and len(notes) == 2


def _preprocessed(build: Build, tmp_path: Path, env: dict[str, str]) -> int | None:
    """The second path: what the compiler makes of the source now, from nothing cached."""
    source = tmp_path / "now.cpp"
    source.write_text(TAGGED)
    includes = [f"-I{d}" for d in build.include_dirs]
    argv = [*find_compiler(env), *build.flags, *includes, "-E", "-P", str(source)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    if done.returncode != 0:
        return None
    found = re.search(r'"ANSWER=" "(\d+)"', done.stdout)
    assert found is not None, done.stdout
    return int(found.group(1))


PLACES = ("d0", "d1", "d2")  # on the include path in this order; wrapper.h lives in d2
CHANGES = st.tuples(
    st.sampled_from(("file", "link", "remove")), st.sampled_from(PLACES), st.integers(1, 3)
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.lists(CHANGES, min_size=1, max_size=3), min_size=1, max_size=3))
def test_a_build_always_holds_what_the_compiler_reads_now(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[tuple[str, str, int]]]
) -> None:
    # Headers written, linked (to one of three targets) and removed across the include
    # path and the wrapper's own folder between builds: the cached build answers what the
    # compiler, run afresh, reads.
    tmp_path = tmp_path_factory.mktemp("now")
    _, env = _setup(tmp_path)
    for k in (1, 2, 3):
        _header(tmp_path / "targets" / f"t{k}.h", 10 * k)
    (tmp_path / "d2").mkdir()
    (tmp_path / "d2" / "wrapper.h").write_text(WRAPPER)
    _header(tmp_path / "d1" / "answer.h", 1)
    (tmp_path / "d0").mkdir()
    build = _tagged(tmp_path, PLACES)
    for step in [[], *steps]:
        for change, place, k in step:
            header = tmp_path / place / "answer.h"
            if change == "file":
                header.unlink(missing_ok=True)
                _header(header, 100 + k)
            elif change == "link":
                _relink(header, f"../targets/t{k}.h")
            else:
                header.unlink(missing_ok=True)
        expected = _preprocessed(build, tmp_path, env)
        if expected is None:
            with pytest.raises(UsageError, match="the C\\+\\+ build failed"):
                built(build, lambda _: None, env)
        else:
            assert _answer(built(build, lambda _: None, env)) == expected


# Folders named with make's own characters (#55): the compiler's dependency list is read
# exactly, with g++ and clang++ (clang writes a backslash as "/"), so such a build is
# reused; and a flag that changes what the compiler makes is exit 2, nothing cached.
REQUIRED = bool(os.environ.get("SCHEDCLI_REQUIRE_GXX"))
COMPILERS = [c for c in ("g++", "clang++") if shutil.which(c) or REQUIRED]
needs_compilers = pytest.mark.skipif(
    not COMPILERS, reason="no g++ or clang++ here (CI installs both and requires this)"
)
ODD = ["d$ollar", "$$", "h#ash", "sp ace", "back\\slash", "tab\tx", "\\ $#:%", "end\\", "x\\#"]


def _odd_env(tmp_path: Path, compiler: str) -> dict[str, str]:
    env = {**os.environ, "SCHEDCLI_CXX_CACHE": str(tmp_path / "cache"), "CXX": compiler}
    for name in ("CXXFLAGS", "CPATH", "CPLUS_INCLUDE_PATH"):
        env.pop(name, None)
    return env


@needs_compilers
@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("where", ["above the include folder", "the include folder itself"])
def test_a_header_under_a_folder_named_with_make_characters_is_built_once_and_reused(
    tmp_path: Path, compiler: str, odd: str, where: str
) -> None:
    include = tmp_path / odd / "inc" if where.startswith("above") else tmp_path / odd
    _header(include / "answer.h", 42)
    (include / "wrapper.h").write_text(WRAPPER)  # a quoted include from the odd folder
    build = Build((("tag.cpp", TAGGED),), (str(include),), ("-std=c++17", "-fPIC", "-shared"))
    env = _odd_env(tmp_path, compiler)
    notes: list[str] = []
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1
    assert _answer(built(build, notes.append, env)) == 42 and len(notes) == 1  # reused
    _header(include / "answer.h", 7)  # the header it read is the one recorded
    assert _answer(built(build, notes.append, env)) == 7 and len(notes) == 2


NAMES = st.text(st.sampled_from(" $#\\\t:%*a\n"), min_size=1, max_size=6).filter(
    lambda n: n not in (".", "..")
)


@needs_compilers
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(folders=st.lists(st.lists(NAMES, min_size=1, max_size=3), min_size=1, max_size=4))
def test_the_dependency_list_names_exactly_the_headers_the_compiler_read(
    tmp_path_factory: pytest.TempPathFactory, folders: list[list[str]]
) -> None:
    # The second path: the headers this test put there, against what g++ and clang++ say
    # they read (each name read back on disk, as the build does).
    from schedcli.runtimes.executorch import _compiler

    tmp_path = tmp_path_factory.mktemp("deps")
    headers, source = [], ""
    for i, parts in enumerate(folders):
        header = tmp_path.joinpath(f"f{i}", *parts, f"h{i}.h")
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(f"#pragma once\nint v{i};\n")
        headers.append(str(header))
        source += f"#include <h{i}.h>\n"
    (tmp_path / "m.cpp").write_text(source)
    for compiler in COMPILERS:
        folders_flags = [f"-I{os.path.dirname(h)}" for h in headers]
        rule = tmp_path / f"{compiler}.d"
        argv = [compiler, *folders_flags, "-MD", "-MF", str(rule), "-MT", "schedcli"]
        subprocess.run([*argv, "-fsyntax-only", "m.cpp"], cwd=tmp_path, check=True)
        named = _compiler.rule_names(rule.read_bytes())
        assert named[0] == "m.cpp"
        read = [r for n in named[1:] for r in _compiler.readings(n, os.path.exists)]
        assert [r for r in read if r.startswith(f"{tmp_path}/")] == headers, compiler
        assert all(os.path.exists(r) for r in read)  # g++'s stdc-predef.h besides


MODES = [
    ("-E",),
    ("-M",),
    ("-MM",),
    ("-fsyntax-only",),
    ("-S",),
    ("-c",),
    ("-o", "elsewhere.so"),
    ("-MD",),
    ("-MF", "mine.d"),
    ("-###",),
    ("--version",),
    ("-print-search-dirs",),
    ("-Wp,-MD,mine.d",),
    ("-x", "c++-header"),
]


def _cached_files(cache: Path) -> list[str]:
    """What a later run could load: every file in the cache but a key's lock."""
    if not cache.exists():
        return []
    return [str(p) for p in cache.rglob("*") if p.is_file() and p.name != "lock"]


@needs_compilers
@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("flags", MODES, ids=[" ".join(f) for f in MODES])
def test_a_flag_that_changes_what_the_compiler_makes_is_bad_input_and_nothing_is_cached(
    tmp_path: Path, compiler: str, flags: tuple[str, ...]
) -> None:
    build, _ = _setup(tmp_path)
    env = _odd_env(tmp_path, compiler)
    odd = Build(build.sources, build.include_dirs, (*build.flags, *flags))
    shown = " ".join(flags) if flags[0] == "-x" else flags[0].removeprefix("-Wp,").split(",")[0]
    named = f"the C\\+\\+ compiler flag {re.escape(shown)}: "
    with pytest.raises(UsageError, match=named):
        built(odd, lambda _: None, env)
    assert _cached_files(tmp_path / "cache") == []
    env["CXX"] = shlex.join([compiler, *flags])  # in $CXX too
    with pytest.raises(UsageError, match=named):
        built(build, lambda _: None, env)
    assert _cached_files(tmp_path / "cache") == []
    env["CXX"] = compiler
    assert _call(built(build, lambda _: None, env)) == 42  # without it, it builds


@needs_compilers
@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("flag", ["-Wl,--version", "-Wl,--help"])
def test_a_build_that_exits_0_without_a_library_is_bad_input_and_nothing_is_cached(
    tmp_path: Path, compiler: str, flag: str
) -> None:
    # A flag no list names: the compiler's exit 0 is not taken for a library.
    build, _ = _setup(tmp_path)
    env = _odd_env(tmp_path, compiler)
    odd = Build(build.sources, build.include_dirs, (*build.flags, flag))
    with pytest.raises(UsageError, match=f"made no library .*{re.escape(flag)}"):
        built(odd, lambda _: None, env)
    assert _cached_files(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").glob("*/build-*"))  # no build folder left


def _replay_odd(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """``replay -p cxx:HEADER=...`` with the header under a folder named with ``$`` and
    ``#`` and the ExecuTorch checkout under one with a backslash, ``:`` and a space."""
    header = tmp_path / "we$ird #dir" / "fifo_scheduler.h"
    checkout = tmp_path / "back\\slash $#: x" / "executorch"
    if not header.exists():
        header.parent.mkdir()
        shutil.copy(ROOT / "tests" / "cpp" / "schedulers" / "fifo_scheduler.h", header)
        shutil.copytree(ROOT / "tests" / "cpp" / "seed" / "executorch", checkout)
    spec = f"cxx:{header}=schedcli_test::FifoScheduler::create(544, 64, 256)"
    trace = ROOT / "traces" / "rotation-fairness.jsonl"
    argv = [sys.executable, "-m", "schedcli", "replay", str(trace), "-p", spec]
    env = {**env, "EXECUTORCH_ROOT": str(checkout)}
    return subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path, timeout=300)


@needs_compilers
@pytest.mark.parametrize("compiler", COMPILERS)
def test_a_cxx_policy_under_odd_folders_is_built_on_the_first_replay_only(
    tmp_path: Path, compiler: str
) -> None:
    env = _odd_env(tmp_path, compiler)
    first, second = _replay_odd(tmp_path, env), _replay_odd(tmp_path, env)
    assert first.returncode == 0 and b"note: built" in first.stderr, first.stderr
    assert second.returncode == 0 and b"note: built" not in second.stderr, second.stderr
    assert second.stdout == first.stdout


def test_cxxflags_that_only_preprocess_are_exit_2_naming_the_flag(tmp_path: Path) -> None:
    env = {**_odd_env(tmp_path, "c++"), "CXXFLAGS": "-O1 -E"}
    done = _replay_odd(tmp_path, env)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert b"the C++ compiler flag -E: only preprocesses" in done.stderr
    assert _cached_files(tmp_path / "cache") == []
