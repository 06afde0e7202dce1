"""engine/levels/task/states.py: a trace cut at any step and begun from the policy's state
there replays to exactly the full replay's batches from that step on, and its end record
(every built-in, both decode-first modes, every step, both cores, and across them)."""

from __future__ import annotations

import random
import subprocess
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.engine.levels.task.states import state_at
from schedcli.engine.run import open_replay
from schedcli.model.steps import Emitted, as_record
from tests.helpers import lines_from_the_other_core
from tests.policies.test_snapshot import PARAMS, POLICIES, Op, _random_op, ops


def trace_of(name: str, sequence: list[Op]) -> bytes:
    """The ops as an explicit trace under policy ``name`` (``decode-first/reference``:
    decode-first with compat=reference)."""
    header = {"schedcli": 1, "policy": name.partition("/")[0], "params": PARAMS[name]}
    lines: list[dict[str, Any]] = [header]
    for op in sequence:
        if op[0] == "submit":
            tasks = []
            for tid, sid, kind, size, priority, output in op[1]:
                task = {"tid": tid, "sid": sid, "kind": kind}
                task["size"] = 1 if kind == "decode" and size < 5 else size
                if priority:
                    task["priority"] = priority
                if output is not None:
                    task["produce_output"] = output
                tasks.append(task)
            lines.append({"op": "submit", "tasks": tasks})
        elif op[0] == "cancel":
            lines.append({"op": "cancel", "sid": op[1]})
        elif op[0] == "clear":
            lines.append({"op": "clear"})
        else:
            lines.append({"op": "get_work"})
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def dump(data: bytes, explaining: bool = False) -> list[bytes]:
    """The replay's dump lines (the records as the JSONL dump writes them)."""
    out: list[Emitted] = []
    with open_replay("t.jsonl", data=data) as opened:
        if explaining:
            opened.explain()
        opened.replayer(out.append, drain=True).replay()
    return [orjson.dumps(as_record(r)) for r in out]


def batches_from(lines: list[bytes], step: int) -> list[bytes]:
    return [x for x in lines if x.startswith(b'{"step"') and orjson.loads(x)["step"] >= step]


def steps_of(data: bytes) -> int:
    return data.count(b'"op":"get_work"')


def check_every_step(data: bytes, explaining: bool) -> None:
    full = dump(data, explaining)
    for step in range(steps_of(data)):
        cut = b"".join(state_at("t.jsonl", step, data=data))
        replayed = dump(cut, explaining)
        assert batches_from(replayed, step) == batches_from(full, step), (step, cut)
        assert replayed[-1] == full[-1], (step, cut)  # the end record


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=60, deadline=None)
@given(sequence=ops, explaining=st.booleans())
def test_a_trace_cut_at_any_step_from_its_state_replays_the_full_replays_batches(
    name: str, sequence: list[Op], explaining: bool
) -> None:
    check_every_step(trace_of(name, sequence), explaining)


# --- both cores --------------------------------------------------------------------------


def cuts(seed: int) -> list[bytes]:
    """For each policy and a seeded run of ops: its trace cut at every step, as lines."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for name in POLICIES:
        data = trace_of(name, [_random_op(rng) for _ in range(40)])
        for step in range(steps_of(data)):
            out.append(
                orjson.dumps(
                    [data.decode(), step, b"".join(state_at("t", step, data=data)).decode()]
                )
            )
    return out


def test_a_state_the_other_core_wrote_replays_here_to_the_same_batches() -> None:
    theirs = lines_from_the_other_core("tests.engine.test_states", "cuts", 11)
    assert theirs == cuts(11)  # the same state lines, byte for byte
    for line in theirs:
        data, step, cut = orjson.loads(line)
        full = dump(data.encode())
        replayed = dump(cut.encode())
        assert batches_from(replayed, step) == batches_from(full, step)
        assert replayed[-1] == full[-1]


SNAPSHOTS = "tests.plugin_policies:Snapshots"
PLUGIN_TRACE = (
    b'{"schedcli": 1, "params": {"max_batch_tokens": 20}}\n'
    b'{"op":"submit","tid":1,"sid":1,"kind":"prefill","size":8}\n'
    b'{"op":"submit","tid":2,"sid":2,"kind":"prefill","size":4}\n'
    b'{"op":"get_work"}\n{"op":"submit","tid":3,"sid":1,"kind":"prefill","size":8}\n'
    b'{"op":"get_work"}\n{"op":"get_work"}\n'
)


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    from tests.helpers import run_cli

    return run_cli(*args)


def test_a_plugin_whose_restore_raises_is_reported_as_its_crash_not_an_internal_error(
    tmp_path: Any,
) -> None:
    trace = tmp_path / "boom.jsonl"
    trace.write_bytes(
        b'{"schedcli":1,"policy":"snapshots","params":{"max_batch_tokens":20}}\n'
        b'{"op":"state","step":1,"state":{"version":1,"policy":"snapshots","queued":'
        b'[[{"tid":2,"sid":1,"kind":"prefill","size":8,"produce_output":true}]],'
        b'"order":[99]},"ledger":{"accepted":4,"dispatched":3,"cancelled":0,"rejected":0,'
        b'"rejected_tasks":0,"tokens":13}}\n{"op":"get_work","expect":[2]}\n'
    )
    for command in ("replay", "validate"):
        r = _cli(command, str(trace), "-p", SNAPSHOTS)
        assert r.returncode == 2, r.stderr
        assert b"policy 'snapshots' raised in restore()" in r.stderr
        assert b"KeyError: 99" in r.stderr and b"internal error" not in r.stderr


def test_a_plugin_whose_snapshot_raises_is_reported_as_its_crash(tmp_path: Any) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(PLUGIN_TRACE)
    out = str(tmp_path / "cut.jsonl")
    r = _cli(
        "explain",
        str(trace),
        "--step",
        "1",
        "--as-trace",
        "-o",
        out,
        "-p",
        "tests.plugin_policies:SnapshotRaises",
    )
    assert r.returncode == 2, r.stderr
    assert b"policy 'snapshot-raises' raised in snapshot() at step 1" in r.stderr
    assert b"ValueError: no state today" in r.stderr


def test_a_plugin_whose_snapshot_is_not_json_broke_the_contract_naming_the_value(
    tmp_path: Any,
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(PLUGIN_TRACE)
    out = str(tmp_path / "cut.jsonl")
    r = _cli(
        "explain",
        str(trace),
        "--step",
        "1",
        "--as-trace",
        "-o",
        out,
        "-p",
        "tests.plugin_policies:SnapshotNotJson",
    )
    assert r.returncode == 3, r.stderr
    assert b"broke the Scheduler contract" in r.stderr
    assert b"state.order[0] of type object (not JSON)" in r.stderr


def test_a_cut_trace_under_a_plugin_names_it_by_its_import_string_as_a_recording_does(
    tmp_path: Any,
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(PLUGIN_TRACE)
    out = tmp_path / "cut.jsonl"
    r = _cli("explain", str(trace), "--step", "1", "--as-trace", "-o", str(out), "-p", SNAPSHOTS)
    assert r.returncode == 0, r.stderr
    assert orjson.loads(out.read_bytes().splitlines()[0])["policy"] == SNAPSHOTS
    r = _cli("replay", "--check", str(out), "-p", SNAPSHOTS)
    assert r.returncode == 0, r.stderr
