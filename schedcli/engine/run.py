"""Replaying a trace file: opened at the level its header says (``levels.table``), its
policy built, and the engine run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from ..formats.trace import open_trace
from ..model.records import discard
from ..streams.source import DEFAULT_MAX_LINE_BYTES, display_name
from .levels import Driver, OpenReplay, stderr_note
from .levels.table import level_of

if TYPE_CHECKING:
    from ..model.records import Left
    from ..model.task import Task
    from .replay import Emit, Observer

__all__ = ["Driver", "OpenReplay", "Progress", "open_replay", "replay_metrics"]


@contextmanager
def open_replay(
    path: str,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    note: Callable[[str], None] = stderr_note,
    on_wait: Callable[[], None] | None = None,
    follow: bool = False,
    allow_incomplete: bool = False,
    data: bytes | None = None,
    stream: BinaryIO | None = None,
) -> Iterator[OpenReplay]:
    """The trace opened for one pass, its policy built, at the level its header says.
    ``on_wait`` runs before reading from a pipe (or a ``follow``ed file) would wait: flush
    outputs there. ``data``: the trace's bytes, held in memory, or ``stream``: the trace
    opened already (``path`` names it)."""
    name = display_name(path)
    with open_trace(
        path,
        name=name,
        max_line_bytes=max_line_bytes,
        on_wait=on_wait,
        follow=follow,
        data=data,
        stream=stream,
    ) as reader:
        header = reader.header
        level = level_of(header)
        with level.open(
            reader, header, name, policy, params or {}, note, follow, allow_incomplete
        ) as opened:
            yield opened


class Progress(Protocol):
    """A progress display that follows a replay (``app.views.progress.TraceProgress``)."""

    position: Callable[[], int] | None

    def on_step(self, step: int) -> None: ...


def replay_metrics(
    path: str,
    policy: str | None,
    params: Mapping[str, object],
    *,
    drain: bool = False,
    allow_incomplete: bool = False,
    progress: Progress | None = None,
    measure_preemption: bool = False,
    stream: BinaryIO | None = None,
    watch: Watch | None = None,
    also: Observer | None = None,
) -> tuple[dict[str, Any], str]:
    """A trace replayed at its level and its steps measured (``stats``, a sweep's trace
    point); and a title: the trace and the policy it ran under. A request-level replay's
    metrics see dispatches only (a request's waits are not a task's), and with
    ``measure_preemption`` what preemption cost (``requests.preemption``; ``stats``).
    ``stream``: the trace opened already (``path`` names it). ``watch``: hears the same
    replay through hooks of its own, and adds to the summary (``stats``: the findings
    counted, ``engine.findings.CountingFindings``).
    ``also``: hears what the metrics hear, after them (a sweep's schedule digest)."""
    with open_replay(
        path, policy=policy, params=params, allow_incomplete=allow_incomplete, stream=stream
    ) as opened:
        metrics = opened.step_metrics()
        observer: Observer = metrics if also is None else _Both(metrics, also)
        on_step = None
        if progress is not None:
            progress.position = opened.reader.position
            on_step = progress.on_step
        if watch is None:
            engine = opened.replayer(
                discard,
                drain=drain,
                observer=observer,
                on_step=on_step,
                measure_preemption=measure_preemption,
            )
        else:
            hooks = watch.hooks(opened, observer)
            engine = opened.replayer(
                hooks.emit,
                drain=drain,
                observer=hooks.observer,
                on_step=on_step,
                measure_preemption=measure_preemption,
                on_left=hooks.on_left,
                on_accepted=hooks.on_accepted,
            )
        totals = engine.replay()
        summary = metrics.summary()
        summary["rejected"] = totals.rejected
        summary["queued"] = totals.queued
        summary.update(engine.level_summary())
        if watch is not None:
            summary.update(watch.summary())
        return summary, f"{opened.name} under {opened.policy_name}"


class _Both:
    """Two observers told alike, in order."""

    def __init__(self, first: Observer, second: Observer) -> None:
        self.first, self.second = first, second

    def accepted(self, tasks: list[Task], step: int) -> None:
        self.first.accepted(tasks, step)
        self.second.accepted(tasks, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        self.first.dispatched(batch, step)
        self.second.dispatched(batch, step)

    def dropped(self, tasks: list[Task], step: int) -> None:
        self.first.dropped(tasks, step)
        self.second.dropped(tasks, step)

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        self.first.rejected(tasks, step, reason)
        self.second.rejected(tasks, step, reason)


class Hooks(Protocol):
    """What a replayer is given by a watch (``engine.findings.StepHooks``)."""

    @property
    def emit(self) -> Emit: ...

    @property
    def observer(self) -> Observer: ...

    @property
    def on_left(self) -> Callable[[int, Left], None]: ...

    @property
    def on_accepted(self) -> Callable[[list[Task], int], None]: ...


class Watch(Protocol):
    """Hears a measuring replay beside its metrics (``replay_metrics``' ``watch``)."""

    def hooks(self, opened: OpenReplay, also: Observer) -> Hooks:
        """The replayer's hooks for ``opened``; ``also`` hears what its observer hears."""
        ...

    def summary(self) -> dict[str, Any]: ...  # added to the metrics, once replayed
