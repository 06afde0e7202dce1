"""The README's two newcomer commands are the ones CI runs, and they work."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

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


def fresh_clone_leg() -> list[str]:
    """The lines of .ci/run's fresh-clone leg, stripped of their indentation."""
    ci = (ROOT / ".ci" / "run").read_text()
    block = ci.split("# BEGIN fresh clone", 1)[1].split("# END fresh clone", 1)[0]
    return [line.strip() for line in block.splitlines()]


def test_ci_runs_the_readme_commands_on_a_fresh_clone_without_extras() -> None:
    install, tests = readme_commands()
    leg = fresh_clone_leg()
    # Verbatim, in the README's order, in a fresh clone of this checkout and a fresh venv.
    assert install in leg and tests in leg and leg.index(install) < leg.index(tests)
    clone, venv = 'git clone --quiet . "$fresh/clone"', 'python3 -m venv "$fresh/venv"'
    enter = ('cd "$fresh/clone"', 'source "$fresh/venv/bin/activate"')
    steps = [leg.index(line) for line in (clone, venv, *enter)]
    assert steps == sorted(steps) and steps[-1] < leg.index(install)
    # Nothing but the README's install goes into the venv: no extra, no upgrade.
    assert [line for line in leg if "pip install" in line] == [install]
    # No SCHEDCLI_* variable: every one is unset first, none set after.
    unset = 'for name in $(compgen -e SCHEDCLI_); do unset "$name"; done'
    assert unset in leg and leg.index(unset) < leg.index(install)
    assert not [line for line in leg if re.search(r"\bSCHEDCLI_\w*=", line)]


def test_the_fresh_clone_leg_runs_before_ci_installs_any_extra() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    extras = re.search(r"^pip install .*-e '\.\[([\w,]+)\]'$", ci, flags=re.M)
    assert extras is not None and "dev" not in extras[1].split(",")
    assert ci.index("# END fresh clone") < extras.start()


def test_ci_installs_and_requires_every_extra_a_test_needs() -> None:
    # A test marked needs(X) skips where X is absent: CI must install X and set its
    # SCHEDCLI_REQUIRE_*, or the test would skip there too, unseen. (The fresh-clone leg
    # unsets them all.)
    import tomllib

    from tests.conftest import EXTRAS

    ci = (ROOT / ".ci" / "run").read_text()
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = declared["optional-dependencies"]
    extras = re.search(r"^pip install .*-e '\.\[([\w,]+)\]'$", ci, flags=re.M)
    assert extras is not None
    for name, extra in EXTRAS.items():
        assert name in declared and name not in declared["dev"]
        assert name in extras[1].split(",")
        required = re.search(rf"^export .*\b{extra.require}=1\b", ci, flags=re.M)
        assert required is not None, f"CI does not set {extra.require}"


def test_a_test_that_needs_an_absent_extra_skips_with_why_and_fails_where_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.conftest import EXTRAS, Extra, pytest_configure, pytest_runtest_setup\n"
        "EXTRAS['absent'] = Extra(('schedcli_no_such_module',), 'SCHEDCLI_REQUIRE_ABSENT')\n"
        "EXTRAS['here'] = Extra(('json',), 'SCHEDCLI_REQUIRE_HERE', program=('sh',))\n"
    )
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.needs('absent')\n"
        "def test_absent(): pass\n"
        "@pytest.mark.needs('here')\n"
        "def test_here(): pass\n"
    )
    monkeypatch.delenv("SCHEDCLI_REQUIRE_ABSENT", raising=False)
    skipped = pytester.runpytest_subprocess("-p", "no:xdist", "-rs")
    skipped.assert_outcomes(passed=1, skipped=1)
    skipped.stdout.fnmatch_lines(
        ["*needs the absent extra (missing: schedcli_no_such_module; pip install*"]
    )
    monkeypatch.setenv("SCHEDCLI_REQUIRE_ABSENT", "1")
    required = pytester.runpytest_subprocess("-p", "no:xdist")
    required.assert_outcomes(passed=1, errors=1)  # failed in its setup: never a skip
    required.stdout.fnmatch_lines(["*SCHEDCLI_REQUIRE_ABSENT is set, so this test must run*"])


def test_the_tests_that_read_the_real_traces_skip_without_them() -> None:
    env = {**os.environ, "SCHEDCLI_TRACES_REAL": "/nonexistent", "SCHEDCLI_REQUIRE_REAL": ""}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "tests/commands/test_convert.py"],
        cwd=ROOT, env=env, capture_output=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout.decode()[-2000:]
    assert b"skipped" in r.stdout


def test_markers_are_registered_and_select_without_leaving_a_test_out_by_default() -> None:
    import tomllib

    from tests.conftest import EXTRAS, NEEDS_BY_REASON

    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":", 1)[0] for line in ini["markers"]}
    assert {"slow", "debug", *EXTRAS, *NEEDS_BY_REASON.values()} <= registered
    assert "-m" not in ini["addopts"].split()  # `pytest` (the README's, CI's) runs them all
