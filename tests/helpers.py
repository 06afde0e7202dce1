"""Small builders shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from schedcli import DecodeFirstScheduler, Task
from schedcli.app.inprocess import run_cli_in_process
from schedcli.model.task import Id

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
# The real public traces: $SCHEDCLI_TRACES_REAL, else ../shared/traces-real beside the clone.
REAL = Path(os.environ.get("SCHEDCLI_TRACES_REAL") or ROOT.parent / "shared" / "traces-real")
# A test that reads them skips where they are absent (a fresh clone on its own), unless
# SCHEDCLI_REQUIRE_REAL is set, as CI sets it: then it runs, and fails without them.
REQUIRE_REAL = bool(os.environ.get("SCHEDCLI_REQUIRE_REAL"))
needs_real = pytest.mark.skipif(
    not REAL.is_dir() and not REQUIRE_REAL,
    reason=f"the real traces folder {REAL} is absent (CI provides it)",
)
EXAMPLES = sorted(TRACES.glob("*.jsonl"))
# The one switch that rewrites every golden the tests compare with (then review the diff).
UPDATE_GOLDENS = bool(os.environ.get("SCHEDCLI_UPDATE_GOLDEN"))


def make(d: int, c: int) -> DecodeFirstScheduler:
    """The spec's make(D, C): max_batch_tokens = 2C + D."""
    return DecodeFirstScheduler(2 * c + d, d, c)


def pf(tid: Id, sid: Id, size: int) -> Task:
    return Task(tid, sid, "prefill", size)


def dc(tid: Id, sid: Id) -> Task:
    return Task(tid, sid, "decode", 1)


def ids(batch: Sequence[Task]) -> list[Id]:
    return [t.tid for t in batch]


def run_cli(
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``schedcli ARGS``: in this process, unless it needs one of its own.

    An ``env`` (a hash seed, a plugin path) or a ``cwd`` needs a real process;
    everything else runs ``main`` here, which is several times faster.
    """
    if env is not None or cwd is not None:
        return run_process(*args, input=input, env=env, cwd=cwd, timeout=timeout)
    return run_in_process(*args, input=input)


def refused(r: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """``r``'s stderr, asserted an exit 2 that says each of ``needles``, never a traceback."""
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "internal error" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def located(r: subprocess.CompletedProcess[bytes], path: Path) -> str:
    """``r``'s stderr, asserted an exit 2 whose message starts ``PATH:``."""
    err = refused(r)
    assert err.startswith(f"{path}:"), err
    return err


def run_in_process(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    run = run_cli_in_process(args, input=input or b"", columns=120)
    return subprocess.CompletedProcess(list(args), run.code, run.stdout, run.stderr)


def run_process(
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``schedcli`` in a subprocess (signals, pipes, hash seeds, plugins)."""
    full_env = dict(os.environ)
    full_env.pop("FORCE_COLOR", None)
    full_env["COLUMNS"] = "120"
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "schedcli", *args],
        input=input,
        capture_output=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=timeout,
        check=False,
    )


# The request level in the default run, without vLLM: tests/doubles' toy policy, given with
# -p as TOY, and named in a trace header as "toy", which tests/conftest.py registers (a
# trace names a policy that is installed or configured, never an import string).
TOY = "tests.doubles:ToyRequests"
TOY_NAME = "toy-requests"  # its name, as ToyRequests.name says
TOY_WHERE = "tests.doubles.requests:ToyRequests"
REQUEST_HEADER = {"schedcli": 1, "level": "request", "policy": TOY_NAME, "params": {}}


def write_lines(path: Path, lines: Sequence[dict[str, object]]) -> Path:
    """``lines`` as compact JSONL at ``path``."""
    import json

    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return path


def request_trace(tmp_path: Path, expect_first: dict[str, object] | None = None) -> Path:
    """A request-level trace: two requests, three steps; the first step's expect as given."""
    step: dict[str, object] = {"op": "step"}
    if expect_first is not None:
        step["expect"] = expect_first
    return write_lines(
        tmp_path / "r.jsonl",
        [
            REQUEST_HEADER,
            {"op": "arrive", "rid": "a", "prompt_tokens": 8, "max_tokens": 2},
            {"op": "arrive", "rid": "b", "prompt_tokens": 8, "max_tokens": 2},
            step,
            {"op": "step"},
            {"op": "step"},
        ],
    )


def task_trace(tmp_path: Path) -> Path:
    """A task-level trace: three steps, an expect on the first only."""
    return write_lines(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 3},
            {"op": "get_work", "expect": [1]},
            {"op": "submit", "tid": 2, "sid": 1, "kind": "decode", "size": 1},
            {"op": "get_work"},
            {"op": "get_work"},
        ],
    )


def lines_from_the_other_core(module: str, function: str, arg: int) -> list[bytes]:
    """The lines ``module.function(arg)`` gives (each bytes) in a process running the
    other core (pure Python here compiled, compiled here pure); the test is skipped where
    the other core is not built."""
    from schedcli._compiled import CORE, PURE_ENV

    env = dict(os.environ)
    pure_here = "pure" in CORE
    if pure_here:
        env.pop(PURE_ENV, None)
    else:
        env[PURE_ENV] = "1"
    script = (
        "import sys\n"
        "from schedcli._compiled import CORE\n"
        f"from {module} import {function}\n"
        "sys.stdout.write(CORE + '\\n')\n"
        f"for line in {function}({arg}):\n"
        "    sys.stdout.buffer.write(line + b'\\n')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, check=True
    )
    core, _, body = run.stdout.partition(b"\n")
    if ("pure" in core.decode()) == pure_here:
        pytest.skip(f"the other core is not here ({core.decode()})")
    return body.splitlines()
