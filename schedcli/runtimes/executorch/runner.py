"""``simulate -p cxx-runner:NAME``: ExecuTorch's own ``batching::Runner`` in the loop.

The checkout's runner.cpp and metrics.cpp are built with our driver (runner_driver.cpp,
package data) and the scheduler ``cxx:NAME`` names, into one program (``build.py``: on
first use, cached by what it read), and run as a child process: a crash there is the
run's verdict (exit 3), never this process's end. The driver feeds the runner the
workload through a fake executor and records the scheduler's calls with schedcli's recorder
(docs/cxx.md, "The runner in the loop"). What it wrote is copied out here, its header
given the run's meta, and marked partial when the run did not end.

A checkout whose runner is of another shape is bad input (exit 2) naming what it lacks:
a file the runner needs, or the first declaration the driver cannot build against (the
driver's own static assertions say which, before anything else is compiled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

import orjson

from ...formats.workload import Request
from ...model.errors import InvariantError, UsageError
from ...model.limits import INT_MAX, INT_MIN
from ...streams.interrupt import Stopped, whole_write
from . import build as cxx_build
from . import include_dir
from .spec import PREFIX as CXX
from .spec import CxxSpec, resolve

PREFIX = "cxx-runner:"
# What the runner mode compiles from the checkout, and what it includes from there.
NEEDED = ("runner.h", "runner.cpp", "executor.h", "metrics.h", "metrics.cpp")
BATCHING = Path("extension") / "llm" / "batching"
SHAPE = "pytorch/executorch 152bb8a7's runner.h, executor.h and payload types.h"
FLAGS = ("-std=c++17", "-O2", "-fPIE", "-pie", "-pthread")
BAD_INPUT, STUCK = 2, 5  # the driver's exit codes (runner_driver.cpp)
REASONS = ("pending", "stop token", "token limit", "cancelled", "failed")


@dataclass(frozen=True)
class Outcome:
    """One request's end, in simulated seconds and steps (-1: never)."""

    reason: str
    produced: int
    arrival_step: int
    first_dispatch: float
    first_dispatch_step: int
    first_token: float
    first_token_step: int
    last_token: float
    last_token_step: int
    message: str = ""


@dataclass
class RunnerRun:
    """What the driver reports: the runner's chunk size, the run's totals, each request's
    outcome in workload order."""

    chunk: int
    steps: int = 0
    batch_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    end: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)


def spec_of(name: str) -> CxxSpec:
    """The scheduler ``cxx-runner:BODY`` runs the runner with: ``cxx:BODY``'s spec."""
    return resolve(CXX + name[len(PREFIX) :])


def checkout(spec: CxxSpec, name: str) -> Path:
    """The ExecuTorch checkout the compiler reads ``<executorch/...>`` from, with every
    file the runner needs (else bad input naming the first one missing)."""
    if not spec.system_dirs:
        raise UsageError(
            f"policy {name!r} runs ExecuTorch's batching Runner from a checkout: say where "
            "it is with --executorch PATH, $EXECUTORCH_ROOT, or [tool.schedcli.cxx] executorch"
        )
    # The checkout itself (the include folder may hold a link to it: spec.include_root).
    root = (Path(spec.system_dirs[0]) / "executorch").resolve()
    for needed in NEEDED:
        if not (root / BATCHING / needed).is_file():
            raise UsageError(
                f"{root}: policy {name!r} needs ExecuTorch's batching Runner, and the "
                f"checkout has no {BATCHING / needed} (a checkout from before the runner, "
                f"or of another shape; schedcli drives {SHAPE})"
            )
    return root


def _source(spec: CxxSpec) -> str:
    """The driver's source: the scheduler's header and factory, then runner_driver.cpp."""
    driver = resources.files(__package__).joinpath("runner_driver.cpp").read_text("utf-8")
    header = spec.header if spec.header.startswith("<") else f'"{spec.header}"'
    # shape.h first: an interface shape it does not know is refused in its words, before
    # the scheduler's header fails on it in the compiler's.
    lines = ["#include <schedcli/shape.h>", f"#include {header}", "#include <cstddef>"]
    lines.append("static auto schedcli_factory(const std::size_t* schedcli_params) {")
    call = ", ".join(
        f"schedcli_params[{i}]" if n is not None else f"{v}u" for i, (n, v) in enumerate(spec.args)
    )
    lines.append(f"  return {spec.callee}({call});")
    lines.append("}")
    return "\n".join(lines) + "\n" + driver


def program(spec: CxxSpec, name: str, note: Callable[[str], None]) -> Path:
    """The driver built with the checkout's runner (from the cache when nothing it read
    changed); a build that fails in the checkout's files or the driver's shape checks is
    bad input saying the runner is of another shape."""
    root = checkout(spec, name)
    units = [("runner_driver.cpp", _source(spec))]
    for unit in ("runner.cpp", "metrics.cpp"):  # found on -isystem: their warnings not ours
        units.append((f"executorch_{unit}", f"#include <executorch/{BATCHING / unit}>\n"))
    build = cxx_build.Build(
        tuple(units),
        (*spec.include_dirs, include_dir()),
        (*FLAGS, *spec.flags),
        "schedcli-runner",
        f"ExecuTorch's runner with {CXX}{name[len(PREFIX) :]}",
        spec.system_dirs,
    )
    try:
        return cxx_build.built(build, note)
    except UsageError as e:
        said = str(e)
        if "schedcli: " in said or str(root) in said:
            raise UsageError(
                f"{root}: its batching Runner is not of the shape policy {name!r} drives "
                f"({SHAPE}): {said.removeprefix('the C++ build failed: ')}"
            ) from None
        raise UsageError(f"policy {name!r}: {said}") from None


def factory_values(spec: CxxSpec, settled: Mapping[str, Any]) -> dict[str, int]:
    """The factory's parameters from ``settled``: every parameter of the ``cxx:`` policy
    the spec names, ``-P`` over its defaults, checked as ``cxx:`` checks them (by the
    catalog, above this layer)."""
    return {n: int(settled[n]) for n, _ in spec.params}


def run(
    exe: Path,
    spec: CxxSpec,
    values: Mapping[str, int],
    requests: Sequence[Request],
    cost: tuple[float, float, float, float],
    trace: IO[bytes] | None,
    meta: dict[str, Any],
) -> RunnerRun:
    """Run the driver over ``requests`` (the workload's, in order) and copy its trace into
    ``trace`` (header meta ``meta``; the run's end otherwise marked partial). A stop
    signal stops the driver too and is raised again; a driver that crashed, was killed or
    found the scheduler stuck is InvariantError (exit 3)."""
    label = spec.name
    with tempfile.TemporaryDirectory(prefix="schedcli-runner-") as work:
        folder = Path(work)
        given, recorded, results = folder / "input", folder / "trace", folder / "results"
        given.write_text(_input(spec, values, requests, cost))
        argv = [str(exe), str(given), str(recorded), str(results), str(os.getpid())]
        stopped: Stopped | None = None
        with subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        ) as child:
            try:
                _, err = child.communicate()
            except Stopped as e:  # ours: the child is stopped as we are, then we go
                stopped = e
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(e.signum)
                child.wait()
                err = b""
        said = err.decode(errors="replace").strip().splitlines()
        last = said[-1] if said else ""
        code = child.returncode
        if stopped is None and code in (-signal.SIGINT, -signal.SIGTERM):
            try:  # a stop sent to the process group reaches this process too: let it land
                time.sleep(0.05)
            except Stopped as e:
                stopped = e
        failure: BaseException | None = stopped
        if failure is None and code != 0:
            failure = _failure(label, code, last)
        with whole_write():  # a stop now is raised after the copy, never inside it
            _copy_trace(recorded, trace, meta, failure)
        if failure is not None:
            raise failure
        return _results(results)


def _failure(label: str, code: int, said: str) -> BaseException:
    if code == BAD_INPUT:
        return UsageError(f"policy {label!r} in ExecuTorch's runner: {said}")
    if code == STUCK:
        return InvariantError(
            f"policy {label!r} broke the Scheduler contract in ExecuTorch's runner: {said}"
        )
    if code < 0:
        how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
    else:
        how = f"ended with exit status {code}"
    return InvariantError(
        f"ExecuTorch's runner with policy {label!r} {how}: the runner, the scheduler or "
        f"schedcli's driver crashed, or the process was killed from outside"
        + (f" (its last words: {said})" if said else "")
    )


def _input(
    spec: CxxSpec,
    values: Mapping[str, int],
    requests: Sequence[Request],
    cost: tuple[float, float, float, float],
) -> str:
    """The driver's input: the header's policy and params, the factory's arguments in order,
    the cost model, then each request: its session id (the sid when every sid is an integer
    of 64 bits, else its place from 1), arrival, cancel time (-1: none), prompt, output."""
    args = [values[n] if n is not None else v for n, v in spec.args]
    numbered = all(type(r.sid) is int and INT_MIN <= r.sid <= INT_MAX for r in requests)
    lines = [
        "schedcli-runner-input 1",
        spec.name,
        orjson.dumps(dict(values)).decode(),
        " ".join([str(len(args)), *map(str, args)]),
        " ".join(repr(float(c)) for c in cost),
        str(len(requests)),
    ]
    for i, r in enumerate(requests):
        sid = r.sid if numbered else i + 1
        cancel = r.arrival + r.cancel_after if r.cancel_after is not None else -1.0
        lines.append(f"{sid} {r.arrival!r} {cancel!r} {r.prompt_tokens} {r.output_tokens}")
    return "\n".join(lines) + "\n"


def _copy_trace(
    recorded: Path, out: IO[bytes] | None, meta: dict[str, Any], failure: BaseException | None
) -> None:
    """The recorder's trace into ``out``: its header's meta joined by ``meta``, its lines as
    written (a line the run cut short dropped), and a partial marker if the run failed."""
    if out is None:
        return
    try:
        data = recorded.read_bytes()
    except OSError:
        data = b""
    lines = data.split(b"\n")
    whole = lines[:-1]  # the last piece is empty after a whole line, else cut short
    header: dict[str, Any] = {"schedcli": 1}
    if whole:
        with contextlib.suppress(orjson.JSONDecodeError):
            first = orjson.loads(whole[0])
            if isinstance(first, dict) and "schedcli" in first:
                header = first
                whole = whole[1:]
    header["meta"] = {**(header.get("meta") or {}), **meta}
    out.write(orjson.dumps(header) + b"\n")
    for line in whole:
        out.write(line + b"\n")
    if failure is not None:
        reason = failure.reason if isinstance(failure, Stopped) else str(failure)
        out.write(orjson.dumps({"partial": {"reason": reason}}) + b"\n")


def _results(path: Path) -> RunnerRun:
    run = RunnerRun(chunk=0)
    messages: dict[int, str] = {}
    for line in path.read_text().splitlines()[1:]:
        kind, _, rest = line.partition(" ")
        if kind == "chunk":
            run.chunk = int(rest)
        elif kind == "totals":
            steps, tokens, prefill, decode, end = rest.split()
            run.steps, run.batch_tokens = int(steps), int(tokens)
            run.prefill_tokens, run.decode_tokens, run.end = int(prefill), int(decode), float(end)
        elif kind == "m":
            number, _, message = rest.partition(" ")
            messages[int(number)] = message
        elif kind == "r":
            f = rest.split()
            run.outcomes.append(
                Outcome(
                    REASONS[int(f[1])],
                    int(f[2]),
                    int(f[3]),
                    float(f[4]),
                    int(f[5]),
                    float(f[6]),
                    int(f[7]),
                    float(f[8]),
                    int(f[9]),
                )
            )
    for place, message in messages.items():
        run.outcomes[place] = dataclasses.replace(run.outcomes[place], message=message)
    return run
