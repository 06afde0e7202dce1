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
    # The folder above the ExecuTorch checkout: a dependency's headers (-isystem), whose
    # own warnings are not ours to fail a -Werror build on.
    system_dirs: tuple[str, ...] = ()

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
            "system_dirs": list(self.system_dirs),
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
            tuple(data.get("system_dirs", ())),
        )


MAX_SPEC = 4096  # characters: a spec is one line a person writes
MAX_DIGITS = 20  # an argument's digits: past 64 bits is refused by value anyway


def parse_line(name: str, line: str, base: Path, where: str) -> tuple[str, str, tuple[Any, ...]]:
    """``HEADER=FACTORY(ARGS)`` as (absolute header, callee, args), by a strict grammar (the
    header is one path or one ``<name>``, the factory a qualified C++ name, each argument
    ``name=INTEGER`` or an ``INTEGER``); ``where`` names the option or key in a message.

    Invariant: what the generated C++ holds of a spec is only what this grammar produced
    (the callee is rebuilt from its tokens), so no spec can put other code before the
    compiler. Linear in the line's length, which is bounded."""
    if len(line) > MAX_SPEC:
        raise UsageError(
            f"{where}: a C++ policy spec is one line of at most {MAX_SPEC} characters, not "
            f"{len(line)}"
        )
    bad = next((c for c in line if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise UsageError(
            f"{where}: a C++ policy spec is one line of printable characters; it holds {bad!r}"
        )
    header, sep, call = line.partition("=")
    if not sep or not header.strip():
        raise UsageError(
            f"{where}: a C++ policy is HEADER=FACTORY(ARGS), e.g. "
            f"'fifo.h=FifoScheduler::create(max_batch_tokens=512)', not {_short(line)!r}"
        )
    callee, args = _Call(call, where).parse()
    names = [n for n, _ in args if n is not None]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: a factory parameter is named twice in {_short(call.strip())!r}")
    return _header(header.strip(), base, where), callee, tuple(args)


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


# What #include cannot hold in a header name (C++ [lex.header]: a quote, a newline, the
# other delimiter; ' \ // /* are conditionally supported): refused, never escaped.
_NOT_IN_HEADER = ('"', "'", "<", ">", "\\", "//", "/*")


def _header(head: str, base: Path, where: str) -> str:
    """The header as the generated ``#include`` names it: ``<name>`` as given, or the
    absolute path of a file that exists."""
    if head.startswith("<") and head.endswith(">") and len(head) > 2:
        inner = head[1:-1]
        if any(bad in inner for bad in _NOT_IN_HEADER) or inner != inner.strip():
            raise UsageError(f"{where}: {_short(head)!r} is not one <header> name")
        return head
    if any(bad in head for bad in _NOT_IN_HEADER[:4]):
        raise UsageError(
            f"{where}: the header {_short(head)!r} is one path or one <name>, with no quote "
            "or angle bracket"
        )
    try:
        path = str((base / expand_user(Path(head), where)).resolve())
    except (OSError, ValueError) as e:
        raise UsageError(f"{where}: the header {_short(head)!r}: {e}") from None
    if any(bad in path for bad in _NOT_IN_HEADER) or any(ord(c) < 32 for c in path):
        raise UsageError(
            f"{where}: the header's path {path!r} has a character an #include cannot hold "
            f"(one of {' '.join(_NOT_IN_HEADER)} or a control character)"
        )
    if not Path(path).is_file():
        raise UsageError(f"{where}: no such header {path}")
    return path


def expand_user(path: Path, where: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; an unknown user is bad usage."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise UsageError(f"{where}: {str(path)!r}: no such user's home folder") from None


class _Call:
    """A scanner over ``FACTORY(ARGS)``: one pass, each character looked at once or twice.

    call   := name '(' [arg (',' arg)*] ')'
    name   := ['::'] part ('::' part)*
    part   := IDENT ['<' targ (',' targ)* '>']
    targ   := name | DIGITS
    arg    := [IDENT '='] DIGITS
    (spaces allowed between tokens; nothing else)"""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where, self.at = text, where, 0

    def parse(self) -> tuple[str, list[tuple[str | None, int]]]:
        callee = self.name(depth=0)
        self.expect("(")
        args: list[tuple[str | None, int]] = []
        self.space()
        if self.peek() != ")":
            args.append(self.arg())
            while self.take(","):
                args.append(self.arg())
        self.expect(")")
        self.space()
        if self.at != len(self.text):
            self.fail(f"{_short(self.text[self.at :])!r} after the factory call")
        return callee, args

    def fail(self, what: str) -> None:
        raise UsageError(
            f"{self.where}: {_short(self.text.strip())!r} is not a factory call NAME(ARGS) "
            f"({what}; NAME a qualified C++ name such as ns::Fifo::create or "
            "std::make_unique<ns::Fifo>, ARGS name=INTEGER or INTEGER, comma-separated)"
        )

    def space(self) -> None:
        while self.at < len(self.text) and self.text[self.at] == " ":
            self.at += 1

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self, token: str) -> bool:
        self.space()
        if self.text.startswith(token, self.at):
            self.at += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            self.fail(f"{token!r} expected at column {self.at + 1}")

    def ident(self) -> str:
        self.space()
        start = self.at
        if self.peek().isascii() and (self.peek().isalpha() or self.peek() == "_"):
            self.at += 1
            while self.at < len(self.text) and (
                self.text[self.at].isascii()
                and (self.text[self.at].isalnum() or self.text[self.at] == "_")
            ):
                self.at += 1
        if self.at == start:
            self.fail(f"a name expected at column {start + 1}")
        return self.text[start : self.at]

    def digits(self) -> str:
        self.space()
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in "0123456789":
            self.at += 1
        if self.at == start:
            self.fail(f"an integer expected at column {start + 1}")
        number = self.text[start : self.at]
        if len(number) > MAX_DIGITS or int(number) > INT_MAX:
            raise UsageError(f"{self.where}: factory argument {_short(number)!r} is past 64 bits")
        return number

    def name(self, depth: int) -> str:
        if depth > 8:
            self.fail("template arguments nested too deep")
        out = "::" if self.take("::") else ""
        while True:
            out += self.ident()
            if self.take("<"):
                targs = [self.targ(depth)]
                while self.take(","):
                    targs.append(self.targ(depth))
                self.expect(">")
                out += "<" + ", ".join(targs) + ">"
            if not self.take("::"):
                return out
            out += "::"

    def targ(self, depth: int) -> str:
        self.space()
        return self.digits() if self.peek().isdigit() else self.name(depth + 1)

    def arg(self) -> tuple[str | None, int]:
        self.space()
        if self.peek().isdigit():
            return None, int(self.digits())
        name = self.ident()
        self.expect("=")
        return name, int(self.digits())


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
    for v in value:
        _printable(v, f"{file}: {SECTION} {key}")
    return list(value)


def _printable(value: str, where: str) -> str:
    """``value`` (a path or a flag) with no NUL or other control character in it."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{where}: {value!r} holds a control character")
    return value


def _folder(base: Path, value: str, where: str) -> Path:
    """A configured folder, absolute."""
    try:
        return (base / expand_user(Path(_printable(value, where)), where)).resolve()
    except (OSError, ValueError) as e:
        raise UsageError(f"{where}: {value!r}: {e}") from None


def include_root(root: Path, env: Mapping[str, str] = os.environ) -> str:
    """The folder to put on the include path so that ``<executorch/...>`` opens ``root``:
    the folder above it when the checkout is named ``executorch``; else a folder of the
    build cache holding one link, ``executorch``, to it. (The folder above a checkout named
    otherwise could hold another one named ``executorch``, which would be built instead.)"""
    if root.name == "executorch":
        return str(root.parent)
    from .build import cache_root

    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    folder = cache_root(env) / "checkouts" / digest
    link = folder / "executorch"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not (link.is_symlink() and os.readlink(link) == str(root)):
            fresh = folder / f".executorch.{os.getpid()}"
            fresh.unlink(missing_ok=True)
            os.symlink(root, fresh)
            os.replace(fresh, link)  # atomic: a build beside this one sees one or the other
    except OSError as e:
        raise UsageError(f"{root}: cannot link the checkout into the build cache: {e}") from None
    return str(folder)


def executorch_root(
    env: Mapping[str, str], file: Path | None, table: dict[str, Any]
) -> Path | None:
    """The ExecuTorch checkout: ``--executorch`` (which sets the variable), else
    ``$EXECUTORCH_ROOT``, else the configuration's ``executorch``; checked to be one."""
    given = env.get(ENV_ROOT)
    where = f"${ENV_ROOT} (or --executorch)"
    if given:
        root = _folder(Path.cwd(), given, where)
    elif file is not None and "executorch" in table:
        value = table["executorch"]
        if not isinstance(value, str):
            raise UsageError(f"{file}: {SECTION} executorch must be a path, not {value!r}")
        where = f"{file}: {SECTION} executorch"
        root = _folder(file.parent, value, where)
    else:
        return None
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
        includes = [str(_folder(base, d, f"{file}: {SECTION} include")) for d in folders]
        flags = _strings(file, "flags", table.get("flags", []))
    flags += shlex.split(env.get("CXXFLAGS", ""))
    body = ALIASES.get(body, body)
    if body in BUILTINS:
        if root is None:
            raise UsageError(
                f"policy {name!r} builds ExecuTorch's own scheduler: say where the checkout "
                f"is with --executorch PATH, ${ENV_ROOT}, or {SECTION} executorch"
            )
        line, where = "=".join(BUILTINS[body]), f"policy {_short(name)!r}"
    elif "=" in body:
        line, where = body, f"--policy {_short(name)!r}"
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
    system = (include_root(root, env),) if root is not None else ()
    if not header.startswith("<"):
        includes.insert(0, str(Path(header).parent))
    spec = CxxSpec(
        name,
        header,
        callee,
        args,
        tuple(dict.fromkeys(includes)),
        tuple(flags),
        body in BUILTINS,
        system,
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
