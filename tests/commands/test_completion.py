"""`schedcli completion`: the shell's completion script, and what it completes."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_process


def test_shell_completion_is_offered_and_completes(tmp_path: Path) -> None:
    r = run_process("completion", "bash")
    assert r.returncode == 0 and b"_SCHEDCLI_COMPLETE" in r.stdout
    env = {"_SCHEDCLI_COMPLETE": "complete_bash", "COMP_WORDS": "schedcli rep", "COMP_CWORD": "1"}
    r = run_process(env=env)
    assert r.stdout.split() == [b"replay", b"report"]
