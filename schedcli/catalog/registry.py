"""Finding and building policies: built-ins by name, plugins by entry point or import string."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import orjson

from ..model.errors import UsageError
from ..model.limits import number_text
from ..model.scheduler import Param, Policy, Scheduler, check_params
from ..policies import BUILTIN_POLICIES
from . import IMPORTED as _imported
from . import REQUEST_POLICIES
from .entry_points import Plugin, find

if TYPE_CHECKING:
    from ..model.requests import RequestScheduler

Level = Literal["task", "request"]

ENTRY_POINT_GROUP = "schedcli.policies"


class PolicySource(NamedTuple):
    """Where a policy name comes from: a built-in class, a built-in imported when asked
    for (by the function that imports it: its runtime is an extra), or an installed entry
    point."""

    name: str
    origin: str
    builtin: type[Policy] | None = None
    entry_point: Plugin | None = None
    lazy: Callable[[], type[RequestScheduler]] | None = None

    @property
    def level(self) -> str:
        """``"task"`` or ``"request"``: a lazy built-in's said without importing it."""
        return "request" if self.lazy is not None else self.load().level

    def load(self) -> type[Policy]:
        if self.builtin is not None:
            return self.builtin
        if self.lazy is not None:
            return _check_class(self.lazy(), self.name)
        assert self.entry_point is not None
        ep = self.entry_point
        _imported.append(ep.value)
        try:
            obj = ep.load()
        except Exception as e:
            raise UsageError(
                f"policy plugin {self.name!r} ({ep.value}) failed to import: "
                f"{type(e).__name__}: {e}"
            ) from e
        return _check_class(obj, f"policy plugin {self.name!r} ({ep.value})")


def _entry_points(name: str | None = None) -> list[Plugin]:
    """The installed plugins' entry points."""
    found = _scan(tuple(sys.path))
    return [ep for ep in found if name is None or ep.name == name]


@functools.lru_cache(maxsize=4)
def _scan(path: tuple[str, ...]) -> tuple[Plugin, ...]:
    """Entry points are found on ``sys.path``: scanned once per path in a process (a
    shrink or a sweep builds a policy thousands of times; each scan reads every
    installed distribution's metadata)."""
    return find(ENTRY_POINT_GROUP, path)


def policy_sources() -> dict[str, PolicySource]:
    """Every policy name, at both levels: the task-level built-ins, the installed plugins,
    then the request-level built-ins; a name claimed twice is an error."""
    found: dict[str, PolicySource] = {
        name: PolicySource(name, "built-in", builtin=cls) for name, cls in BUILTIN_POLICIES.items()
    }
    later = {
        name: PolicySource(name, "built-in, request-level", lazy=load)
        for name, load in REQUEST_POLICIES.items()
    }
    eps = sorted(_entry_points(), key=lambda e: (e.name, e.value))
    for ep in eps:
        origin = f"{ep.dist}: {ep.value}"
        taken = found.get(ep.name) or later.get(ep.name)
        if taken is not None:
            raise UsageError(
                f"policy name {ep.name!r} is registered twice: by {taken.origin} "
                f"and by plugin {origin}"
            )
        found[ep.name] = PolicySource(ep.name, origin, entry_point=ep)
    return found | later


# The calls each seam leaves to the policy. Named here, not read from the classes' abstract
# methods: a compiled class keeps none, so a plugin missing one would pass in one core.
_CALLS = {
    "Scheduler": ("has_work", "get_work", "cancel", "clear"),
    "RequestScheduler": ("add", "abort", "has_work", "step", "counts", "held"),
}


def _check_class(obj: object, what: str) -> type[Policy]:
    if not (inspect.isclass(obj) and issubclass(obj, Policy)):
        raise UsageError(f"{what} is not a class implementing schedcli.Scheduler")
    seam = "Scheduler" if issubclass(obj, Scheduler) else "RequestScheduler"
    missing = sorted(name for name in _CALLS[seam] if _inherited(obj, name))
    if seam == "Scheduler" and _inherited(obj, "submit") and _inherited(obj, "try_submit"):
        missing.insert(0, "submit")
    if missing:
        raise UsageError(
            f"{what} does not implement the {seam} interface (missing {', '.join(missing)})"
        )
    return obj


def _inherited(cls: type, name: str) -> bool:
    """Whether ``cls`` takes ``name`` from a seam (Policy, Scheduler, RequestScheduler),
    defined there or copied from there, rather than implementing it."""
    value = inspect.getattr_static(cls, name, None)
    return value is None or any(
        vars(c).get(name) is value
        for c in cls.__mro__
        if f"{c.__module__}:{c.__qualname__}" in _SEAMS
    )


_SEAMS = {
    "schedcli.model.scheduler:Policy",
    "schedcli.model.scheduler:Scheduler",
    "schedcli.model.requests:RequestScheduler",
}


def _import_from_cwd_first(module_name: str) -> Any:
    """Import as ``python -m`` would: the current directory comes first, so a policy file
    beside the trace loads even from the installed ``schedcli`` script."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    finally:
        if added:
            sys.path.remove(cwd)


def _import_class(spec: str) -> type[Policy]:
    return _check_class(_import_attr(spec), f"policy plugin {spec!r}")


def _import_attr(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"policy {spec!r}: an import string is 'package.module:ClassName'")
    _imported.append(spec)
    try:
        module = _import_from_cwd_first(module_name)
    except Exception as e:
        raise UsageError(f"policy plugin {spec!r} failed to import: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"policy plugin {spec!r}: {module_name} has no {attr!r}") from None
    return obj


@overload
def resolve_policy(spec: str, level: Literal["task"] = ...) -> type[Scheduler]: ...
@overload
def resolve_policy(spec: str, level: Literal["request"]) -> type[RequestScheduler]: ...
@overload
def resolve_policy(spec: str, level: None) -> type[Policy]: ...
def resolve_policy(spec: str, level: Level | None = "task") -> type[Policy]:
    """A policy class from a registered name or a ``module:Class`` import string, at
    ``level`` (a policy of the other level is a UsageError saying so), or either."""
    cls: type[Policy]
    if spec.startswith(RUNNER_PREFIX):
        raise UsageError(_RUNNER.format(spec=spec, cxx=CXX_PREFIX + spec[len(RUNNER_PREFIX) :]))
    if spec.startswith(CXX_PREFIX):
        cls = _cxx_class(spec)
    elif spec.startswith(VLLM_PREFIXES):
        cls = _vllm_class(spec)
    elif ":" in spec:
        cls = _import_class(spec)
    else:
        sources = policy_sources()
        source = sources.get(spec)
        if source is None:
            hint = difflib.get_close_matches(spec, list(sources), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            if "." in spec:
                did_you_mean = " (a plugin class is named as package.module:ClassName)"
            known = ", ".join(n for n, s in sources.items() if level is None or s.lazy is None)
            raise UsageError(f"unknown policy {spec!r}{did_you_mean}; known: {known}")
        if level == "task" and source.lazy is not None:  # said without importing it
            raise UsageError(_REQUEST_LEVEL.format(spec=spec))
        cls = source.load()
    if level is not None and cls.level != level:
        if level == "task":
            raise UsageError(_REQUEST_LEVEL.format(spec=spec))
        known = ", ".join(n for n, s in policy_sources().items() if s.lazy is not None)
        raise UsageError(
            f"policy {spec!r} is not a request-level policy: a request-level trace or "
            f"policy needs one ({known}, or a RequestScheduler as module:Class)"
        )
    return cls


CXX_PREFIX = "cxx:"
# ExecuTorch's own runner driving the scheduler cxx:NAME names (docs/cxx.md, "The runner in
# the loop"): a way to simulate, not a policy; simulate runs it, its traces replay under cxx:.
RUNNER_PREFIX = "cxx-runner:"
_RUNNER = (
    "{spec!r} is ExecuTorch's runner driving the scheduler {cxx!r}: only simulate runs it "
    "(schedcli simulate WORKLOAD -p {spec}); a trace it wrote replays under -p {cxx}"
)


# vLLM from another interpreter (vllm@PYTHON[:MODULE:CLASS]) or a patched scheduler class
# (vllm:MODULE:CLASS): docs/policies.md, "vLLM versions side by side".
VLLM_PREFIXES = ("vllm@", "vllm:")


def _vllm_class(spec: str) -> type[Policy]:
    """A vLLM policy by its name (its runtime imported when one is named); a name it
    cannot be, or a vLLM it cannot run, is a UsageError."""
    from ..runtimes.vllm.policy import policy_class

    try:
        return policy_class(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cxx_class(spec: str) -> type[Scheduler]:
    """A C++ scheduler as a policy (docs/cxx.md), its runtime imported when one is named."""
    from ..runtimes.executorch.policy import policy_class

    return policy_class(spec)


def cxx_policy_names() -> list[str]:
    """The ``cxx:`` policies the built-ins and the configuration name."""
    from ..runtimes.executorch.spec import configured

    return configured()


_REQUEST_LEVEL = (
    "policy {spec!r} is request-level: it takes whole requests (simulate, sweep, and "
    "request-level traces), not a task-level trace's tasks"
)


def policy_reference(cls: type) -> str:
    """How a trace header names ``cls`` so that a replay builds the same class: its
    registered name when that name is registered for this very class, else ``module:Class``
    (a class without a name, or one whose name is registered for another class)."""
    name = getattr(cls, "name", "") or ""
    where = f"{cls.__module__}:{cls.__qualname__}"
    if name.startswith(CXX_PREFIX) or name == "vllm" or name.startswith(VLLM_PREFIXES):
        return name
    if name:
        builtin = BUILTIN_POLICIES.get(name)
        if builtin is cls or (builtin is not None and cls in builtin.VARIANTS):
            return name
        load = REQUEST_POLICIES.get(name)
        if load is not None and load() is cls:
            return name
        if any(ep.value == where for ep in _entry_points(name=name)):
            return name
    return where


def policy_source(cls: type) -> str | None:
    """A digest of the source that defines ``cls``, or None when it has no file.

    A built-in's answer depends on all of schedcli (its policy, the shared queues, the
    engine), so it is every ``.py`` file of the package; a plugin's is its module's file and
    the modules beside it in its package (what it most likely imports). Any edit to them
    changes the digest: a sweep's cache keys on it.
    """
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if module is None or file is None:
        return None
    if cls.__module__.split(".")[0] == "schedcli":
        root = Path(__file__).resolve().parent.parent
        files = sorted(p for layer in _RESULT_LAYERS for p in (root / layer).rglob("*.py"))
    else:
        here = Path(file).resolve()
        if here.suffix != ".py":
            return None
        root = here.parent
        files = sorted(root.glob("*.py")) if module.__package__ else [here]
    import hashlib  # not at start-up: OpenSSL's hashlib costs 5 ms

    digest = hashlib.sha256()
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        digest.update(f"{path.relative_to(root)}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


# What a simulation's or replay's numbers depend on (the app layer only shows them).
_RESULT_LAYERS = ("model", "policies", "formats", "engine", "runtimes")


_NOT_FINITE = ("inf", "infinity", "nan")


def _coerce(param: Param, value: object, label: str) -> object:
    """A value given as text (``-P``) in the parameter's type, by the one number grammar
    (model.limits.number_text); text that is not a number is left for the check to refuse."""
    if not isinstance(value, str):
        return value
    if param.type is str:
        return value.strip()
    number = number_text(value, param.type is int)
    spelt_infinite = value.strip().lower().lstrip("+-") in _NOT_FINITE
    if number is None and not (param.type is float and spelt_infinite):
        return value
    if number is None or not math.isfinite(number):  # 1e309, inf, nan
        raise UsageError(f"policy {label!r}: {param.name} must be a finite number, not {value!r}")
    return float(number) if param.type is float else number


def _parse_loose(value: object) -> object:
    """A value for a plugin that declares no PARAMS: JSON if it parses, else the string."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


@overload
def build_policy(
    spec: str,
    params: Mapping[str, object] | None = ...,
    cls: type[Scheduler] | None = ...,
    level: Literal["task"] = ...,
) -> Scheduler: ...
@overload
def build_policy(
    spec: str,
    params: Mapping[str, object] | None,
    cls: type[RequestScheduler] | None,
    level: Literal["request"],
) -> RequestScheduler: ...
@overload
def build_policy(
    spec: str,
    params: Mapping[str, object] | None = ...,
    cls: type[Policy] | None = ...,
    *,
    level: None,
) -> Policy: ...
def build_policy(
    spec: str,
    params: Mapping[str, object] | None = None,
    cls: type[Policy] | None = None,
    level: Level | None = "task",
) -> Policy:
    """Instantiate a policy at ``level`` (or either); any problem with it or its
    parameters is a UsageError.

    ``cls``, when the caller already resolved ``spec``, saves resolving it again.
    """
    cls = cls or resolve_policy(spec, level)
    label, kwargs = _checked(cls, spec, params)
    with _start_problems(label):
        return cls.create(**kwargs)


def settled_params(
    spec: str,
    params: Mapping[str, object],
    cls: type[Policy] | None = None,
    level: Level | None = None,
) -> dict[str, Any]:
    """Every declared parameter's value, ``params`` over the defaults, checked as building
    would check them (``Policy.settle``: vLLM's without building it, which takes seconds
    and its extra)."""
    cls = cls or resolve_policy(spec, level)
    label, kwargs = _checked(cls, spec, params)
    with _start_problems(label):
        return cls.settle(**kwargs)


def _checked(
    cls: type[Policy], spec: str, params: Mapping[str, object] | None
) -> tuple[str, dict[str, object]]:
    """The policy's label and its keyword arguments, checked; an unavailable one refused."""
    label = cls.name or spec
    kwargs = _kwargs(cls, label, params)
    _refuse_unavailable(cls, label)
    return label, kwargs


@contextlib.contextmanager
def _start_problems(label: str) -> Iterator[None]:
    """What building or settling a policy raises, as the UsageError that names it (building
    and settling check the same things, so they say them the same way)."""
    try:
        yield
    except UsageError:
        raise  # said already, in full (a C++ policy's build)
    except (ValueError, TypeError) as e:
        raise UsageError(f"policy {label!r}: {e}") from e
    except Exception as e:
        raise UsageError(f"policy {label!r} failed to start: {type(e).__name__}: {e}") from e


def _refuse_unavailable(cls: type[Policy], label: str) -> None:
    """What building ``cls`` would refuse here (its runtime missing), said the same way
    whether it is then built (replay) or only checked (validate)."""
    missing = cls.available()
    if missing is not None:
        raise UsageError(f"policy {label!r}: {missing}")


def _declared(cls: type[Policy], label: str, given: Mapping[str, object]) -> dict[str, object]:
    """``given`` in the declared parameters' types; a name not declared is a UsageError
    with the name meant, if one is close."""
    declared = {p.name: p for p in cls.PARAMS}
    values: dict[str, object] = {}
    for key, value in given.items():
        p = declared.get(key)
        if p is None:
            hint = difflib.get_close_matches(key, list(declared), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            why = param_lacked(cls, key)
            because = f": {why}" if why else ""
            raise UsageError(
                f"policy {label!r} has no parameter {key!r}{did_you_mean}{because}; "
                f"it takes {', '.join(declared)}"
            )
        values[key] = _coerce(p, value, label)
    return values


def param_lacked(cls: type[Policy], name: str) -> str | None:
    """Why ``cls`` takes no parameter ``name``, where the policy can say: one whose
    parameters are read from the runtime it drives (vLLM's knobs, by its ``lacks``) names
    that runtime's version, or why the runtime's setting is left out."""
    said = getattr(cls, "lacks", None)
    if not callable(said):
        return None
    found = said(name)
    return found if isinstance(found, str) else None


def _kwargs(
    cls: type[Policy], label: str, params: Mapping[str, object] | None
) -> dict[str, object]:
    """The constructor's keyword arguments: declared parameters by name, in their types
    and bounds (before a compiled constructor refuses a wrong type in its own words); a
    class that declares none takes each value as JSON if it parses."""
    given = dict(params or {})
    if not cls.PARAMS:
        return {k: _parse_loose(v) for k, v in given.items()}
    kwargs = _declared(cls, label, given)
    try:
        check_params(cls.PARAMS, kwargs)
    except ValueError as e:
        raise UsageError(f"policy {label!r}: {e}") from e
    return kwargs


def config_label(name: str, params: Mapping[str, object]) -> str:
    """A policy and the parameters it was given, as one line: ``fcfs max_num_seqs=16``."""
    return " ".join([name, *(f"{k}={v}" for k, v in params.items())])


def describe_policy(name: str, cls: type[Policy], origin: str) -> dict[str, Any]:
    """Name, origin, declared parameters and rule of a policy, as plain data; a note
    when it cannot be built here (its runtime is missing)."""
    doc = vars(cls).get("RULE") or inspect.getdoc(cls) or ""
    missing = cls.available()
    return {
        "name": name,
        "origin": origin,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "level": cls.level,
        "params": [
            {
                "name": p.name,
                "type": p.type.__name__,
                "default": p.default,
                "help": p.help,
                **({"choices": list(p.choices)} if p.choices else {}),
                **({"maximum": p.maximum} if p.maximum is not None else {}),
            }
            for p in cls.PARAMS
        ],
        "rule": " ".join(doc.split()),
        **({"note": missing} if missing is not None else {}),
    }


def describe_named(name: str) -> dict[str, Any]:
    """One policy by any name ``-p`` takes (a registered name, ``vllm@PYTHON``,
    ``vllm:MODULE:CLASS``, ``cxx:NAME``, ``module:Class``), described as
    ``describe_policies`` describes each: a vLLM's parameters are that vLLM's knobs."""
    source = policy_sources().get(name)
    if source is not None:
        return describe_policy(name, source.load(), source.origin)
    cls: Any = resolve_policy(name, None)
    if name.startswith(CXX_PREFIX):
        origin = f"C++: {cls.SPEC.header}"
    elif name.startswith(VLLM_PREFIXES):
        origin = "vLLM, request-level"
    else:
        origin = "import string"
    return describe_policy(name, cls, origin)


def describe_policies() -> list[dict[str, Any]]:
    """Every registered policy, in ``policy_sources`` order; a plugin that cannot load is
    an error."""
    found = [describe_policy(s.name, s.load(), s.origin) for s in policy_sources().values()]
    for name in cxx_policy_names():
        try:
            cls: Any = _cxx_class(name)
        except UsageError as e:
            found.append(
                {
                    "name": name,
                    "origin": "C++",
                    "class": "",
                    "level": "task",
                    "params": [],
                    "rule": "",
                    "note": str(e),
                }
            )
            continue
        found.append(describe_policy(name, cls, f"C++: {cls.SPEC.header}"))
    return found
