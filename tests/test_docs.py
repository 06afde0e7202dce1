"""The docs describe what the code does: their examples run, their links resolve."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from schedcli.formats import schema
from tests.helpers import EXAMPLES, ROOT, run_cli

DOCS = ROOT / "docs"


def test_readme_links_every_doc_and_every_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in (
        "trace-format",
        "policies",
        "plugins",
        "architecture",
        "recording",
        "fuzzing",
        "sweeps",
    ):
        assert f"docs/{doc}.md" in readme, doc
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_nothing_user_facing_points_outside_the_repository() -> None:
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        assert "shared/specs" not in page.read_text(), page.name


def test_the_trace_format_doc_lists_every_field_of_the_schema() -> None:
    text = (DOCS / "trace-format.md").read_text()
    for name in schema.TaskFields.__struct_fields__:
        assert f"| `{name}` |" in text, name
    for op in schema.OPS:
        assert f"| `{op}` |" in text, op


def test_the_plugin_walkthrough_policy_replays_every_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = re.search(r"```python\n(.*?)```", (DOCS / "plugins.md").read_text(), re.S)
    assert code is not None
    (tmp_path / "shortest.py").write_text(code.group(1))
    monkeypatch.chdir(tmp_path)
    for trace in EXAMPLES:
        r = run_cli("replay", str(trace), "--policy", "shortest:Shortest", "-f", "jsonl")
        assert r.returncode == 0, (trace.name, r.stderr.decode())


def test_the_suite_runs_in_one_process_as_the_docs_say(tmp_path: Path) -> None:
    # addopts asks for -n auto; `pytest -p no:xdist` must still work (one process).
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "tests/policies/test_kit.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert " passed" in run.stdout


def test_the_docs_example_abort_has_its_time() -> None:
    text = (ROOT / "docs" / "trace-format.md").read_text()
    aborts = [json.loads(line) for line in text.splitlines() if line.startswith('{"op": "abort"')]
    assert aborts and all("t" in a for a in aborts)


def test_the_pre_commit_docs_name_a_rev_that_exists() -> None:
    text = (ROOT / "docs" / "ci.md").read_text()
    lines = [x.strip() for x in text.splitlines()]
    revs = [x.split("rev:", 1)[1].strip() for x in lines if x.startswith("rev:")]
    tags = subprocess.run(["git", "tag"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert revs and all(r in tags or r.startswith("<") for r in revs), revs
