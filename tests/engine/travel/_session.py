"""A debugging session run in this process (no fork server): what the hooks heard."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schedcli.app.usage import worded
from schedcli.engine.run import open_replay
from schedcli.engine.travel.session import Compare, Session
from schedcli.model.errors import Said
from schedcli.model.records import Record

TRACE = str(Path(__file__).resolve().parents[3] / "traces" / "rotation-fairness.jsonl")


class Heard:
    """The hooks of a session, each call noted."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []  # (side, step)
        self.pairs: list[tuple[int, list[Record | None], Any]] = []
        self.marks: list[tuple[int, str, str]] = []
        self.events: list[tuple[Record, int]] = []

    def side_step(self, side: int, step: int, record: Record) -> None:
        self.steps.append((side, step))

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None:
        self.pairs.append((step, records, other))

    def mark(self, step: int, kind: str, *text: Said) -> None:
        self.marks.append((step, kind, worded(text)))  # as the app says it

    def event(self, record: Record, step: int) -> None:
        self.events.append((record, step))


@contextmanager
def session(
    compare: Compare | None = None, data: bytes | None = None, path: str = TRACE
) -> Iterator[tuple[Session, Heard]]:
    heard = Heard()
    with open_replay(path, data=data, note=lambda _: None) as opened:
        yield Session(opened, compare or Compare(), heard), heard
