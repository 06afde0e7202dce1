"""Start-up is most of a small run: a command loads only what it uses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from schedcli.app import cli, entry
from schedcli.app.cli import _command_name, app, app_for
from schedcli.app.inprocess import run_cli_in_process
from tests.helpers import TRACES

PROBE = """
import sys
from schedcli.app.entry import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("rich", "pydantic", "schedcli.app.views.render", "schedcli.app.views.golden",
         "schedcli.engine.check.golden",
         "schedcli.app.commands.diff", "schedcli.engine.diff", "schedcli.engine.simulate",
         "schedcli.app.report.page",
         "importlib.metadata", "hashlib", "gzip", "schedcli.formats.requests",
         "schedcli.formats.requests.schema", "schedcli.model.requests", "msgspec",
         "schedcli.formats.step_lines")
made = sorted(
    f"{name}.{value.__qualname__}"
    for name, module in list(sys.modules.items()) if name.startswith("schedcli")
    for value in list(vars(module).values())
    if isinstance(value, type) and value.__module__ == name
    and "__dataclass_fields__" in vars(value)
)
print("DATACLASSES:", *made, file=sys.stderr)
print("LOADED:", *(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def probe(*args: str) -> dict[str, set[str]]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, check=True, timeout=60
    )
    *_, made, last = run.stderr.decode().strip().splitlines()
    assert made.startswith("DATACLASSES:") and last.startswith("LOADED:"), run.stderr
    return {line.split(":")[0]: set(line.split()[1:]) for line in (made, last)}


def loaded(*args: str) -> set[str]:
    return probe(*args)["LOADED"]


def test_a_replay_to_a_dump_loads_no_tables_no_validator_no_other_command_no_hasher() -> None:
    # Nor importlib.metadata: plugins are found by catalog/entry_points.py. Nor gzip for a
    # plain file, nor the request level's modules for a task-level trace.
    trace = str(TRACES / "rotation-fairness.jsonl")
    assert loaded("replay", trace, "-f", "jsonl", "-o", "-") == {
        "msgspec",  # the trace reader's decoder
        "schedcli.formats.step_lines",  # the dump is the only output
    }


def test_a_replay_to_a_dump_and_help_make_no_dataclass() -> None:
    # Making a dataclass execs generated code: 0.4-1.8 ms each, eight were 6.6 ms of a
    # tiny replay's start-up (docs/architecture.md, "Start-up").
    trace = str(TRACES / "rotation-fairness.jsonl")
    assert probe("replay", trace, "-f", "jsonl", "-o", "-")["DATACLASSES"] == set()
    assert probe("--help")["DATACLASSES"] == set()


def test_help_and_version_load_no_tables() -> None:
    assert loaded("--help") == set()  # no decoder, no dump writer
    assert loaded("--version") == {"importlib.metadata"}  # where the version is found


def test_a_command_loads_its_own_command_line_module_and_no_other() -> None:
    # Each command's options are its module's (app/commandline/): a run of one loads it
    # alone, and --help every one.
    probe = (
        "import sys\nfrom schedcli.app.entry import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\nprint(*sorted(m for m in sys.modules "
        "if m.startswith('schedcli.app.commandline.')), file=sys.stderr)"
    )

    def lines(*args: str) -> set[str]:
        run = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, check=True, timeout=60
        )
        return set(run.stderr.decode().strip().splitlines()[-1].split())

    trace = str(TRACES / "rotation-fairness.jsonl")
    assert lines("replay", trace, "-f", "jsonl", "-o", "-") == {"schedcli.app.commandline.replay"}
    assert lines("stats", "--help") == {"schedcli.app.commandline.stats"}
    assert lines("--help") == {f"schedcli.app.commandline.{c}" for c in cli.COMMANDS}


def _outcomes(args: list[str]) -> list[tuple[int, bytes, bytes]]:
    return [(r.code, r.stdout, r.stderr) for r in [run_cli_in_process(args, columns=100)]]


COMMANDS = [_command_name(i.callback) for i in app.registered_commands if i.callback]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_parses_and_answers_alike_when_built_alone(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command named first runs from an app of that command only (app_for); its help,
    # its usage errors and its refusals must be those of the whole app.
    cases = [[name, "--help"], [name], [name, "--no-such-option"], [name, "x", "y", "z"]]
    assert app_for([name]) is not app
    alone = [_outcomes(args) for args in cases]
    monkeypatch.setattr(cli, "app_for", lambda args: app)
    monkeypatch.setattr(entry, "app_for", lambda args: app)
    whole = [_outcomes(args) for args in cases]
    assert alone == whole


def test_anything_but_a_command_name_first_gets_the_whole_app() -> None:
    for args in ([], ["--help"], ["--version"], ["replya"], ["-h", "replay"]):
        assert app_for(args) is app
