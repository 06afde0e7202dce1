"""One suite of contract properties, run once per trace level in ``levels.table.LEVELS``:
a level added to the table gets every test here (with a policy named in ``POLICIES``).

Each level's traces are made the way a user makes one: a workload simulated under a policy
of that level, recorded (``engine.requests.simulate``), then replayed through the level's
own interface (``open_replay``, ``Level.events``), in this process.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.catalog.registry import build_policy
from schedcli.engine.cost import CostModel
from schedcli.engine.ledger import Totals
from schedcli.engine.levels.table import LEVELS, level_of, level_of_policy
from schedcli.engine.run import open_replay
from schedcli.formats.trace import open_trace
from schedcli.formats.workload import Request
from schedcli.formats.writer import JsonlWriter
from schedcli.model.errors import InputError, StepMismatch
from schedcli.model.steps import Step
from tests.helpers import TOY_NAME, UPDATE_GOLDENS

# The policy each level's traces are simulated and replayed under (one that needs no extra).
POLICIES = {"task": "decode-first", "request": TOY_NAME}
GOLDEN = Path(__file__).resolve().parent / "golden" / "levels"
NAME = "conformance.jsonl"
PROPERTY = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

levels = pytest.mark.parametrize("level", sorted(LEVELS))


def record(level: str, workload: list[Request]) -> bytes:
    """The trace of ``workload`` simulated under ``level``'s policy, as the file it writes."""
    spec = POLICIES[level]
    built = build_policy(spec, {}, level=None)
    built.promise_serial_calls()
    out = io.BytesIO()
    params = built.params()
    at = level_of_policy(built)
    writer = at.trace_writer(out, built, spec, params, None)
    size = at.chunking(built, None, spec)
    at.simulate(
        workload, built, policy_name=spec, params=params, chunk_size=size, cost=CostModel(),
        trace=writer,
    )  # fmt: skip
    return out.getvalue()


def replay(data: bytes, *, check: bool = False, drain: bool = False) -> tuple[bytes, Totals]:
    """What a replay of ``data`` writes (its records, as JSONL) and its totals."""
    out = io.BytesIO()
    with open_replay(NAME, data=data, note=lambda _: None) as opened:
        engine = opened.replayer(JsonlWriter(out), check=check, drain=drain)
        totals = engine.replay()
    return out.getvalue(), totals


def validate(data: bytes) -> tuple[list[InputError], int]:
    """What ``validate`` finds in ``data`` through the level's own count of its events."""
    problems: list[InputError] = []
    with open_trace(NAME, data=data, on_error=problems.append) as reader:
        events, _ = level_of(reader.header).events(reader, problems.append, None)
    return problems, events


@st.composite
def workloads(draw: st.DrawFn) -> list[Request]:
    count = draw(st.integers(1, 12))
    t, requests = 0.0, []
    for sid in range(count):
        t += draw(st.sampled_from([0.0, 0.001, 0.02]))
        cancel = draw(st.none() | st.sampled_from([0.0, 0.004, 0.03]))
        prompt, output = draw(st.integers(1, 700)), draw(st.integers(1, 12))
        requests.append(Request(sid, t, prompt, output, cancel_after=cancel))
    return requests


FIXED = [
    Request(i, i * 0.002, 40 + 97 * i % 600, 1 + i % 7, cancel_after=0.01 if i % 5 == 3 else None)
    for i in range(16)
]


def cut(data: bytes, keep: int) -> bytes:
    """The header and the first ``keep`` events: a recording cut short, tasks still queued."""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[: 1 + keep])


def test_every_level_in_the_table_has_a_policy_to_run_the_suite_with() -> None:
    assert sorted(POLICIES) == sorted(LEVELS)


@levels
def test_a_simulated_trace_is_of_its_level(level: str) -> None:
    with open_replay(NAME, data=record(level, FIXED[:3])) as opened:
        assert opened.level is LEVELS[level]


@levels
@PROPERTY
@given(workload=workloads(), keep=st.integers(0, 400))
def test_every_accepted_task_is_dispatched_cancelled_or_reported_queued(
    level: str, workload: list[Request], keep: int
) -> None:
    _, t = replay(cut(record(level, workload), keep))
    assert t.accepted == t.dispatched + t.cancelled + t.queued
    assert len(t.still_queued) == t.queued


@levels
@PROPERTY
@given(workload=workloads())
def test_a_drained_replay_leaves_nothing_queued(level: str, workload: list[Request]) -> None:
    _, totals = replay(cut(record(level, workload), 5), drain=True)
    assert totals.queued == 0 and totals.still_queued == []


@levels
@PROPERTY
@given(workload=workloads())
def test_a_recording_replays_under_its_own_policy_without_a_difference(
    level: str, workload: list[Request]
) -> None:
    data = record(level, workload)
    with open_replay(NAME, data=data, note=lambda _: None) as opened:
        engine = opened.replayer(lambda _: None, check=True)
        engine.replay()
        # Every recorded step compared (none, where every request was cancelled at once).
        assert engine.checked == engine.check_total
        assert engine.nothing_checked == (engine.check_total == 0)


@levels
@PROPERTY
@given(workload=workloads())
def test_recording_and_replaying_are_byte_identical_across_runs(
    level: str, workload: list[Request]
) -> None:
    first, again = record(level, workload), record(level, workload)
    assert first == again
    assert replay(first)[0] == replay(again)[0]


@levels
def test_a_recorded_step_that_differs_is_reported_at_its_line(level: str) -> None:
    lines = record(level, FIXED).splitlines(keepends=True)
    # The last recorded expect, emptied: the replay's batch there no longer matches.
    at = max(i for i, line in enumerate(lines) if b'"expect"' in line)
    event = orjson.loads(lines[at])
    event["expect"] = [] if isinstance(event["expect"], list) else {**event["expect"], "batch": []}
    lines[at] = orjson.dumps(event) + b"\n"
    with pytest.raises(StepMismatch) as caught:
        replay(b"".join(lines), check=True)
    # File lines count from 1, the header is line 1.
    assert str(caught.value).startswith(f"{NAME}:{at + 1}: step ")
    assert caught.value.mismatch.line == at + 1
    assert LEVELS[caught.value.level] is LEVELS[level]
    assert LEVELS[level].difference(caught.value).rows


@levels
def test_a_replay_is_the_same_compiled_and_pure(level: str) -> None:
    """Pinned bytes: CI runs this compiled and pure (SCHEDCLI_PURE_PYTHON=1), and both
    must write them (SCHEDCLI_UPDATE_GOLDEN=1 writes a new level's)."""
    data = record(level, FIXED)
    output, _ = replay(data, check=True, drain=True)
    golden = GOLDEN / f"{level}.jsonl"
    if UPDATE_GOLDENS:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(data + b"--\n" + output)
    assert golden.read_bytes() == data + b"--\n" + output


BAD_LINES = [b"not json\n", b'{"op": "no-such-op"}\n', b"[1, 2]\n", b'{"op": 7}\n']


@levels
@PROPERTY
@given(workload=workloads(), where=st.integers(1, 10_000), bad=st.sampled_from(BAD_LINES))
def test_validate_agrees_with_replay_about_the_first_bad_line(
    level: str, workload: list[Request], where: int, bad: bytes
) -> None:
    lines = record(level, workload).splitlines(keepends=True)
    problems, events = validate(b"".join(lines))
    assert (problems, events) == ([], len(lines) - 1)  # every event of a recording is good
    at = 1 + where % (len(lines) - 1)  # any event, never the header
    lines[at] = bad
    problems, events = validate(b"".join(lines))
    assert [p.line for p in problems] == [at + 1] and events == len(lines) - 2
    with pytest.raises(InputError) as caught:
        replay(b"".join(lines))
    assert caught.value.line == at + 1 and str(caught.value) == str(problems[0])


@levels
def test_a_replay_hands_its_outputs_a_typed_step_for_each_batch(level: str) -> None:
    """Every step the engine emits is a ``Step`` (its other records JSON objects), and
    writing each as the dump does gives the level's pinned dump."""
    emitted: list[Any] = []
    with open_replay(NAME, data=record(level, FIXED), note=lambda _: None) as opened:
        totals = opened.replayer(emitted.append, check=True, drain=True).replay()
    steps = [r for r in emitted if isinstance(r, Step)]
    assert len(steps) == totals.steps > 0
    assert [s.step for s in steps] == sorted(s.step for s in steps)
    assert all(type(r) is dict and "batch" not in r for r in emitted if not isinstance(r, Step))
    out = io.BytesIO()
    write = JsonlWriter(out)
    for r in emitted:
        write(r)
    assert out.getvalue() == replay(record(level, FIXED), check=True, drain=True)[0]
