"""The README's two newcomer commands are the ones CI runs, and they work."""

from __future__ import annotations

import re

from tests.helpers import ROOT, run_cli


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", quick, flags=re.S)


def test_readme_has_an_install_and_run_command_and_a_test_command() -> None:
    install, tests = readme_commands()
    assert install.startswith("pip install -e '.[dev]' && schedcli replay traces/")
    assert tests == "pytest"


def test_ci_runs_the_readme_commands_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    install, tests = readme_commands()
    assert install in ci.splitlines()
    assert tests in ci.splitlines()


def test_the_readme_example_replays() -> None:
    install, _ = readme_commands()
    trace = install.split("schedcli replay ", 1)[1].split()[0]
    r = run_cli("replay", trace)
    assert r.returncode == 0 and b'"end"' in r.stdout


def test_console_script_is_installed_and_answers_version() -> None:
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = shutil.which("schedcli") or str(Path(sys.executable).parent / "schedcli")
    r = subprocess.run([script, "--version"], capture_output=True, check=False)
    assert r.returncode == 0
    assert r.stdout.decode().startswith("schedcli ")
