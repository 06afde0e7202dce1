"""What the task level's debugger side asks of its opened trace (``opened.OpenTrace``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ....formats.trace import TraceReader
from ....model.records import Left
from ....model.scheduler import Scheduler
from ...replay import Emit, Observer
from .replay import Replayer


class TaskReplay(Protocol):
    name: str
    policy_name: str
    policy: Scheduler
    reader: TraceReader

    def replayer(
        self,
        emit: Emit,
        *,
        observer: Observer | None = None,
        on_left: Callable[[int, Left], None] | None = None,
    ) -> Replayer: ...

    def inputs(self) -> Iterator[tuple[int, Any]]: ...
