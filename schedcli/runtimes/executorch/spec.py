"""What a ``cxx:`` policy names: a C++ header, the factory call that builds its scheduler,
and where the compiler looks (docs/cxx.md).

A spec is one line, ``HEADER=FACTORY(ARGS)``: ARGS are ``name=default`` (a parameter,
given with ``-P name=value``) or integer literals, passed in order. It is given inline
(``-p 'cxx:fifo.h=Fifo::create(max_batch_tokens=512)'``) or named in ``pyproject.toml``::

    [tool.schedcli.cxx]
    executorch = "../executorch"        # the checkout; $EXECUTORCH_ROOT and --executorch win
    include = ["cxx/include"]           # more folders on the include path
    flags = ["-O3"]                     # more compiler flags ($CXXFLAGS are added too)

    [tool.schedcli.cxx.policies]
    fifo = "cxx/fifo.h=FifoScheduler::create(max_batch_tokens=512, max_batch_size=8)"

``cxx:decode-first`` is ExecuTorch's own ``DecodeFirstScheduler`` from the checkout.
A sweep hands its workers the resolved spec in the environment (``worker_env``), so that
they build the very same one wherever they start.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...model.errors import UsageError
from ...model.limits import INT_MAX
from ...model.project import check_keys, schedcli_section

PREFIX = "cxx:"
ENV_SPEC = "SCHEDCLI_CXX_SPEC_"  # + the name's digest: a spec resolved by a sweep's parent
ENV_ROOT = "EXECUTORCH_ROOT"
SECTION = "[tool.schedcli.cxx]"
KEYS = ("executorch", "include", "flags", "policies")
CHECKOUT_MARK = "extension/llm/batching/scheduler.h"

BUILTINS = {
    "decode-first": (
        "<executorch/extension/llm/batching/decode_first_scheduler.h>",
        "executorch::extension::llm::batching::DecodeFirstScheduler::create("
        "max_batch_tokens=544, max_decode_sequences=32, max_prefill_chunk_size=256)",
    ),
}
ALIASES = {"decode_first": "decode-first"}


@dataclass(frozen=True)
class CxxSpec:
    """A resolved spec: absolute paths, the factory's callee and arguments in order (a
    parameter's name and default, or a literal's value with no name)."""

    name: str
    header: str
    callee: str
    args: tuple[tuple[str | None, int], ...]
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    # ExecuTorch's reference may owe a session two outputs in one batch (docs/policies.md,
    # compat=reference): for it, as for compat=reference, that is a warning, not a stop.
    known_two_outputs: bool = False

    @property
    def params(self) -> tuple[tuple[str, int], ...]:
        return tuple((n, v) for n, v in self.args if n is not None)

    @property
    def factory(self) -> str:
        """The factory call as the spec wrote it."""
        shown = [f"{n}={v}" if n is not None else str(v) for n, v in self.args]
        return f"{self.callee}({', '.join(shown)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "header": self.header,
            "callee": self.callee,
            "args": [list(a) for a in self.args],
            "include_dirs": list(self.include_dirs),
            "flags": list(self.flags),
            "known_two_outputs": self.known_two_outputs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CxxSpec:
        return cls(
            data["name"],
            data["header"],
            data["callee"],
            tuple((n, int(v)) for n, v in data["args"]),
            tuple(data["include_dirs"]),
            tuple(data["flags"]),
            bool(data.get("known_two_outputs", False)),
        )


_CALL = re.compile(r"^\s*(?P<callee>[A-Za-z_][\w:<>, ]*?)\s*\((?P<args>[^()]*)\)\s*$")
_ARG = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)\s*=\s*)?(?P<value>\d+)$")


def parse_line(name: str, line: str, base: Path, where: str) -> tuple[str, str, tuple[Any, ...]]:
    """``HEADER=FACTORY(ARGS)`` as (absolute header, callee, args); ``where`` names the
    option or key in a message."""
    header, sep, call = line.partition("=")
    if not sep or not header.strip():
        raise UsageError(
            f"{where}: a C++ policy is HEADER=FACTORY(ARGS), e.g. "
            f"'fifo.h=FifoScheduler::create(max_batch_tokens=512)', not {line!r}"
        )
    match = _CALL.match(call)
    if match is None:
        raise UsageError(
            f"{where}: {call.strip()!r} is not a factory call NAME(ARGS) (ARGS: name=default "
            "or integer literals, comma-separated)"
        )
    args: list[tuple[str | None, int]] = []
    text = match["args"].strip()
    for part in text.split(",") if text else []:
        arg = _ARG.match(part.strip())
        if arg is None:
            raise UsageError(
                f"{where}: factory argument {part.strip()!r} is not name=INTEGER or an INTEGER"
            )
        value = int(arg["value"])
        if value > INT_MAX:
            raise UsageError(f"{where}: factory argument {part.strip()!r} is past 64 bits")
        args.append((arg["name"], value))
    names = [n for n, _ in args if n is not None]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: a factory parameter is named twice in {call.strip()!r}")
    head = header.strip()
    path = head if head.startswith("<") else str((base / Path(head).expanduser()).resolve())
    if not head.startswith("<") and not Path(path).is_file():
        raise UsageError(f"{where}: no such header {path}")
    return path, match["callee"].strip(), tuple(args)


def _config(cwd: Path) -> tuple[Path | None, dict[str, Any]]:
    file, section = schedcli_section(cwd)
    if file is None:
        return None, {}
    table = section.get("cxx", {}) if isinstance(section, dict) else {}
    if not isinstance(table, dict):
        raise UsageError(f"{file}: {SECTION} must be a table, not {table!r}")
    check_keys(file, SECTION, table, KEYS)
    return file, table


def _strings(file: Path, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{file}: {SECTION} {key} must be a list of strings, not {value!r}")
    return list(value)


def executorch_root(
    env: Mapping[str, str], file: Path | None, table: dict[str, Any]
) -> Path | None:
    """The ExecuTorch checkout: ``--executorch`` (which sets the variable), else
    ``$EXECUTORCH_ROOT``, else the configuration's ``executorch``; checked to be one."""
    given = env.get(ENV_ROOT)
    where = f"${ENV_ROOT} (or --executorch)"
    if given:
        root = Path(given).expanduser()
    elif file is not None and "executorch" in table:
        value = table["executorch"]
        if not isinstance(value, str):
            raise UsageError(f"{file}: {SECTION} executorch must be a path, not {value!r}")
        root, where = file.parent / Path(value).expanduser(), f"{file}: {SECTION} executorch"
    else:
        return None
    root = root.resolve()
    if not (root / CHECKOUT_MARK).is_file():
        raise UsageError(
            f"{where}: {root} is not an ExecuTorch checkout (it has no {CHECKOUT_MARK})"
        )
    return root


def resolve(name: str, env: Mapping[str, str] = os.environ, cwd: Path | None = None) -> CxxSpec:
    """The spec ``cxx:...`` names: as a worker was handed it, else built-in, named in the
    configuration, or inline."""
    shipped = env.get(_env_key(name))
    if shipped:
        return CxxSpec.from_json(orjson.loads(shipped))
    body = name[len(PREFIX) :]
    here = cwd or Path.cwd()
    file, table = _config(here)
    root = executorch_root(env, file, table)
    base = file.parent if file is not None else here
    includes: list[str] = []
    flags: list[str] = []
    if file is not None:
        folders = _strings(file, "include", table.get("include", []))
        includes = [str((base / d).resolve()) for d in folders]
        flags = _strings(file, "flags", table.get("flags", []))
    flags += shlex.split(env.get("CXXFLAGS", ""))
    body = ALIASES.get(body, body)
    if body in BUILTINS:
        if root is None:
            raise UsageError(
                f"policy {name!r} builds ExecuTorch's own scheduler: say where the checkout "
                f"is with --executorch PATH, ${ENV_ROOT}, or {SECTION} executorch"
            )
        line, where = "=".join(BUILTINS[body]), f"policy {name!r}"
    elif "=" in body:
        line, where = body, f"--policy {name!r}"
    else:
        policies = table.get("policies", {}) if file is not None else {}
        if not isinstance(policies, dict) or body not in policies:
            known = ", ".join(PREFIX + n for n in [*BUILTINS, *(policies or {})])
            raise UsageError(
                f"unknown C++ policy {name!r}: name one of {known}, configure it in "
                f"{SECTION} policies, or give HEADER=FACTORY(ARGS) inline"
            )
        line, where = policies[body], f"{file}: {SECTION} policies.{body}"
        if not isinstance(line, str):
            raise UsageError(f"{where} must be a string HEADER=FACTORY(ARGS), not {line!r}")
    header, callee, args = parse_line(name, line, base, where)
    if root is not None:
        includes.append(str(root.parent))
    if not header.startswith("<"):
        includes.insert(0, str(Path(header).parent))
    spec = CxxSpec(
        name, header, callee, args, tuple(dict.fromkeys(includes)), tuple(flags), body in BUILTINS
    )
    return spec


def worker_env(spec: CxxSpec) -> dict[str, str]:
    """The environment a worker process needs to resolve ``spec`` as this one did."""
    return {_env_key(spec.name): orjson.dumps(spec.to_json()).decode()}


def _env_key(name: str) -> str:
    return ENV_SPEC + hashlib.sha256(name.encode()).hexdigest()[:16]


def configured(cwd: Path | None = None) -> list[str]:
    """The ``cxx:`` names the configuration and the built-ins offer (for ``policies``)."""
    file, table = _config(cwd or Path.cwd())
    policies = table.get("policies", {}) if file is not None else {}
    names = list(BUILTINS)
    if isinstance(policies, dict):
        names += [n for n in policies if n not in BUILTINS]
    return [PREFIX + n for n in names]
