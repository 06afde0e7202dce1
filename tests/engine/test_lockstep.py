"""engine/lockstep.py: how ``diff`` replays one trace under two policies, line by line,
each side's steps taken in turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from schedcli.engine.lockstep import twin
from schedcli.engine.run import open_replay
from schedcli.formats.trace import Event
from schedcli.model.steps import Step
from tests.helpers import EXAMPLES, pf

HEADER = {"schedcli": 1, "policy": "decode-first", "params": {"max_batch_tokens": 8,
          "max_decode_sequences": 2, "max_prefill_chunk_size": 4}}  # fmt: skip


def in_lockstep(data: bytes, other: str) -> tuple[list[tuple[str, Any]], int]:
    """Every record of both sides as emitted, in order, each tagged with its side; and how
    many times the sides were compared."""
    log: list[tuple[str, Any]] = []
    compared = [0]
    with open_replay("t.jsonl", data=data, note=lambda _: None) as opened:
        a = opened.replayer(lambda r: log.append(("a", r)), drain=True)
        sibling = opened.sibling(other, {})
        b = sibling.replayer(lambda r: log.append(("b", r)), drain=True)
        a.lockstep(b, lambda: compared.__setitem__(0, compared[0] + 1))
    return log, compared[0]


def alone(data: bytes, policy: str | None) -> list[Any]:
    records: list[Any] = []
    with open_replay("t.jsonl", data=data, policy=policy, note=lambda _: None) as opened:
        opened.replayer(records.append, drain=True).replay()
    return records


def test_a_line_that_runs_several_steps_runs_them_in_turns() -> None:
    tasks = [{"tid": i, "sid": i, "kind": "prefill", "size": 4} for i in range(8)]
    late = {"op": "submit", "step": 4, "tid": 9, "sid": 9, "kind": "decode", "size": 1}
    lines = [HEADER, {"op": "submit", "step": 0, "tasks": tasks}, late]
    data = b"".join(orjson.dumps(x) + b"\n" for x in lines)
    log, _ = in_lockstep(data, "fcfs")
    steps = [(side, r.step) for side, r in log if isinstance(r, Step)]
    # Each step of side a is followed by the same step of side b before a moves on.
    assert steps[:8] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2),
                         ("a", 3), ("b", 3)]  # fmt: skip


@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda p: p.stem)
def test_each_side_in_lockstep_writes_what_it_writes_alone(trace: Path) -> None:
    data = trace.read_bytes()
    log, compared = in_lockstep(data, "fcfs")
    assert [r for side, r in log if side == "a"] == alone(data, None)
    assert [r for side, r in log if side == "b"] == alone(data, "fcfs")
    assert compared >= 1


def test_a_twin_has_tasks_of_its_own_and_the_same_fields() -> None:
    group = [pf(1, 1, 4), pf(2, 1, 4)]
    copy = twin(group)
    assert isinstance(copy, list)
    assert all(c is not t for c, t in zip(copy, group, strict=True))
    assert [(c.tid, c.sid, c.kind, c.size) for c in copy] == [
        (1, 1, group[0].kind, 4),
        (2, 1, group[1].kind, 4),
    ]
    event = Event("submit", 3, 2, 0.5, tasks=group, expect=[1], meta={"m": 1})
    same = twin(event)
    assert isinstance(same, Event) and same.tasks is not None
    assert all(c is not t for c, t in zip(same.tasks, group, strict=True))
    assert (same.op, same.line, same.step, same.t, same.expect, same.meta) == (
        "submit", 3, 2, 0.5, [1], {"m": 1})  # fmt: skip
    get_work = Event("get_work", 4, None)
    assert twin(get_work) is get_work  # nothing to share
