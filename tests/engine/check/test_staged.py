"""engine/check/staged.py in this process: the staged commit written out beside the
repository, as ``check --staged`` checks it (tests/commands/test_check.py: the command)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from schedcli.engine.check.staged import staged_view
from schedcli.model.errors import UsageError


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE"):
        monkeypatch.delenv(name, raising=False)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "a.jsonl").write_text('{"op": "get_work"}\n')
    (tmp_path / "notes.txt").write_text("x\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_commit_that_touches_no_trace_is_not_worth_checking(repo: Path) -> None:
    (repo / "notes.txt").write_text("y\n")
    _git(repo, "add", "notes.txt")
    with staged_view() as view:
        assert view.touched == {"notes.txt"} and not view.relevant()


def test_the_staged_trace_is_seen_and_paths_are_said_as_the_repositorys(repo: Path) -> None:
    (repo / "a.jsonl").write_text('{"op": "get_work"}\n{"op": "get_work"}\n')
    _git(repo, "add", "a.jsonl")
    (repo / "a.jsonl").write_text("unstaged\n")  # the working tree differs again
    with staged_view() as view:
        assert view.touched == {"a.jsonl"} and view.relevant()
        assert "a.jsonl" in view.unstaged
        inside = view.into(os.path.join(view.top, "a.jsonl"))
        assert inside == os.path.join(view.view, "a.jsonl")
        assert view.real_text(f"{inside}:1: bad") == f"{view.top}/a.jsonl:1: bad"
    assert not os.path.exists(view.view)  # the view is removed after


def test_outside_a_repository_staged_says_git_could_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    with pytest.raises(UsageError) as raised, staged_view():
        pass
    assert str(raised.value).startswith("--staged asks git what the commit holds: ")
