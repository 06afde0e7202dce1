"""A task-level trace cut at a step and begun from the policy's state there
(docs/trace-format.md, "Traces that begin from a state"): ``state_at`` for one step,
``states_at`` for several in one replay (shrink's windows, ``explain --as-trace``).

The state at step S is taken just before S's get_work is called: the policy's
``snapshot()`` and the ledger's counts, after every event before that get_work. The cut
trace is the header (the policy and every parameter it ran with), the state line, and the
trace's own lines from S's get_work on, byte for byte: replayed, it gives the full
replay's batch records from S on, and its end record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import orjson

from ....catalog.registry import policy_reference
from ....formats.schema import FORMAT_VERSION, STATE_OP
from ....formats.trace import Event
from ....model.errors import InputError, InvariantError, SchedcliError, UsageError
from ....model.limits import INT_MAX, INT_MIN
from ....model.records import discard
from ....model.steps import Emitted, Step
from ....streams.source import DEFAULT_MAX_LINE_BYTES, numbered_lines
from ...clock import EXPLICIT, STEPPED
from ...run import open_replay
from .opened import OpenTrace
from .replay import Replayer


def not_json(value: object, field: str) -> str | None:
    """The first value under ``value`` that a state cannot hold, as ``field = value``: a
    state is plain JSON (objects with string keys, lists, strings, booleans, null, finite
    floats, and integers within signed 64 bits, which JSON readers keep exact)."""
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        ok = INT_MIN <= value <= INT_MAX
        return None if ok else f"{field} = {value} (an integer past signed 64 bits)"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{field} = {value!r} (not finite)"
    if isinstance(value, list):
        for i, v in enumerate(value):
            bad = not_json(v, f"{field}[{i}]")
            if bad is not None:
                return bad
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{field} with the key {k!r} (not a string)"
            bad = not_json(v, f"{field}.{k}")
            if bad is not None:
                return bad
        return None
    return f"{field} of type {type(value).__name__} (not JSON)"


class Taken:
    """The state at one step: the get_work's line in the trace, and the state line."""

    def __init__(self, step: int, line: int, state_line: dict[str, Any]) -> None:
        self.step = step
        self.line = line
        self.state_line = state_line


def state_line(engine: Replayer, step: int) -> dict[str, Any]:
    """The state line of a replay standing just before its get_work numbered ``step``."""
    totals = engine.totals
    try:
        state = engine.policy.snapshot()
    except SchedcliError:
        raise
    except Exception as e:  # the policy's own code raised, as in get_work
        raise engine.crashed("snapshot()", e) from e
    bad = not_json(state, "state")
    if bad is not None:  # a state is written as JSON: anything else breaks the contract
        raise engine.broken(f"snapshot() returned {bad}, which a state cannot hold (plain JSON)")
    return {
        "op": STATE_OP,
        "step": step,
        "state": state,
        "ledger": {
            "accepted": totals.accepted,
            "dispatched": totals.dispatched,
            "cancelled": totals.cancelled,
            "rejected": totals.rejected,
            "rejected_tasks": totals.rejected_tasks,
            "tokens": totals.tokens,
        },
    }


def header_line(opened: OpenTrace) -> dict[str, Any]:
    """A cut trace's header: the policy it ran under with every parameter, and the
    trace's own meta (a recorder's ``recorded_by`` keeps its submits' outcomes checked)."""
    # A plugin with no registered name is written as its import string, as the recorder
    # writes it: its class's own name is no policy a replay can load.
    reference = policy_reference(type(opened.policy))
    header: dict[str, Any] = {
        "schedcli": FORMAT_VERSION,
        "policy": reference if ":" in reference else opened.policy_name,
        "params": opened.full_params,
    }
    meta = opened.reader.header.meta if opened.reader.header is not None else None
    if meta is not None:
        header["meta"] = meta
    return header


def _items(opened: OpenTrace) -> Iterator[tuple[int, Any]]:
    for line, items in opened.reader.runs():
        for item in items:
            yield line, item
            line += 1


def take_states(
    opened: OpenTrace,
    steps: Collection[int],
    *,
    check: bool = False,
    on_engine: Callable[[Replayer], None] | None = None,
) -> dict[int, Taken]:
    """One replay of ``opened`` (task level, explicit), the state taken just before each
    get_work numbered in ``steps``; it stops after the last. A step the trace has no
    get_work for is not in the answer."""
    wanted = set(steps)
    taken: dict[int, Taken] = {}
    if not wanted:
        return taken
    last = max(wanted)
    engine = opened.replayer(discard, check=check)
    if on_engine is not None:
        on_engine(engine)
    clock = engine.clock
    for line, item in _items(opened):
        if isinstance(item, Event) and item.op == "get_work":
            if clock.mode is STEPPED:
                break  # a get_work in a stepped trace: refused, by the replay alone
            step = clock.next_explicit
            if step in wanted:
                taken[step] = Taken(step, line, state_line(engine, step))
                if step == last:
                    return taken
        engine.apply(item, line)
    if clock.mode is not EXPLICIT:
        raise UsageError(
            f"{opened.name}: a state is taken before a get_work event, and this trace has "
            f"none (its step mode is {clock.mode}); a state is taken in explicit traces only"
        )
    return taken


def cut_lines(
    path: str,
    taken: Taken,
    header: Mapping[str, Any],
    *,
    until: int | None = None,
    data: bytes | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> list[bytes]:
    """The cut trace's lines (each ending in a newline): ``header``, the state line and
    the trace's lines from the state's get_work on (up to line ``until``, inclusive)."""
    out = [orjson.dumps(dict(header)) + b"\n", orjson.dumps(taken.state_line) + b"\n"]
    out.extend(raw + b"\n" for _, raw in raw_lines(path, taken.line, until, data, max_line_bytes))
    return out


def raw_lines(
    path: str,
    first: int,
    until: int | None = None,
    data: bytes | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """The trace's non-blank lines numbered ``first`` to ``until`` (inclusive), as read."""
    import io

    from ....streams.source import display_name, open_binary

    if data is not None:
        stream_cm: Any = _held(io.BytesIO(data))
    else:
        stream_cm = open_binary(path, display_name(path))
    with stream_cm as stream:
        for lineno, raw, _ in numbered_lines(stream, path, max_line_bytes=max_line_bytes):
            if until is not None and lineno > until:
                return
            if lineno >= first:
                yield lineno, raw


class _held:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        pass


def state_at(
    path: str,
    step: int,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    data: bytes | None = None,
    rest: bool = True,
) -> list[bytes]:
    """The trace at ``path`` cut at ``step``, begun from the policy's state there: its
    lines (docs/trace-format.md, "Traces that begin from a state"); without ``rest``, only
    up to the step's own get_work. Bad usage where the trace is not explicit, has no such
    step, or its policy has no snapshots."""
    with open_replay(path, policy=policy, params=params, data=data) as opened:
        if not isinstance(opened, OpenTrace):
            raise UsageError(f"{opened.name}: request-level policies have no snapshots")
        taken = take_states(opened, [step]).get(step)
        if taken is None:
            raise InputError(opened.name, None, f"there is no step {step} to take a state at")
        header = header_line(opened)
    return cut_lines(path, taken, header, until=None if rest else taken.line, data=data)


def step_as_trace(
    path: str,
    step: int,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    data: bytes | None = None,
) -> list[bytes]:
    """Step ``step`` from its state, as a standalone trace to keep as a regression test:
    the header, the state line and the step's own get_work, its ``expect`` the batch the
    policy gave there (so ``replay --check`` passes on it while the policy decides the
    same). A step whose batch breaks the contract is written without an expect: its
    replay is that break (exit 3)."""
    lines = state_at(path, step, policy=policy, params=params, data=data, rest=False)
    get_work = orjson.loads(lines[2])
    get_work.pop("expect", None)
    bare = b"".join(lines[:2]) + orjson.dumps(get_work) + b"\n"
    records: list[Emitted] = []
    try:
        with open_replay("step", policy=policy, params=params, data=bare) as opened:
            opened.replayer(records.append).replay()
    except InvariantError:
        return [*lines[:2], orjson.dumps(get_work) + b"\n"]
    batch = next(r for r in records if isinstance(r, Step))
    get_work["expect"] = [entry["tid"] for entry in batch.batch]
    return [*lines[:2], orjson.dumps(get_work) + b"\n"]


def states_at(
    path: str, policy: str | None, params: Mapping[str, object], steps: list[int]
) -> dict[int, Taken] | None:
    """The state line before each of ``steps``' get_work in the trace at ``path`` (shrink's
    stated windows); None where there are none to take: a request-level trace, a policy
    without snapshots, a stepped or plain trace, a trace refused."""
    try:
        with open_replay(
            path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
        ) as opened:
            if not isinstance(opened, OpenTrace):
                return None
            return take_states(opened, steps)
    except SchedcliError:
        return None
