"""The compiled core and its pure-Python fallback: same bytes out, and a switch that works.

CI builds the core and sets SCHEDCLI_REQUIRE_COMPILED, so a build that silently fell
back to pure Python fails here instead of passing slowly.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import schedcli
from schedcli import _compiled
from schedcli.policies import BUILTIN_POLICIES
from tests.helpers import REAL, REQUIRE_REAL, ROOT, run_in_process

AZURE_CONV = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
EXAMPLES = sorted(str(p) for p in (ROOT / "traces").glob("*.jsonl"))

# Runs each command line in one process; prints code, stdout and stderr of each.
RUN_ALL = """
import json, sys
from schedcli import CORE
from schedcli.app.inprocess import run_cli_in_process
out = {"core": CORE}
for argv in json.loads(sys.argv[1]):
    r = run_cli_in_process(argv)
    out[" ".join(argv)] = [r.code, r.stdout.decode("latin-1"), r.stderr.decode()]
print(json.dumps(out))
"""


def run_everything(commands: list[list[str]], pure: bool, cwd: Path) -> dict[str, object]:
    env = dict(os.environ)
    env.pop(_compiled.PURE_ENV, None)
    if pure:
        env[_compiled.PURE_ENV] = "1"
    run = subprocess.run(
        [sys.executable, "-c", RUN_ALL, json.dumps(commands)],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(run.stdout)
    return result


def replay_everything(traces: list[str], pure: bool) -> dict[str, object]:
    """Every (trace, built-in policy) replayed to a dump, in one process."""
    commands = [
        ["replay", trace, "-p", policy, "-f", "jsonl"]
        for trace in traces
        for policy in sorted(BUILTIN_POLICIES)
    ]
    return run_everything(commands, pure, ROOT)


@pytest.fixture(scope="module")
def compiled() -> None:
    if os.environ.get(_compiled.PURE_ENV):
        pytest.skip(f"pure Python on purpose ({_compiled.PURE_ENV})")
    if schedcli.CORE != "compiled" and not os.environ.get("SCHEDCLI_REQUIRE_COMPILED"):
        pytest.skip(f"the compiled core is not in use here: {schedcli.CORE}")
    assert schedcli.CORE == "compiled"


@pytest.mark.usefixtures("compiled")
def test_compiled_and_pure_python_replays_are_byte_identical(tmp_path: Path) -> None:
    traces = list(EXAMPLES)
    if AZURE_CONV.exists() or REQUIRE_REAL:  # a few thousand events of real traffic, simulated
        w, t = tmp_path / "w.jsonl", tmp_path / "azure.jsonl"
        convert = ("convert", "auto", str(AZURE_CONV), "--limit", "400", "-o", str(w))
        assert run_in_process(*convert).returncode == 0
        assert run_in_process("simulate", str(w), "-o", str(t)).returncode == 0
        traces.append(str(t))
    fast = replay_everything(traces, pure=False)
    slow = replay_everything(traces, pure=True)
    assert fast.pop("core") == "compiled"
    assert str(slow.pop("core")).startswith("pure Python")
    assert fast == slow
    assert len(fast) == len(traces) * len(BUILTIN_POLICIES)


def test_the_pure_switch_loads_no_compiled_module() -> None:
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    script = (
        "import importlib, schedcli, schedcli._compiled as c\n"
        "print(schedcli.CORE)\n"
        "for m in c.COMPILED_MODULES: print(importlib.import_module(m).__file__)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, text=True, check=True
    )
    core, *files = run.stdout.splitlines()
    assert core == f"pure Python ({_compiled.PURE_ENV} is set)"
    assert len(files) == len(_compiled.COMPILED_MODULES)
    assert all(f.endswith(".py") for f in files), files


def test_every_module_on_the_compile_list_exists() -> None:
    package = Path(schedcli.__file__).parent
    for path in _compiled.source_paths(package):
        assert path.is_file(), path


def copy_sources(tmp_path: Path) -> Path:
    package = Path(schedcli.__file__).parent
    copy = tmp_path / "schedcli"
    for path in _compiled.source_paths(package):
        target = copy / path.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return copy


def built_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The compiled modules' sources copied, with the record a build leaves beside them."""
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    copy = copy_sources(tmp_path)
    (copy / _compiled.DIGEST_FILE).write_text(_compiled.build_record(copy))
    return copy


def test_an_edited_source_is_run_as_pure_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = built_copy(tmp_path, monkeypatch)
    (copy / "engine" / "replay.py").write_text("# edited\n")
    assert _compiled._why_pure(copy) == _compiled.STALE


def test_an_edit_of_the_same_size_is_run_as_pure_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = built_copy(tmp_path, monkeypatch)
    source = copy / "engine" / "clock.py"
    text = source.read_bytes()
    before = source.stat().st_mtime_ns
    source.write_bytes(text[:-2] + b"#\n")
    os.utime(source, ns=(before + 10**9, before + 10**9))
    assert source.stat().st_size == len(text)
    assert _compiled._why_pure(copy) == _compiled.STALE


def test_a_source_rewritten_unchanged_is_trusted_by_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkout or a copy gives files new times; the digest then decides, and it matches.
    copy = built_copy(tmp_path, monkeypatch)
    source = copy / "engine" / "clock.py"
    os.utime(source, ns=(1, 1))
    assert _compiled.source_stamps(copy) not in (copy / _compiled.DIGEST_FILE).read_text()
    why = _compiled._why_pure(copy)
    assert why != _compiled.STALE and why in (None, "the compiled core failed to build at install")


def test_a_package_never_compiled_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    assert _compiled._why_pure(copy_sources(tmp_path)) == "not compiled at install"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_stale_core_is_a_warning_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedcli.app import entry as cli

    monkeypatch.setattr(cli, "CORE_IS_STALE", True)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    cli._warn_if_stale()
    assert terminal.getvalue().startswith(f"schedcli: warning: {_compiled.STALE}")


def test_a_stale_core_says_nothing_to_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedcli.app import entry as cli

    monkeypatch.setattr(cli, "CORE_IS_STALE", True)
    r = run_in_process("policies")
    assert r.returncode == 0 and r.stderr == b""


def test_the_version_names_the_core_in_use() -> None:
    r = run_in_process("--version")
    assert r.stdout.decode() == f"schedcli {schedcli.__version__} ({schedcli.CORE})\n"


@pytest.mark.usefixtures("compiled")
def test_int_valued_float_parameters_read_the_same_in_both_cores(tmp_path: Path) -> None:
    # A float parameter given as an integer (on the command line and in a header).
    trace = tmp_path / "t.jsonl"
    lines = (ROOT / "traces" / "long-prompts-and-chat.jsonl").read_text().splitlines()
    header = {"schedcli": 1, "policy": "fair", "params": {"prefill_weight": 1, "decode_weight": 3}}
    trace.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    w = tmp_path / "w.jsonl"
    w.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n')
    fair = ["-p", "fair", "-P", "prefill_weight=0", "-P", "decode_weight=2"]
    commands = [
        ["replay", str(trace), "-f", "jsonl"],
        ["replay", str(trace), *fair, "-f", "jsonl"],
        ["diff", str(trace), "--b", "fair", "--b-param", "prefill_weight=0", "-f", "json"],
        ["stats", str(trace), "-f", "json"],
        ["simulate", str(w), *fair, "--metrics", "-", "-o", str(tmp_path / "sim.jsonl")],
        ["explain", str(trace), "--step", "1", "-f", "json"],
        ["findings", str(trace), *fair, "--starve-after", "1", "--gap-after", "1", "-f", "json"],
    ]
    fast = run_everything(commands, pure=False, cwd=tmp_path)
    slow = run_everything(commands, pure=True, cwd=tmp_path)
    assert fast.pop("core") == "compiled"
    slow.pop("core")
    assert fast == slow
    assert all(code in (0, 1) for code, _, _ in fast.values()), fast  # type: ignore[misc]


def test_every_builtin_policy_is_on_the_compile_list() -> None:
    # A built-in left off COMPILED_MODULES would run interpreted and quietly slow down.
    for name, cls in BUILTIN_POLICIES.items():
        assert cls.__module__ in _compiled.COMPILED_MODULES, (name, cls.__module__)
    # ...and so is what they call per task (the queues, the reference's bookkeeping).
    for module in (
        "schedcli.policies._queues",
        "schedcli.policies._rotation",
        "schedcli.policies._decode_first_reference",
    ):
        assert module in _compiled.COMPILED_MODULES, module


def test_isinstance_answers_each_policy_class_for_itself() -> None:
    # Compiled classes shared one isinstance cache (abc.ABC's): a "no" cached for
    # "is fcfs a decode-first?" was then the answer to "is fcfs a Scheduler?".
    from schedcli import Policy, RequestScheduler, Scheduler
    from schedcli.engine.recorder import RecordingScheduler
    from schedcli.model.scheduler import QueueScheduler
    from schedcli.policies import DecodeFirstScheduler, FcfsScheduler, PriorityScheduler
    from tests.doubles.requests import ToyRequests

    fcfs = FcfsScheduler.create()
    toy = ToyRequests()
    assert not isinstance(fcfs, DecodeFirstScheduler)
    assert not isinstance(fcfs, PriorityScheduler)
    assert not isinstance(fcfs, RecordingScheduler)
    assert isinstance(fcfs, Scheduler) and isinstance(fcfs, QueueScheduler)
    assert isinstance(fcfs, Policy) and not isinstance(fcfs, RequestScheduler)
    assert isinstance(toy, Policy) and isinstance(toy, RequestScheduler)
    assert not isinstance(toy, Scheduler) and not isinstance(toy, QueueScheduler)
    for cls in (*BUILTIN_POLICIES.values(), RecordingScheduler):
        assert issubclass(cls, Scheduler) and not issubclass(RequestScheduler, cls)


@pytest.mark.usefixtures("compiled")
def test_compiled_and_pure_python_shrink_to_the_same_trace_in_the_same_replays(
    tmp_path: Path,
) -> None:
    """Shrinking cuts by what the replay says at each candidate: both cores say the same,
    so they try the same candidates and write the same bytes."""
    import random
    import re

    from tests.commands.test_shrink_structure import planted, traffic

    commands = []
    for i, policy in enumerate(["decode-first", "fair", "fcfs"]):
        folder = tmp_path / policy
        folder.mkdir()
        trace = planted(folder, policy, traffic(random.Random(i), 30), 0.6)
        assert trace is not None
        commands.append(["shrink", str(trace), "--until", "check", "-o", "-"])
    fast = run_everything(commands, pure=False, cwd=ROOT)
    slow = run_everything(commands, pure=True, cwd=ROOT)
    assert fast.pop("core") == "compiled" and str(slow.pop("core")).startswith("pure Python")
    for argv in fast:
        (code, out, err), (code_2, out_2, err_2) = fast[argv], slow[argv]  # type: ignore[misc]
        assert code == code_2 == 0 and out == out_2 and out
        replays = re.compile(r"\((\d+) replays\)")
        assert replays.findall(err) == replays.findall(err_2) != []
