"""Which policy a trace replays under, at either level: the command line's, else the one
its header records (with the header's parameters, by one rule), else decode-first."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

from ..model.errors import InputError, UsageError
from ..model.scheduler import Policy
from . import REQUEST_POLICIES
from .registry import (
    CXX_PREFIX,
    RUNNER_PREFIX,
    VLLM_PREFIXES,
    Level,
    build_policy,
    param_lacked,
    resolve_policy,
    settled_params,
)

DEFAULT_POLICY = "decode-first"


class RecordedPolicy(NamedTuple):
    """What a trace's header says it was recorded under (line 1, usually)."""

    line: int
    policy: str | None
    params: dict[str, object]
    recorded_class: str | None = None  # meta.class: an older recording's nameless class
    meta: dict[str, object] | None = None  # the header's meta (which runtime made it)

    @classmethod
    def of(cls, header: Any) -> RecordedPolicy | None:
        """What a trace's header (``line``, ``policy``, ``params``, ``meta``) records."""
        if header is None:
            return None
        meta = header.meta if isinstance(header.meta, dict) else {}
        named = meta.get("class")
        return cls(
            header.line,
            header.policy,
            dict(header.params),
            named if isinstance(named, str) else None,
            meta,
        )


def policy_for_trace(
    recorded: RecordedPolicy | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None],
    level: Level = "task",
) -> tuple[Policy, str, dict[str, object]]:
    """The policy a trace of ``level`` replays under, built: the command line's
    (``policy``), else the header's, else (task level) decode-first; and its label and the
    parameters that were applied.

    The header's params apply to whichever policy is chosen, each one the policy declares;
    the rest are named in one ``note`` (an error for the header's own policy, whose header
    then names a parameter it does not have). A plugin that declares no parameters takes
    them all only when it is the header's own policy. ``params`` (the command line's)
    override them key by key. Without ``policy``, a recorded policy that does not load, or a
    nameless recorded class, is bad input naming what was recorded.
    """
    cls, spec, merged, blame = _chosen(recorded, trace_name, policy, params, note, level)
    with _at_header(trace_name, blame):
        built = build_policy(spec, merged, cls, level=None)
    _note_other_runtime(recorded, type(built), built.name or spec, trace_name, note)
    used = built.params() if built.PARAMS else merged
    return built, built.name or spec, {k: v for k, v in used.items() if k in merged}


def _note_other_runtime(
    recorded: RecordedPolicy | None,
    cls: type[Policy],
    label: str,
    trace_name: str,
    note: Callable[[str], None],
) -> None:
    """A trace made by another version of the runtime the policy drives (its header's
    ``meta.vllm``, say, against ``Policy.made_by``) is replayed all the same, with a note
    naming both: where they schedule differently, --check says so at the step."""
    meta = recorded.meta if recorded is not None and recorded.meta else {}
    for key, running in cls.made_by().items():
        made = meta.get(key)
        if isinstance(made, str) and made != running:
            note(
                f"note: {trace_name} was made by {key} {made}; {label!r} runs {key} "
                f"{running}: the two versions may schedule it differently"
            )


def check_policy_for_trace(
    recorded: RecordedPolicy | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    level: Level = "task",
) -> None:
    """What ``policy_for_trace`` would refuse, said without building the policy where
    building costs (``validate``; ``Policy.settle``)."""
    cls, spec, merged, blame = _chosen(recorded, trace_name, policy, params, lambda _: None, level)
    with _at_header(trace_name, blame):
        settled_params(spec, merged, cls)


@contextmanager
def _at_header(trace_name: str, line: int | None) -> Iterator[None]:
    """A policy's refusal of parameters the header alone gave is bad input at ``line``."""
    try:
        yield
    except UsageError as e:
        if line is None:
            raise
        raise InputError(trace_name, line, str(e)) from None


def _chosen(
    recorded: RecordedPolicy | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None],
    level: Level,
) -> tuple[type[Policy], str, dict[str, object], int | None]:
    """The class a trace replays under, its spec, the parameters to build it with, and
    the header's line when the header alone gave them (a refusal is then located there)."""
    default = DEFAULT_POLICY if level == "task" else None
    header_policy = (recorded.policy if recorded else None) or default
    spec = policy or header_policy
    if spec is None:
        where = recorded.line if recorded else 1
        known = ", ".join(REQUEST_POLICIES)
        raise InputError(trace_name, where, f"a {level}-level trace names its policy ({known})")
    if policy is None and recorded is not None:
        cls = _recorded_class(recorded, trace_name, level)
    else:
        cls = resolve_policy(spec, level)
    header_params = dict(recorded.params) if recorded else {}
    line = recorded.line if recorded else None
    merged = header_params_for(cls, spec, header_policy, header_params, trace_name, line, note)
    blame = line if merged and not params else None
    merged.update(params)
    return cls, spec, merged, blame


def header_params_for(
    cls: type[Policy],
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
    # A policy whose parameters are read from the runtime it drives (vLLM's knobs) says
    # why it lacks one: a recording of another release replays here with a note.
    unexplained = [k for k in ignored if param_lacked(cls, k) is None]
    if unexplained and spec == header_policy:
        names = [p.name for p in cls.PARAMS]
        hint = difflib.get_close_matches(unexplained[0], names, n=1)
        did_you_mean = f"did you mean {hint[0]!r}? " if hint else ""
        raise InputError(
            trace_name,
            line,
            f"header param {unexplained[0]!r} is not a parameter of policy {spec!r} "
            f"({did_you_mean}it takes {', '.join(names)})",
        )
    if ignored:
        note(
            f"note: {cls.name or spec!r} does not take the trace header's "
            f"{', '.join(ignored)}; not applied{_why_lacked(cls, ignored)}"
        )
    return merged


def _why_lacked(cls: type[Policy], names: list[str]) -> str:
    """Why the policy lacks ``names``, where it says: one reason for all, or each
    reason with the names it holds for."""
    groups: dict[str, list[str]] = {}
    for name in names:
        why = param_lacked(cls, name)
        if why:
            groups.setdefault(why, []).append(name)
    if not groups:
        return ""
    if len(groups) == 1 and len(next(iter(groups.values()))) == len(names):
        return f" ({next(iter(groups))})"
    return " (" + "; ".join(f"{', '.join(ks)}: {why}" for why, ks in groups.items()) + ")"


def _named_not_supplied(spec: str, trace_name: str, line: int) -> None:
    """A trace names code, never supplies it (docs/trace-format.md, "What a trace can make
    schedcli run"): from its header a policy is built only by a name that is installed or
    configured here (a built-in, an entry point, a ``cxx:`` name the built-ins or
    ``pyproject.toml`` give), never from an inline C++ spec or an import string, which only
    the command line or the configuration may give."""
    if spec.startswith((CXX_PREFIX, RUNNER_PREFIX)) and "=" in spec:
        what = "an inline C++ spec (HEADER=FACTORY(ARGS))"
        allow = (
            "give it with -p on the command line, or name it in pyproject.toml "
            "[tool.schedcli.cxx] policies and record that name"
        )
    elif spec.startswith(VLLM_PREFIXES):
        what = "a vLLM from an interpreter or a scheduler class (vllm@PYTHON, vllm:MODULE:CLASS)"
        allow = "give it with -p on the command line"
    elif ":" in spec and not spec.startswith((CXX_PREFIX, RUNNER_PREFIX)):
        what = "an import string (module:Class)"
        allow = (
            "give it with -p on the command line, as a folder's policy in pyproject.toml "
            "[tool.schedcli], or register it as a schedcli.policies entry point"
        )
    else:
        return
    raise InputError(
        trace_name,
        line,
        f"the header names policy {_short(spec)!r}, {what}: a trace may name a policy that "
        f"is installed or configured, never supply code to build or import; to run it, {allow}",
    )


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def _recorded_class(recorded: RecordedPolicy, trace_name: str, level: Level) -> type[Policy]:
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
    _named_not_supplied(spec, trace_name, recorded.line)
    try:
        return resolve_policy(spec, level)
    except UsageError as e:
        raise InputError(
            trace_name,
            recorded.line,
            f"recorded under policy {spec!r}, which does not load here ({e}); name a "
            "policy with -p",
        ) from None
