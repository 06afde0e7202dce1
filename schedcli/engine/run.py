"""Replaying a trace file: choosing the policy, the step mode, and running the engine."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..formats.trace import Header, TraceReader, open_trace, partial_reason
from ..model.errors import InputError, UsageError
from ..model.scheduler import Scheduler
from ..model.task import Task
from ..policies.registry import build_policy, resolve_policy
from .replay import Emit, Observer, Replayer, Totals

DEFAULT_POLICY = "decode-first"


def _stderr_note(message: str) -> None:
    print(message, file=sys.stderr)


def choose_policy(
    header: Header | None,
    trace_name: str,
    policy: str | None,
    params: Mapping[str, object],
    note: Callable[[str], None] = _stderr_note,
) -> tuple[Scheduler, str, dict[str, object]]:
    """The policy to replay with: the command line's, else the header's, else decode-first.

    The header's params apply to whichever policy is chosen, each one the policy
    declares; the rest are named in one note (an error for the header's own policy,
    whose header then names a parameter it does not have). A plugin that declares no parameters
    takes them all only when it is the header's own policy. ``params`` (from the
    command line) override them key by key.
    """
    header_policy = (header.policy if header else None) or DEFAULT_POLICY
    spec = policy or header_policy
    if policy is None and header is not None:
        cls = _recorded_policy(header, trace_name)
    else:
        cls = resolve_policy(spec)
    header_params = dict(header.params) if header else {}
    merged: dict[str, object] = {}
    if header_params:
        if cls.PARAMS:
            declared = {p.name for p in cls.PARAMS}
            merged = {k: v for k, v in header_params.items() if k in declared}
        elif spec == header_policy:
            merged = header_params
        ignored = [k for k in header_params if k not in merged]
        if ignored and spec == header_policy:
            assert header is not None
            raise InputError(
                trace_name,
                header.line,
                f"header param {ignored[0]!r} is not a parameter of policy {spec!r} "
                f"(it takes {', '.join(p.name for p in cls.PARAMS)})",
            )
        if ignored:
            note(
                f"note: {cls.name or spec!r} does not take the trace header's "
                f"{', '.join(ignored)}; not applied"
            )
    from_header = bool(merged)
    merged.update(params)
    try:
        built = build_policy(spec, merged, cls)
    except UsageError as e:
        if header is not None and from_header and not params:
            raise InputError(trace_name, header.line, str(e)) from None
        raise
    built.promise_serial_calls()  # the replay's own policy: only its loop calls it
    used = built.params() if built.PARAMS else merged
    return built, built.name or spec, {k: v for k, v in used.items() if k in merged}


def _recorded_policy(header: Header, trace_name: str) -> type[Scheduler]:
    """The header's policy, which the trace was recorded under: one that does not load
    here, or a recording's unnamed class, is bad input naming what was recorded (replaying
    it under decode-first instead would answer another question)."""
    meta = header.meta if isinstance(header.meta, dict) else {}
    if header.policy is None and isinstance(meta.get("class"), str):
        raise InputError(
            trace_name,
            header.line,
            f"recorded under policy class {meta['class']}, which has no registered name; "
            f"replay it with -p {meta['class']}",
        )
    spec = header.policy or DEFAULT_POLICY
    try:
        return resolve_policy(spec)
    except UsageError as e:
        raise InputError(
            trace_name,
            header.line,
            f"recorded under policy {spec!r}, which does not load here ({e}); name a "
            "policy with -p",
        ) from None


@dataclass
class OpenTrace:
    """A trace ready to replay: its reader and its policy."""

    reader: TraceReader
    policy: Scheduler
    policy_name: str
    params: dict[str, object]
    name: str
    allow_incomplete: bool = False

    def replayer(
        self,
        emit: Emit,
        *,
        check: bool = False,
        drain: bool = False,
        on_step: Callable[[int], None] | None = None,
        observer: Observer | None = None,
        on_left: Callable[[int, list[tuple[Task, str, str]] | None], None] | None = None,
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
