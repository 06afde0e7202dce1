"""The real program in a real terminal, driven as a person would: tmux send-keys, then
capture-pane. A trace with a planted divergence: reach it with the "next divergence" key,
step back and forth across it, find a task by tid and read its reasons, quit cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedcli.app.commands.explain import explain_lives
from tests.helpers import write_lines

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(
    TMUX is None and not os.environ.get("SCHEDCLI_REQUIRE_TMUX"), reason="tmux is not installed"
)


class Terminal:
    def __init__(self, name: str, cwd: Path) -> None:
        self.name = name
        assert TMUX is not None, "SCHEDCLI_REQUIRE_TMUX is set but tmux is missing"
        env = f"PATH={Path(sys.executable).parent}:{os.environ['PATH']}"
        subprocess.run(
            [
                TMUX,
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "80",
                "-y",
                "24",
                "-c",
                str(cwd),
                "env",
                "-i",
                env,
                "HOME=/tmp",
                "TERM=xterm-256color",
                "bash",
                "--norc",
                "--noprofile",
            ],
            check=True,
        )

    def keys(self, *keys: str) -> None:
        for key in keys:
            subprocess.run([TMUX, "send-keys", "-t", self.name, key], check=True)
            time.sleep(0.05)

    def screen(self) -> str:
        done = subprocess.run(
            [TMUX, "capture-pane", "-p", "-t", self.name],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def until(self, text: str, seconds: float = 20) -> str:
        return self.until_status(None, text, seconds)

    def until_status(self, status: str | None, text: str = "", seconds: float = 20) -> str:
        """The screen once ``text`` is on it and (if given) the status line, the one
        above the key bar, starts with ``status``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            shown = self.screen()
            lines = [ln for ln in shown.splitlines() if ln.strip()]
            line = lines[-2] if len(lines) > 1 else ""
            if text in shown and (status is None or line.startswith(status)):
                return shown
            time.sleep(0.05)
        raise AssertionError(f"{status!r}/{text!r} never shown; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([TMUX, "kill-session", "-t", self.name], check=False)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(f"schedcli-{os.getpid()}-{time.monotonic_ns()}", tmp_path)
    yield term
    term.close()


def test_a_person_finds_the_planted_divergence_steps_across_it_finds_a_task_and_quits(
    terminal: Terminal, tmp_path: Path
) -> None:
    lines = [
        json.loads(x) for x in (ROOT / "traces/rotation-fairness.jsonl").read_text().splitlines()
    ]
    gets = [i for i, x in enumerate(lines) if x.get("op") == "get_work"]
    lines[gets[4]]["expect"] = [8, 9]  # step 4 really runs tid 9 alone
    write_lines(tmp_path / "planted.jsonl", lines)
    terminal.keys("schedcli debug planted.jsonl --check; echo EXIT=$?", "Enter")
    terminal.until("planted.jsonl · decode-first · vs expect · 6 steps")
    terminal.keys("d")
    shown = terminal.until_status("step 4: ", "div: differs from the trace's expect")
    assert "expect:" in shown
    terminal.keys("Left")
    shown = terminal.until_status("step 3: ")
    assert "div:" not in shown
    terminal.keys("Right")
    terminal.until_status("step 4: ", "div: differs")
    terminal.keys("Right")
    terminal.until_status("step 5: ")
    terminal.keys("Left")
    terminal.until_status("step 4: ", "div: differs")

    terminal.keys("Home", "/")
    terminal.until("find the task with tid")
    terminal.keys("9", "Enter")
    shown = terminal.until_status("task 9 found")
    (life,) = explain_lives(str(tmp_path / "planted.jsonl"), tid=9)
    assert f"step {life.step}:" in shown  # the cursor on its row: i shows its life
    terminal.keys("i")
    shown = terminal.until("life of task 9")
    for _, code, _ in life.passed_over:
        assert code in shown
    terminal.keys("Escape")
    terminal.until("task 9 found")
    terminal.keys("q")
    shown = terminal.until("EXIT=1")  # --check found a difference: exit 1, as replay --check
    assert "tokens" not in shown and "decode-first" not in shown  # the screen restored
    assert "debug: 1 step differs from the expect, the first at step 4" in shown


def test_sigterm_ends_it_with_143_the_terminal_restored_and_no_replay_process_left(
    terminal: Terminal, tmp_path: Path
) -> None:
    trace = ROOT / "traces/rotation-fairness.jsonl"
    pidfile = tmp_path / "pid"
    terminal.keys(
        f"bash -c 'echo $$ > {pidfile}; exec schedcli debug {trace}'; echo EXIT=$?", "Enter"
    )
    terminal.until("rotation-fairness.jsonl · decode-first · 6 steps")
    pid = int(pidfile.read_text())
    servers = subprocess.run(
        ["pgrep", "-f", "schedcli.engine.travel.server"], capture_output=True, text=True
    )
    mine = [p for p in servers.stdout.split() if Path(f"/proc/{p}/stat").exists()]
    os.kill(pid, 15)
    shown = terminal.until("EXIT=143")
    assert "schedcli: terminated" in shown and "tokens" not in shown
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in mine):
        time.sleep(0.05)
    left = [
        p
        for p in mine
        if Path(f"/proc/{p}").exists() and str(trace) in Path(f"/proc/{p}/cmdline").read_text()
    ]
    assert left == []
