"""A progress bar on stderr, shown only when stderr is a terminal (never in pipes or CI)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

from ...streams.source import file_size


class ProgressBar:
    """``label``, a bar against ``total`` (or a pulse when unknown), and a detail line."""

    def __init__(
        self, console: Console | None, label: str, total: float | None, detail: str
    ) -> None:
        """No ``console``: no bar (what a pipe or a quiet run gets, without loading rich)."""
        self._bar: Any = None
        if console is None or not console.is_terminal:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn(label),
            BarColumn(),
            TextColumn(detail),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._bar.add_task(label, total=total, **_fields(detail))
        self._bar.start()

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, completed: float | None, **fields: Any) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, **fields)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _fields(detail: str) -> dict[str, Any]:
    """Initial values for the ``{task.fields[NAME]}`` placeholders of a detail template."""
    names = [part.split("]", 1)[0] for part in detail.split("{task.fields[")[1:]]
    return dict.fromkeys(names, 0)


class TraceProgress:
    """A bar over a trace file's bytes, advanced by the replay's steps (every 2048).

    The command that opens the trace sets ``position`` (the reader's byte offset).
    """

    def __init__(self, console: Console | None, label: str, path: str) -> None:
        self.bar = ProgressBar(console, label, file_size(path), "{task.fields[steps]} steps")
        self.position: Callable[[], int] | None = None

    def on_step(self, step: int) -> None:
        if step % 2048 == 0 and self.bar.shown:
            done: int | None = None
            if self.position is not None:
                try:
                    done = self.position()
                except (OSError, ValueError, TypeError):
                    done = None
            self.bar.update(done, steps=step)

    def stop(self) -> None:
        self.bar.stop()


def trace_progress(label: str, path: str, enabled: bool = True) -> TraceProgress:
    """A bar on stderr over ``path`` (shown only on a terminal, and only if ``enabled``)."""
    from ..console import stderr_console

    return TraceProgress(stderr_console() if enabled and _may_show() else None, label, path)


def _may_show() -> bool:
    """Whether stderr may be a terminal, asked without loading rich: a pipe or a file
    (with none of the variables by which rich is told otherwise) never gets a bar."""
    env = os.environ
    if env.get("TTY_COMPATIBLE") or env.get("FORCE_COLOR") is not None:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
