"""The debugger's modal screens: the keys (``?``), a one-line prompt, and a life."""

from __future__ import annotations

import os
from typing import ClassVar

from rich import box
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

KEYS = (
    ("→ l n / ← h p", "next / previous step"),
    ("] PgDn / [ PgUp", "100 steps on / back"),
    ("Home / End", "first step / last step indexed"),
    ("g or :", "go to step N"),
    ("d / D / F", "next / previous / first divergence"),
    ("/ / s", "find a task by tid / a session by sid"),
    ("↑ ↓ then Enter or i", "a queued task's life (I: its session's)"),
    ("b / B", "add a breakpoint / clear them all"),
    ("c / C", "continue / reverse-continue to a breakpoint"),
    ("y", "copy the command that shows this step (explain --step)"),
    ("Y", "copy this step as a trace (--as-trace)"),
    ("r", "ask again for a view whose answer was lost"),
    ("t", "the policy's own state (decode queue, chunks, rotation) / the queue"),
    ("o", "with --against: the other policy's queue and state / the replay's"),
    ("?", "these keys"),
    ("q / Ctrl+C", "quit"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,enter", "dismiss", "close")
    ]

    def __init__(self, breakpoint_syntax: str) -> None:
        super().__init__()
        self.syntax = breakpoint_syntax

    def compose(self) -> ComposeResult:
        table = Table(
            title="schedcli debug: keys", expand=True, title_justify="left", box=box.SIMPLE_HEAD
        )
        table.add_column("key", no_wrap=True)
        table.add_column("does")
        for key, does in KEYS:
            table.add_row(key, does)
        table.add_row("breakpoints", self.syntax)
        yield VerticalScroll(Static(table), id="help")


class Prompt(ModalScreen[str | None]):
    """One line asked for; Enter gives it, Escape gives None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(self.question, id="question")
        yield Input(id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class LifeScreen(ModalScreen[None]):
    """A task's or a session's life, filled in as the replay is followed."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        yield VerticalScroll(Static("following…", id="life-body"), id="life")

    life_text = ""  # what is shown, as plain text

    def show(self, table: Table) -> None:
        from rich.console import Console

        with open(os.devnull, "w") as sink:
            console = Console(width=200, no_color=True, record=True, file=sink)
            console.print(table)
        self.life_text = console.export_text()
        self.query_one("#life-body", Static).update(table)

    def lost(self, why: str) -> None:
        """The life could not be followed (a worker ended without answering)."""
        self.life_text = why
        self.query_one("#life-body", Static).update(why)
