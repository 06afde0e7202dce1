"""C++ built on first use (#41, the build half): cached by everything the compiler read, an
edited header rebuilt, a compile error or a missing compiler said as bad input, and
concurrent first uses built once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from schedcli.model.errors import UsageError
from schedcli.runtimes.executorch.build import Build, built
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
