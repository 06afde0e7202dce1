"""Replaying a trace file: choosing the policy, the step mode, and running the engine."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..formats.step_lines import StepLines
from ..formats.trace import Header, TraceReader, open_trace, partial_reason
from ..model.errors import InputError
from ..model.records import Left
from ..model.scheduler import Scheduler
from ..policies.registry import RecordedPolicy, policy_for_trace
from .replay import Emit, Observer, Replayer, Totals


def _stderr_note(message: str) -> None:
    print(message, file=sys.stderr)


def choose_policy(
    header: Header | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None] = _stderr_note,
) -> tuple[Scheduler, str, dict[str, object]]:
    """The policy to replay a trace with (``policies.registry.policy_for_trace`` decides),
    promised serial calls: only the replay's loop calls it."""
    recorded = None
    if header is not None:
        meta = header.meta if isinstance(header.meta, dict) else {}
        cls = meta.get("class")
        recorded = RecordedPolicy(
            header.line, header.policy, dict(header.params), cls if isinstance(cls, str) else None
        )
    built, label, used = policy_for_trace(recorded, trace_name, policy, params, note)
    built.promise_serial_calls()
    return built, label, used


class OpenTrace:
    """A trace ready to replay: its reader and its policy."""

    def __init__(
        self,
        reader: TraceReader,
        policy: Scheduler,
        policy_name: str,
        params: dict[str, object],
        name: str,
        allow_incomplete: bool = False,
    ) -> None:
        self.reader = reader
        self.policy = policy
        self.policy_name = policy_name
        self.params = params
        self.name = name
        self.allow_incomplete = allow_incomplete

    def replayer(
        self,
        emit: Emit,
        *,
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        on_left: Callable[[int, Left], None] | None = None,
        dump: StepLines | None = None,
    ) -> Replayer:
        return Replayer(
            self.policy,
            emit,
            policy_name=self.policy_name,
            trace_name=self.name,
            check=check,
            drain=drain,
            on_step=on_step,
            observer=observer,
            on_left=on_left,
            recorded_outcomes=self.recorded_outcomes,
            dump=dump,
            allow_incomplete=self.allow_incomplete,
        )

    @property
    def recorded_outcomes(self) -> bool:
        """A recorder's trace marks every rejected submit (docs/recording.md)."""
        header = self.reader.header
        meta = header.meta if header is not None else None
        return isinstance(meta, dict) and "recorded_by" in meta

    def run(self, engine: Replayer) -> Totals:
        """Replay every event of the trace through ``engine``, then finish. A trace marked
        partial is refused after its last event (before the end record), unless
        ``allow_incomplete``."""
        return engine.run(self.reader.runs(), self.check_complete)

    def check_complete(self) -> None:
        partial = self.reader.partial
        if partial is not None and not self.allow_incomplete:
            raise InputError(self.name, partial[0], incomplete_trace(partial[1]))


def incomplete_trace(marker: dict[str, object]) -> str:
    return (
        f"partial trace ({partial_reason(marker)}): its writer stopped before the end; "
        "--allow-incomplete replays it anyway"
    )


@contextmanager
def open_replay(
    path: str,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    note: Callable[[str], None] = _stderr_note,
    on_wait: Callable[[], None] | None = None,
    follow: bool = False,
    allow_incomplete: bool = False,
) -> Iterator[OpenTrace]:
    """The trace opened for one pass, its policy built. ``on_wait`` runs before reading
    from a pipe (or a ``follow``ed file) would wait: flush outputs there."""
    name = display_name(path)
    with open_trace(
        path, name=name, max_line_bytes=max_line_bytes, on_wait=on_wait, follow=follow
    ) as reader:
        built, label, used = choose_policy(reader.header, name, policy, params or {}, note)
        yield OpenTrace(reader, built, label, used, name, allow_incomplete)
