"""Finding and building policies: built-ins by name, plugins by entry point or import string."""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..model.errors import InputError, UsageError
from ..model.scheduler import Param, Scheduler, check_params
from . import BUILTIN_POLICIES, REQUEST_POLICIES
from .entry_points import Plugin, find

if TYPE_CHECKING:
    from ..model.requests import RequestScheduler

ENTRY_POINT_GROUP = "schedcli.policies"


# Plugins this process imported, or tried to (see plugin_imported).
_imported: list[str] = []


def plugin_imported() -> bool:
    """Whether a plugin was imported: its objects may count on the interpreter's teardown
    (a file closed when collected), so the command line then keeps it."""
    return bool(_imported)


class PolicySource(NamedTuple):
    """Where a policy name comes from: a built-in class or an installed entry point."""

    name: str
    origin: str
    builtin: type[Scheduler] | None = None
    entry_point: Plugin | None = None

    def load(self) -> type[Scheduler]:
        if self.builtin is not None:
            return self.builtin
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
    """Every policy name, built-ins first; a name claimed twice is an error."""
    found: dict[str, PolicySource] = {
        name: PolicySource(name, "built-in", builtin=cls) for name, cls in BUILTIN_POLICIES.items()
    }
    eps = sorted(_entry_points(), key=lambda e: (e.name, e.value))
    for ep in eps:
        origin = f"{ep.dist}: {ep.value}"
        if ep.name in found:
            raise UsageError(
                f"policy name {ep.name!r} is registered twice: by {found[ep.name].origin} "
                f"and by plugin {origin}"
            )
        found[ep.name] = PolicySource(ep.name, origin, entry_point=ep)
    return found


def _check_class(obj: object, what: str) -> type[Scheduler]:
    if not (inspect.isclass(obj) and issubclass(obj, Scheduler)):
        raise UsageError(f"{what} is not a class implementing schedcli.Scheduler")
    missing = sorted(getattr(obj, "__abstractmethods__", ()))
    if obj.submit is Scheduler.submit and obj.try_submit is Scheduler.try_submit:
        missing.insert(0, "submit")
    if missing:
        raise UsageError(
            f"{what} does not implement the Scheduler interface (missing {', '.join(missing)})"
        )
    return obj


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


def _import_class(spec: str) -> type[Scheduler]:
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


def resolve_policy(spec: str) -> type[Scheduler]:
    """A policy class from a registered name or a ``module:Class`` import string."""
    if ":" in spec:
        return _import_class(spec)
    if spec in REQUEST_POLICIES:
        raise UsageError(
            f"policy {spec!r} is request-level: it takes whole requests (simulate, sweep, and "
            "request-level traces), not a task-level trace's tasks"
        )
    sources = policy_sources()
    source = sources.get(spec)
    if source is None:
        hint = difflib.get_close_matches(spec, list(sources), n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        if "." in spec:
            did_you_mean = " (a plugin class is named as package.module:ClassName)"
        raise UsageError(f"unknown policy {spec!r}{did_you_mean}; known: {', '.join(sources)}")
    return source.load()


def policy_reference(cls: type) -> str:
    """How a trace header names ``cls`` so that a replay builds the same class: its
    registered name when that name is registered for this very class, else ``module:Class``
    (a class without a name, or one whose name is registered for another class)."""
    name = getattr(cls, "name", "") or ""
    where = f"{cls.__module__}:{cls.__qualname__}"
    if name:
        builtin = BUILTIN_POLICIES.get(name)
        if builtin is cls or (builtin is not None and cls in builtin.VARIANTS):
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
_RESULT_LAYERS = ("model", "policies", "formats", "engine")


def _coerce(param: Param, value: object) -> object:
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return param.type(text)
    except ValueError:
        if param.type is int:
            try:
                as_float = float(text)
            except ValueError:
                return value
            if as_float.is_integer() and "e" in text.lower():
                return int(as_float)
        return value


def _parse_loose(value: object) -> object:
    """A value for a plugin that declares no PARAMS: JSON if it parses, else the string."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def build_policy(
    spec: str, params: Mapping[str, object] | None = None, cls: type[Scheduler] | None = None
) -> Scheduler:
    """Instantiate a policy; any problem with it or its parameters is a UsageError.

    ``cls``, when the caller already resolved ``spec``, saves resolving it again.
    """
    cls = cls or resolve_policy(spec)
    return _build(cls, spec, params)  # type: ignore[no-any-return]


def is_request_policy(spec: str) -> bool:
    """Whether ``spec`` names a request-level policy (built-in ``vllm``, or a
    ``module:Class`` whose class is a RequestScheduler)."""
    if spec in REQUEST_POLICIES:
        return True
    if ":" not in spec or spec.count(":") != 1:
        return False
    try:
        obj = _import_attr(spec)
    except UsageError:
        return False
    return _isrequest_class(obj)


def _isrequest_class(obj: object) -> bool:
    from ..model.requests import RequestScheduler  # not at import: most runs never ask

    return inspect.isclass(obj) and issubclass(obj, RequestScheduler)


def build_request_policy(spec: str, params: Mapping[str, object] | None = None) -> RequestScheduler:
    """A request-level policy, built and its parameters checked as ``build_policy`` does."""
    return _build(request_class(spec), spec, params)  # type: ignore[no-any-return]


def check_request_params(spec: str, params: Mapping[str, object]) -> dict[str, object]:
    """A request-level policy's parameters checked by name and type, the policy unbuilt
    (building vLLM's takes seconds and its extra); the given ones in their types."""
    cls = request_class(spec)
    values = _declared(cls, cls.name or spec, params)
    try:
        check_params(cls.PARAMS, values)
    except ValueError as e:
        raise UsageError(f"policy {cls.name or spec!r}: {e}") from e
    missing = cls.available() if hasattr(cls, "available") else None
    if missing is not None:  # what building it would refuse, said without building it
        raise UsageError(f"policy {cls.name or spec!r}: {missing}")
    return values


def build_any_policy(spec: str, params: Mapping[str, object] | None = None) -> Any:
    """The policy ``spec`` names, built at its own level: a ``RequestScheduler`` for a
    request-level one, else a task-level ``Scheduler``."""
    if is_request_policy(spec):
        return build_request_policy(spec, params)
    return build_policy(spec, params)


def policy_class(spec: str) -> Any:
    """The class ``spec`` names, task-level or request-level."""
    return request_class(spec) if is_request_policy(spec) else resolve_policy(spec)


def declared_params(spec: str, params: Mapping[str, object]) -> dict[str, Any]:
    """Every declared parameter's value, ``params`` over the defaults, checked, for a
    request-level policy without building it (for a task-level one, its ``params()``)."""
    if not is_request_policy(spec):
        return build_policy(spec, params).params()
    given = check_request_params(spec, params)
    return {p.name: p.default for p in request_class(spec).PARAMS} | given


def request_class(spec: str) -> Any:
    """The request-level class ``spec`` names; a UsageError if it names none."""
    if spec in REQUEST_POLICIES:
        module, _, attr = REQUEST_POLICIES[spec].partition(":")
        return getattr(importlib.import_module(module), attr)
    if ":" not in spec:
        known = ", ".join(REQUEST_POLICIES)
        raise UsageError(
            f"policy {spec!r} is not a request-level policy: a request-level trace or "
            f"policy needs one ({known}, or a RequestScheduler as module:Class)"
        )
    cls = _import_attr(spec)
    if not _isrequest_class(cls):
        raise UsageError(f"policy {spec!r} is not a request-level policy (RequestScheduler)")
    return cls


def _declared(cls: Any, label: str, given: Mapping[str, object]) -> dict[str, object]:
    """``given`` in the declared parameters' types; a name not declared is a UsageError
    with the name meant, if one is close."""
    declared = {p.name: p for p in cls.PARAMS}
    values: dict[str, object] = {}
    for key, value in given.items():
        p = declared.get(key)
        if p is None:
            hint = difflib.get_close_matches(key, list(declared), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise UsageError(
                f"policy {label!r} has no parameter {key!r}{did_you_mean}; "
                f"it takes {', '.join(declared)}"
            )
        values[key] = _coerce(p, value)
    return values


def _build(cls: Any, spec: str, params: Mapping[str, object] | None) -> Any:
    label = cls.name or spec
    given = dict(params or {})
    if cls.PARAMS:
        kwargs = _declared(cls, label, given)
    else:
        kwargs = {k: _parse_loose(v) for k, v in given.items()}
    try:
        # Types first: a compiled constructor would refuse a wrong type in its own words.
        check_params(cls.PARAMS, kwargs)
        return cls.create(**kwargs)
    except (ValueError, TypeError) as e:
        raise UsageError(f"policy {label!r}: {e}") from e
    except Exception as e:
        raise UsageError(f"policy {label!r} failed to start: {type(e).__name__}: {e}") from e


def config_label(name: str, params: Mapping[str, object]) -> str:
    """A policy and the parameters it was given, as one line: ``fcfs max_num_seqs=16``."""
    return " ".join([name, *(f"{k}={v}" for k, v in params.items())])


def describe_policy(name: str, cls: type[Scheduler], origin: str) -> dict[str, Any]:
    """Name, origin, declared parameters and rule of a policy, as plain data."""
    doc = vars(cls).get("RULE") or inspect.getdoc(cls) or ""
    return {
        "name": name,
        "origin": origin,
        "class": f"{cls.__module__}:{cls.__qualname__}",
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
    }


def describe_policies() -> list[dict[str, Any]]:
    """Every registered policy, built-ins first, then the request-level ones (with a note
    when their runtime is missing); a plugin that cannot load is an error."""
    found = [describe_policy(s.name, s.load(), s.origin) for s in policy_sources().values()]
    for name in REQUEST_POLICIES:
        cls = request_class(name)
        described = describe_policy(name, cls, "built-in, request-level")
        missing = cls.available() if hasattr(cls, "available") else None
        if missing is not None:
            described["note"] = missing
        found.append(described)
    return found


DEFAULT_POLICY = "decode-first"


class RecordedPolicy(NamedTuple):
    """What a trace's header says it was recorded under (line 1, usually)."""

    line: int
    policy: str | None
    params: dict[str, object]
    recorded_class: str | None = None  # meta.class: an older recording's nameless class


def policy_for_trace(
    recorded: RecordedPolicy | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None],
) -> tuple[Scheduler, str, dict[str, object]]:
    """The policy a trace replays under, built: the command line's (``policy``), else the
    header's, else decode-first; and its label and the parameters that were applied.

    The header's params apply to whichever policy is chosen, each one the policy declares;
    the rest are named in one ``note`` (an error for the header's own policy, whose header
    then names a parameter it does not have). A plugin that declares no parameters takes
    them all only when it is the header's own policy. ``params`` (the command line's)
    override them key by key. Without ``policy``, a recorded policy that does not load, or a
    nameless recorded class, is bad input naming what was recorded.
    """
    header_policy = (recorded.policy if recorded else None) or DEFAULT_POLICY
    spec = policy or header_policy
    if policy is None and recorded is not None:
        cls = _recorded_class(recorded, trace_name)
    else:
        cls = resolve_policy(spec)
    header_params = dict(recorded.params) if recorded else {}
    line = recorded.line if recorded else None
    merged = header_params_for(cls, spec, header_policy, header_params, trace_name, line, note)
    from_header = bool(merged)
    merged.update(params)
    try:
        built = build_policy(spec, merged, cls)
    except UsageError as e:
        if recorded is not None and from_header and not params:
            raise InputError(trace_name, recorded.line, str(e)) from None
        raise
    used = built.params() if built.PARAMS else merged
    return built, built.name or spec, {k: v for k, v in used.items() if k in merged}


def header_params_for(
    cls: Any,
    spec: str,
    header_policy: str | None,
    header_params: Mapping[str, object],
    trace_name: str,
    line: int | None,
    note: Callable[[str], None],
) -> dict[str, object]:
    """The trace header's params that apply to policy ``cls`` (named ``spec``), at either
    level: each one it declares; the rest named in one ``note``, or an error at the header
    when ``cls`` is the header's own policy. A class that declares none takes them all only
    when it is the header's own."""
    if not header_params:
        return {}
    merged: dict[str, object] = {}
    if cls.PARAMS:
        declared = {p.name for p in cls.PARAMS}
        merged = {k: v for k, v in header_params.items() if k in declared}
    elif spec == header_policy:
        merged = dict(header_params)
    ignored = [k for k in header_params if k not in merged]
    if ignored and spec == header_policy:
        names = [p.name for p in cls.PARAMS]
        hint = difflib.get_close_matches(ignored[0], names, n=1)
        did_you_mean = f"did you mean {hint[0]!r}? " if hint else ""
        raise InputError(
            trace_name,
            line,
            f"header param {ignored[0]!r} is not a parameter of policy {spec!r} "
            f"({did_you_mean}it takes {', '.join(names)})",
        )
    if ignored:
        note(
            f"note: {cls.name or spec!r} does not take the trace header's "
            f"{', '.join(ignored)}; not applied"
        )
    return merged


def _recorded_class(recorded: RecordedPolicy, trace_name: str) -> type[Scheduler]:
    """The header's policy: one that does not load here, or a recording's unnamed class,
    is bad input naming what was recorded (replaying it under decode-first instead would
    answer another question)."""
    if recorded.policy is None and recorded.recorded_class is not None:
        raise InputError(
            trace_name,
            recorded.line,
            f"recorded under policy class {recorded.recorded_class}, which has no registered "
            f"name; replay it with -p {recorded.recorded_class}",
        )
    spec = recorded.policy or DEFAULT_POLICY
    try:
        return resolve_policy(spec)
    except UsageError as e:
        raise InputError(
            trace_name,
            recorded.line,
            f"recorded under policy {spec!r}, which does not load here ({e}); name a "
            "policy with -p",
        ) from None
