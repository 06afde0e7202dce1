"""docs/architecture.md's "Where to add", followed for each extension point: the example
works as the recipe says, touching only the places it names. (The converter recipe is
followed in test_convert.py.)"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from schedcli import QueueScheduler, Task
from schedcli.app.commands.replaying import ReplayRequest, run_replay
from schedcli.app.views import outputs
from schedcli.app.views.outputs import Output
from schedcli.app.views.progress import TraceProgress
from schedcli.catalog import REQUEST_POLICIES
from schedcli.engine.ledger import Totals
from schedcli.engine.levels import table
from schedcli.engine.levels.task import TaskLevel
from schedcli.engine.replay import ReplayDriver
from schedcli.engine.run import open_replay
from schedcli.formats import schema
from schedcli.kit import MAX_BATCH_TOKENS
from schedcli.model.records import discard
from schedcli.model.steps import Emitted, Step
from schedcli.policies import BUILTIN_POLICIES
from tests.helpers import TRACES, run_cli

TRACE = TRACES / "rotation-fairness.jsonl"


class Newest(QueueScheduler):
    """The policy recipe's example: each batch, the newest task alone."""

    name = "newest"
    PARAMS = (MAX_BATCH_TOKENS,)

    def __init__(self, max_batch_tokens: int = 544) -> None:
        super().__init__(max_batch_tokens=max_batch_tokens)
        self._queue: list[Task] = []

    def enqueue(self, task: Task) -> None:
        self._queue.append(task)

    def take_batch(self) -> list[Task]:
        sessions = {t.sid for t in self._queue}
        for t in reversed(self._queue):  # the newest task whose session has no older one
            if next(u for u in self._queue if u.sid == t.sid) is t:
                self._queue.remove(t)
                return [t]
        assert not sessions
        return []

    def remove_session(self, sid: object) -> list[Task]:
        mine = [t for t in self._queue if t.sid == sid]
        self._queue = [t for t in self._queue if t.sid != sid]
        return mine

    def reset(self) -> None:
        self._queue.clear()


def test_a_policy_is_one_module_and_one_line_in_builtin_policies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(BUILTIN_POLICIES, "newest", Newest)
    r = run_cli("replay", str(TRACE), "-p", "newest", "-f", "jsonl")
    assert r.returncode == 0, r.stderr
    assert b'"end"' in r.stdout.splitlines()[-1]
    listed = run_cli("policies", "-f", "json")
    assert b'"newest"' in listed.stdout


def test_a_request_level_policy_is_one_module_and_one_line_in_request_policies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The recipe's example is the test double: a RequestScheduler in a module of its own.
    # Registered under the name its class gives (ToyRequests.name), so that a trace it
    # simulates names it by that name, which a replay resolves.
    from tests.doubles.requests import ToyRequests

    monkeypatch.setitem(REQUEST_POLICIES, "toy-requests", lambda: ToyRequests)
    listed = orjson.loads(run_cli("policies", "-f", "json").stdout)
    [toy] = [p for p in listed if p["name"] == "toy-requests"]
    assert (toy["level"], toy["origin"]) == ("request", "built-in, request-level")
    work = tmp_path / "w.jsonl"
    work.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n')
    trace = tmp_path / "t.jsonl"
    r = run_cli("simulate", str(work), "-p", "toy-requests", "-o", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(trace.read_bytes().splitlines()[0])["policy"] == "toy-requests"
    again = run_cli("replay", str(trace), "--check", "--require-all", "-o", "/dev/null")
    assert again.returncode == 0, again.stderr
    wrong = run_cli("replay", str(TRACE), "-p", "toy-requests")
    assert wrong.returncode == 2 and b"'toy-requests' is request-level" in wrong.stderr


class CountView(Output):
    """The output recipe's example: how many batches, said at the end."""

    def __init__(self, out: io.BufferedIOBase, stack: object, to_file: bool) -> None:
        self.out = out
        self.batches = 0

    def record(self, record: Emitted) -> None:
        self.batches += isinstance(record, Step)

    def close(self, totals: Totals | None, stopped: BaseException | None) -> None:
        if totals is not None:
            self.out.write(f"{self.batches} batches\n".encode())


def test_an_output_format_is_one_class_and_one_line_in_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(outputs.VIEWS, "count", CountView)  # type: ignore[arg-type]
    out = tmp_path / "count.txt"
    progress = TraceProgress(Console(file=io.StringIO()), "replaying", str(TRACE))
    run_replay(ReplayRequest(str(TRACE), fmt="count", output=str(out)), Console, progress)  # type: ignore[arg-type]
    dump = run_cli("replay", str(TRACE), "-f", "jsonl").stdout
    batches = dump.count(b'"batch"')
    assert out.read_text() == f"{batches} batches\n"


# The command recipe's example: app/commandline/events.py, as the recipe writes it (here
# from a file of the test's own, so the package is left as it is).
EVENTS = """
from typing import Annotated

import typer

from schedcli.app import options as o

LabelOption = Annotated[bool, typer.Option("--label", help="Say what the number counts.")]


def events(trace: o.TraceOption, policy: o.PolicyOption = None, label: LabelOption = False):
    \"\"\"Count a trace's events (the recipe's example command).\"\"\"
    from schedcli.app.commands.validate import validate_trace

    _, count = validate_trace(trace, policy=policy)
    print(f"{count} events" if label else count)
"""


def test_a_command_is_a_module_of_its_options_and_one_call(tmp_path: Path) -> None:
    import importlib.util

    from schedcli.app import cli

    (tmp_path / "events.py").write_text(EVENTS)
    spec = importlib.util.spec_from_file_location("events_command", tmp_path / "events.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registered = list(cli.app.registered_commands)
    try:
        cli.command(module.events)  # the one line in cli.py's list
        listed = run_cli("--help")
        assert b"events" in listed.stdout and b"Count a trace's events" in listed.stdout
        own = run_cli("events", "--help")
        assert b"--label" in own.stdout and b"--policy" in own.stdout, own.stderr
        r = run_cli("events", str(TRACE))
        assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stderr
        said = run_cli("events", str(TRACE), "--label")
        assert said.stdout == r.stdout.strip() + b" events\n", said.stderr
        refused = run_cli("events", str(TRACE), "-o", "x")
        assert refused.returncode == 2 and b"no option -o" in refused.stderr
    finally:
        cli.app.registered_commands[:] = registered


class ToyLevel(TaskLevel):
    """The level recipe's example: a trace of task-level events whose policy is fcfs
    unless ``-p`` names another (its header's is ignored)."""

    name = "toy"  # type: ignore[misc]

    def open(self, reader, header, name, policy, params, note, follow, allow_incomplete):  # type: ignore[no-untyped-def]
        return super().open(
            reader, None, name, policy or "fcfs", params, note, follow, allow_incomplete
        )


def test_a_level_is_one_package_and_one_line_in_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = TRACE.read_bytes().splitlines(keepends=True)
    toy = tmp_path / "toy.jsonl"
    body = b"".join(lines[1:])
    toy.write_bytes(b'{"schedcli": 1, "level": "toy", "policy": "decode-first"}\n' + body)
    task = tmp_path / "task.jsonl"
    task.write_bytes(b'{"schedcli": 1, "policy": "fcfs"}\n' + body)
    unknown = run_cli("replay", str(toy), "-f", "jsonl")
    assert unknown.returncode == 2
    assert unknown.stderr.endswith(b'level must be "task" or "request", not "toy"\n')

    monkeypatch.setattr(table, "LEVELS", dict(table.LEVELS))
    monkeypatch.setattr(schema, "LEVEL_NAMES", list(schema.LEVEL_NAMES))
    table.register(ToyLevel())
    replayed = run_cli("replay", str(toy), "-f", "jsonl")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == run_cli("replay", str(task), "-f", "jsonl").stdout
    assert table.level_of_file(str(toy)).name == "toy"
    with open_replay(str(toy)) as opened:  # its engine is the one driver, with a stepper
        assert opened.level.name == "toy"
        assert isinstance(opened.replayer(discard), ReplayDriver)
    listed = run_cli("validate", str(toy))
    assert listed.returncode == 0, listed.stderr


def test_the_levels_a_header_may_name_are_the_tables() -> None:
    assert list(table.LEVELS) == schema.LEVEL_NAMES
