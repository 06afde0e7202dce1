"""``-p cxx:...``: a C++ ``batching::Scheduler``, unmodified, as a task-level policy.

The scheduler runs in this process, behind a CPython extension module built on first use
(``build.py``, ``shim.cpp``); tasks cross as their fields, and what comes back is matched
by tid to the very tasks handed in, each field as it went in. The C++ answers; the engine
checks every answer with the same ledger as any policy's. A crash inside a call, or an exit
function called there, is ``PolicyAborted`` (exit 3 where the call was); an id the
interface cannot hold is ``UnfitTask`` (exit 2 at its line). What ends the process anyway
is answered for by ``supervisor``.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from ...model.errors import PolicyAborted, SnapshotUnsupported, UnfitTask, UsageError
from ...model.limits import INT_MAX
from ...model.scheduler import Param, Scheduler
from ...model.task import DECODE, Id, Task, settle_outputs
from .. import supervisor
from . import build as cxx_build
from . import include_dir
from .spec import PREFIX, CxxSpec, resolve, worker_env

# Its state is the C++ scheduler's own objects, which hand none of it over.
_NO_SNAPSHOTS = "a C++ scheduler's state lives in its C++ objects, which hand none of it over"


class CxxScheduler(Scheduler):
    """A C++ scheduler behind the shim; one class per spec (``policy_class``)."""

    SPEC: ClassVar[CxxSpec]

    def __init__(self, **params: Any) -> None:
        values = {name: params.get(name, default) for name, default in self.SPEC.params}
        self._values = values
        self._shim = _module(self.SPEC)
        ordered = [values[n] if n is not None else v for n, v in self.SPEC.args]
        handle = self._shim.create(*ordered)
        if handle is None:
            raise ValueError(
                f"{self.SPEC.callee} returned null for "
                + (", ".join(f"{n}={v}" for n, v in values.items()) or "no arguments")
                + ": the C++ refuses these parameters"
            )
        self._handle = handle
        # The five calls as the shim's own callables, bound to this scheduler: they shadow
        # the methods below (an instance's attribute comes before its class's function), so
        # a call crosses into the C++ without a Python frame. They answer as those methods
        # do, errors and all (tests/runtimes/test_cxx_policy.py compares the two).
        vars(self).update(self._shim.bind(handle))
        limit = self._shim.max_prefill_chunk_size(handle)
        self._chunk_limit: int | None = limit if limit else values.get("max_prefill_chunk_size")

    def params(self) -> dict[str, Any]:
        return dict(self._values)

    def snapshot(self) -> dict[str, object]:
        raise SnapshotUnsupported(self.name, _NO_SNAPSHOTS)

    def restore(self, state: Mapping[str, object]) -> None:
        raise SnapshotUnsupported(self.name, _NO_SNAPSHOTS)

    @classmethod
    def settle(cls, **params: Any) -> dict[str, Any]:
        return {name: params.get(name, default) for name, default in cls.SPEC.params}

    @classmethod
    def available(cls) -> str | None:
        try:
            cxx_build.find_compiler()
        except UsageError as e:
            return str(e)
        return None

    @classmethod
    def runtime(cls) -> str | None:
        built = _built(cls.SPEC)
        return "cxx " + hashlib.sha256(built.read_bytes()).hexdigest()[:16]

    @classmethod
    def worker_env(cls) -> dict[str, str]:
        return worker_env(cls.SPEC)

    @property
    def token_budget(self) -> int | None:
        return self._values.get("max_batch_tokens")

    @property
    def one_output_per_session(self) -> bool:
        return not self.SPEC.known_two_outputs

    @property
    def prefill_chunk_limit(self) -> int | None:
        return self._chunk_limit

    # The shim matches what the C++ hands back to the tasks handed in, by tid, marks
    # dropped ones cancelled, and raises PolicyAborted for a tid that is not queued or a
    # task whose fields are not as they went in. An instance answers these five through
    # the bound callables __init__ puts on it; these are the same calls, spelt in Python.
    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = tasks if isinstance(tasks, list) else list(tasks)
        settle_outputs(group)
        if self._shim.submit(self._handle, group):
            return None
        return REFUSED

    def has_work(self) -> bool:
        answer: bool = self._shim.has_work(self._handle)
        return answer

    def get_work(self) -> list[Task]:
        batch: list[Task] = self._shim.get_work(self._handle)
        return batch

    def cancel(self, sid: Id) -> list[Task]:
        if type(sid) is not int:
            return []  # no C++ session has this id: nothing of it can be queued
        dropped: list[Task] = self._shim.cancel(self._handle, sid)
        return dropped

    def clear(self) -> list[Task]:
        dropped: list[Task] = self._shim.clear(self._handle)
        return dropped

    # What the shim refuses to hand over (to_task's to_int, exit 2 at the line), said
    # without handing anything over: validate's check, in the replay's words and order.
    def check_task(self, task: Task) -> None:
        """``UnfitTask`` naming the first field of ``task`` the interface cannot carry,
        against the widths the built module declares (its TASK_ID, SESSION_ID, POSITION,
        TOKEN); an opaque task's Position is its base, position - prepared.offset."""
        shim = self._shim
        _fit(task.tid, "tid", "TaskId", shim.TASK_ID)
        _fit(task.sid, "sid", "SessionId", shim.SESSION_ID)
        # prepared.size and .offset cross as std::size_t, which holds every value a trace
        # may carry (docs/trace-format.md, "Bounds"): nothing to check there.
        if task.position is not None:
            if task.tokens is None and task.prepared is not None:
                base = task.position - task.prepared[1]
                _fit(base, "position - prepared.offset", "Position", shim.POSITION)
            else:
                _fit(task.position, "position", "Position", shim.POSITION)
        for token in task.tokens or ():
            _fit(token, "token", "Token", shim.TOKEN)

    def check_sid(self, sid: Id) -> None:
        """``UnfitTask`` for a cancel's sid the interface cannot carry (a sid that is not
        an integer is no C++ session's: ``cancel`` hands nothing over for it)."""
        if type(sid) is int:
            _fit(sid, "sid", "SessionId", self._shim.SESSION_ID)


# try_submit's answer when the C++ submit returns false (the shim's bound call says the same).
REFUSED = "the C++ scheduler refused the group (submit returned false)"

# The shim converts through a long long: a value outside it never crosses, whatever the type.
_LONG_LONG = (-(2**63), 2**63 - 1)


def _fit(value: object, field: str, type_name: str, bounds: tuple[int, int]) -> None:
    """The shim's to_int, its check and its words, without the conversion."""
    if type(value) is not int:
        raise UnfitTask(f"{field} {value!r} is not an integer, and a C++ {type_name} is")
    low, high = bounds
    if not (max(low, _LONG_LONG[0]) <= value <= min(high, _LONG_LONG[1])):
        raise UnfitTask(
            f"{field} {value!r} does not fit the interface's {type_name} ({low}..{high})"
        )


def policy_class(name: str) -> type[CxxScheduler]:
    """The policy class ``cxx:...`` names (one per resolved spec)."""
    return _class(resolve(name))


@functools.lru_cache(maxsize=64)
def _class(spec: CxxSpec) -> type[CxxScheduler]:
    params = tuple(
        Param(n, int, v, f"argument of {spec.callee}", minimum=0, maximum=INT_MAX)
        for n, v in spec.params
    )
    rule = (
        f"The C++ scheduler {spec.factory} from {spec.header}, run as is (built on first "
        "use; reasons for waiting are not known: explain marks them unknown)."
    )
    attrs = {"name": spec.name, "PARAMS": params, "RULE": rule, "SPEC": spec}
    return type("CxxPolicy", (CxxScheduler,), attrs)


def _digest(spec: CxxSpec, compiler: tuple[str, ...]) -> str:
    """What the built module depends on besides the files it reads: not the policy's
    name, nor a parameter's default."""
    import orjson

    shape = [[n, None if n is not None else v] for n, v in spec.args]
    key = [
        spec.header,
        spec.callee,
        shape,
        spec.include_dirs,
        spec.system_dirs,
        spec.flags,
        compiler,
    ]
    return hashlib.sha256(orjson.dumps(key)).hexdigest()


def _source(spec: CxxSpec, module: str) -> str:
    """The extension's source: the spec's header and factory, then the shim."""
    shim = resources.files(__package__).joinpath("shim.cpp").read_text(encoding="utf-8")
    header = spec.header if spec.header.startswith("<") else f'"{spec.header}"'
    # shape.h first: an interface shape it does not know is refused in its words, before
    # the policy's header fails on it in the compiler's.
    lines = ["#include <schedcli/shape.h>", f"#include {header}"]
    lines.append("static auto schedcli_factory(const std::size_t* schedcli_params) {")
    for i, (n, _) in enumerate(spec.args):
        if n is not None:
            lines.append(f"  const std::size_t {n} = schedcli_params[{i}];")
    call = ", ".join(n if n is not None else f"{v}u" for n, v in spec.args)
    lines.append(f"  return {spec.callee}({call});")
    lines.append("}")
    return (
        f'#define SCHEDCLI_MODULE "{module}"\n#define SCHEDCLI_INIT PyInit_{module}\n'
        "#include <Python.h>\n#include <cstddef>\n" + "\n".join(lines) + "\n" + shim
    )


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _module(spec: CxxSpec) -> ModuleType:
    """The spec's extension module, built with the compiler the environment names now
    (a process keeps each module it loaded: Python cannot unload one)."""
    return _loaded(spec, tuple(cxx_build.find_compiler()))


def _built(spec: CxxSpec) -> Path:
    return _library(spec, tuple(cxx_build.find_compiler()))[0]


@functools.lru_cache(maxsize=64)
def _library(spec: CxxSpec, compiler: tuple[str, ...]) -> tuple[Path, str]:
    module = f"_schedcli_cxx_{_digest(spec, compiler)[:16]}"
    # schedcli/shape.h, which the shim includes, is in the package's include folder.
    base = cxx_build.extension_build(
        module, (("policy.cpp", _source(spec, module)),), (*spec.include_dirs, include_dir())
    )
    label = f"the C++ policy {spec.name!r}"
    flags = (*base.flags, *EXITS, *HEAP, *spec.flags)
    build = cxx_build.Build(
        base.sources, base.include_dirs, flags, base.output, label, spec.system_dirs
    )
    try:
        return cxx_build.built(build, _note), module
    except UsageError as e:
        raise UsageError(f"policy {spec.name!r}: {e}{_hint(str(e))}") from None


def _hint(error: str) -> str:
    if "executorch/extension/llm/batching" in error and "No such file" in error:
        return " (say where ExecuTorch is: --executorch PATH or $EXECUTORCH_ROOT)"
    return ""


# The scheduler's calls of the process's exit functions go to the shim's wrappers, which
# abandon the call instead (shim.cpp).
EXITS = tuple(f"-Wl,--wrap={name}" for name in ("exit", "_exit", "_Exit", "quick_exit"))
# Its calls of operator new(size_t) and the sized operator delete go to the shim's own heap
# (shim.cpp, Heap): this library's calls only, the scheduler's compiled in among them. Sized
# deallocation is on (clang before 19 has it off): a free names its size, so a heap's list.
HEAP = ("-fsized-deallocation", "-Wl,--wrap=_Znwm", "-Wl,--wrap=_ZdlPvm")


@functools.lru_cache(maxsize=64)
def _loaded(spec: CxxSpec, compiler: tuple[str, ...]) -> ModuleType:
    path, module = _library(spec, compiler)
    shared = supervisor.watched()  # before any C++ runs in this process
    loaded = sys.modules.get(module) or cxx_build.load_extension(path, module)
    loaded.setup(PolicyAborted, UnfitTask, DECODE, settle_outputs)
    if shared is not None:
        loaded.watch(shared)
    sys.modules[module] = loaded
    return loaded


__all__ = ["PREFIX", "CxxScheduler", "policy_class"]
