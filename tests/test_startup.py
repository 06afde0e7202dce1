"""Start-up is most of a small run: a command loads only what it uses."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import TRACES

PROBE = """
import sys
from schedcli.app.entry import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("rich", "pydantic", "schedcli.app.render", "schedcli.app.golden",
         "schedcli.app.diff", "schedcli.engine.simulate", "schedcli.app.report")
print("LOADED:", *(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def loaded(*args: str) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, check=True, timeout=60
    )
    last = run.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("LOADED:"), run.stderr
    return set(last.split()[1:])


def test_a_replay_to_a_dump_loads_no_tables_no_option_validator_and_no_other_command() -> None:
    trace = str(TRACES / "rotation-fairness.jsonl")
    assert loaded("replay", trace, "-f", "jsonl", "-o", "-") == set()


def test_help_and_version_load_no_tables() -> None:
    assert loaded("--help") == set()
    assert loaded("--version") == set()
