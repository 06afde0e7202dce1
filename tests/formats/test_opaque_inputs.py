"""Opaque inputs in traces: a task's ``prepared`` (an ExecuTorch PreparedInput's backing size
and the slice's offset) is read, checked, carried to the dump and written back, and never
changes what a policy decides."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import Task
from schedcli.catalog.registry import build_policy
from schedcli.formats.trace import TraceReader
from schedcli.policies import BUILTIN_POLICIES
from schedcli.record import RecordingScheduler
from tests.helpers import run_cli

POLICIES = sorted(BUILTIN_POLICIES)


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _read(data: bytes) -> list[Task]:
    return [t for e in TraceReader(io.BytesIO(data), "t.jsonl") for t in e.tasks or []]


CHUNKS: dict[str, Any] = {
    "op": "submit",
    "tasks": [
        {"tid": 1, "sid": 1, "kind": "prefill", "size": 4, "prepared": {"size": 10, "offset": 0}},
        {"tid": 2, "sid": 1, "kind": "prefill", "size": 6, "prepared": {"size": 10, "offset": 4}},
    ],
}
DECODE = {"op": "submit", "tid": 3, "sid": 1, "kind": "decode", "size": 1}


def test_a_prepared_input_is_read_as_its_backing_size_and_the_slices_offset() -> None:
    inline = {**DECODE, "prepared": {"offset": 0, "size": 1}}
    data = b"".join(orjson.dumps(e) + b"\n" for e in [CHUNKS, inline, {**DECODE, "tid": 4}])
    tasks = _read(data)
    assert [t.prepared for t in tasks] == [(10, 0), (10, 4), (1, 0), None]
    assert all(t.tokens is None for t in tasks)
    assert [type(t.prepared) for t in tasks[:3]] == [tuple] * 3


BAD = [
    ({**DECODE, "tokens": [5], "prepared": {"size": 1, "offset": 0}}, "submit has both tokens "),
    ({**DECODE, "size": 4, "prepared": {"size": 4, "offset": 1}}, "runs past its prepared input"),
    ({**DECODE, "prepared": {"size": "4", "offset": 0}}, "prepared.size must be an integer"),
    ({**DECODE, "prepared": {"size": 4.0, "offset": 0}}, "prepared.size must be an integer"),
    ({**DECODE, "prepared": {"size": True, "offset": 0}}, "prepared.size must be an integer"),
    ({**DECODE, "prepared": {"size": 0, "offset": 0}}, "prepared.size must be >= 1"),
    ({**DECODE, "prepared": {"size": 4, "offset": -1}}, "prepared.offset must be >= 0"),
    ({**DECODE, "prepared": {"size": 4, "offset": 0.5}}, "prepared.offset must be an integer"),
    ({**DECODE, "prepared": {"size": 2**63, "offset": 0}}, "prepared.size is beyond the 64-bit"),
    ({**DECODE, "prepared": {"size": 4}}, "prepared has no offset"),
    ({**DECODE, "prepared": {"size": 4, "offset": 0, "of": 1}}, "unknown field 'of' in prepared"),
    ({**DECODE, "prepared": [4, 0]}, "prepared must be an object"),
    ({**DECODE, "prepared": 4}, "prepared must be an object"),
    (
        {"op": "submit", "tasks": [CHUNKS["tasks"][0], {**CHUNKS["tasks"][1], "size": 7}]},
        "task 1's slice runs past its prepared input: prepared.offset 4 + size 7 > "
        "prepared.size 10",
    ),
    (
        {"op": "submit", "tasks": [{**CHUNKS["tasks"][0], "prepared": {"size": -3, "offset": 0}}]},
        "prepared.size must be >= 1",
    ),
]


@pytest.mark.parametrize(("line", "words"), BAD, ids=[w for _, w in BAD])
def test_a_bad_prepared_input_is_exit_2_at_its_line_in_replay_and_validate_alike(
    tmp_path: Path, line: dict[str, Any], words: str
) -> None:
    trace = _write(tmp_path / "t.jsonl", [{"schedcli": 1}, DECODE, line, {"op": "get_work"}])
    replayed = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    validated = run_cli("validate", str(trace))
    assert replayed.returncode == validated.returncode == 2
    refusal = replayed.stderr.decode().splitlines()[0]
    assert refusal.startswith(f"{trace}:3: ") and words in refusal, refusal
    assert refusal in validated.stderr.decode().splitlines()
    assert "Traceback" not in replayed.stderr.decode() + validated.stderr.decode()


PREPARED = {"size": 1, "offset": 0}


def test_a_decode_may_carry_a_prepared_input(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl", [{**DECODE, "prepared": PREPARED}, {"op": "get_work", "expect": [3]}]
    )
    r = run_cli("replay", str(trace), "--check")
    assert r.returncode == 0, r.stderr
    entry = orjson.loads(r.stdout.splitlines()[0])["batch"][0]
    assert entry == {"tid": 3, "sid": 1, "kind": "decode", "size": 1, "prepared": PREPARED}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_recording_with_prepared_inputs_replays_check_under_every_policy(
    tmp_path: Path, policy: str
) -> None:
    path = tmp_path / "rec.jsonl"
    with RecordingScheduler(build_policy(policy), path) as rec:
        assert rec.submit(
            [
                Task(1, 1, "prefill", 100, position=0, prepared=(160, 0)),
                Task(2, 1, "prefill", 60, position=100, prepared=(160, 100)),
            ]
        )
        assert rec.submit([Task(3, 2, "prefill", 8, tokens=list(range(8)))])
        rec.get_work()
        assert rec.submit([Task(4, 1, "decode", 1, position=160, prepared=(1, 0))])
        assert rec.submit([Task(5, 2, "decode", 1, position=8)])
        while rec.has_work():
            rec.get_work()
    recorded = [t.prepared for t in _read(path.read_bytes())]
    assert recorded == [(160, 0), (160, 100), None, (1, 0), None]
    r = run_cli("replay", str(path), "--check", "--require-all", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr


# --- properties ---------------------------------------------------------------------------


@st.composite
def traces(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Submits (groups of tasks, some with a prepared input), cancels and get_works; every
    tid is new, so a dump's entry names its task."""
    events: list[dict[str, Any]] = []
    tid = 0
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["submit", "submit", "submit", "get_work", "cancel"]))
        if op == "get_work":
            events.append({"op": "get_work"})
            continue
        sid = draw(st.integers(0, 3))
        if op == "cancel":
            events.append({"op": "cancel", "sid": sid})
            continue
        tasks = []
        for _ in range(draw(st.integers(1, 3))):
            tid += 1
            kind = draw(st.sampled_from(["prefill", "decode"]))
            size = 1 if kind == "decode" else draw(st.integers(1, 300))
            task: dict[str, Any] = {"tid": tid, "sid": sid, "kind": kind, "size": size}
            if draw(st.booleans()):
                offset = draw(st.integers(0, 2**62))
                extra = draw(st.integers(0, 5))
                task["prepared"] = {"size": offset + size + extra, "offset": offset}
            tasks.append(task)
        inline = len(tasks) == 1 and draw(st.booleans())
        events.append({"op": "submit", **tasks[0]} if inline else {"op": "submit", "tasks": tasks})
    return events


def _without_prepared(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def strip(task: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in task.items() if k != "prepared"}

    return [
        {**strip(e), **({"tasks": [strip(t) for t in e["tasks"]]} if "tasks" in e else {})}
        for e in events
    ]


def _dump(path: Path, events: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    _write(path, events)
    r = run_cli("replay", str(path), "-p", policy, "-f", "jsonl")
    assert r.returncode == 0, r.stderr
    return [orjson.loads(line) for line in r.stdout.splitlines()]


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@PROPERTY
@given(events=traces(), policy=st.sampled_from(POLICIES))
def test_a_policy_decides_the_same_with_or_without_prepared_inputs(
    tmp_path_factory: pytest.TempPathFactory, events: list[dict[str, Any]], policy: str
) -> None:
    folder = tmp_path_factory.mktemp("prepared")
    with_it = _dump(folder / "with.jsonl", events, policy)
    without = _dump(folder / "without.jsonl", _without_prepared(events), policy)
    prepared = {
        t["tid"]: t.get("prepared")
        for e in events
        for t in (e.get("tasks") or [e] if e["op"] == "submit" else [])
    }
    for record in with_it:
        for entry in record.get("batch", []):
            # Each dispatched task carries its own prepared input, and nothing else differs.
            assert entry.get("prepared") == prepared[entry["tid"]]
            entry.pop("prepared", None)
    assert with_it == without


@PROPERTY
@given(events=traces(), policy=st.sampled_from(POLICIES))
def test_prepared_inputs_survive_a_recording_and_its_replay(
    tmp_path_factory: pytest.TempPathFactory, events: list[dict[str, Any]], policy: str
) -> None:
    # Read, recorded as a live scheduler would be called, read back: the same prepared
    # inputs, and the recording replays --check.
    data = b"".join(orjson.dumps(e) + b"\n" for e in events)
    out = io.BytesIO()
    rec = RecordingScheduler(build_policy(policy), out)
    submitted: list[tuple[Any, tuple[int, int] | None]] = []
    for e in TraceReader(io.BytesIO(data), "t.jsonl"):
        if e.op == "submit":
            assert e.tasks is not None
            submitted += [(t.tid, t.prepared) for t in e.tasks]
            rec.submit(e.tasks)
        elif e.op == "cancel":
            assert e.sid is not None
            rec.cancel(e.sid)
        else:
            rec.get_work()
    rec.get_work()  # at least one batch to check, then the rest
    while rec.has_work():
        rec.get_work()
    rec.close()
    recorded = out.getvalue()
    assert [(t.tid, t.prepared) for t in _read(recorded)] == submitted
    path = tmp_path_factory.mktemp("prepared") / "rec.jsonl"
    path.write_bytes(recorded)
    r = run_cli("replay", str(path), "--check", "--require-all", "-o", str(path.with_suffix(".d")))
    assert r.returncode == 0, r.stderr
