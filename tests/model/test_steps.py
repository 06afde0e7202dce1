"""model/steps.py: the typed step a replay hands its outputs, and the dump record it is."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.formats.step_lines import StepLines
from schedcli.formats.writer import JsonlWriter, task_entry
from schedcli.model.steps import Step, as_record, step_or_record
from schedcli.model.task import Task
from schedcli.model.task import TaskKind as Kind

ids = st.integers(-(2**63), 2**63 - 1) | st.sampled_from(["a", "7", "é", ""])
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def tasks(draw: st.DrawFn) -> Task:
    kind = draw(st.sampled_from(list(Kind)))
    meta = draw(st.none() | st.sampled_from([{"k": 1}, [2], "m"]))
    return Task(draw(ids), draw(ids), kind, draw(st.integers(1, 5000)), meta=meta)


def written(step: Step) -> bytes:
    out = io.BytesIO()
    JsonlWriter(out)(step)
    return out.getvalue()


def test_a_task_level_step_is_the_dump_record_key_for_key() -> None:
    entry = task_entry(Task(1, 2, Kind.DECODE, 1))
    record = Step(3, [entry], 1, 4).record()
    assert list(record) == ["step", "batch", "tokens", "queued"]
    assert record == {"step": 3, "batch": [entry], "tokens": 1, "queued": 4}


def test_a_request_level_step_adds_running_preempted_and_finished_in_that_order() -> None:
    record = Step(0, [], 0, 1, 2, ["a"], [7]).record()
    assert list(record) == [
        "step", "batch", "tokens", "queued", "running", "preempted", "finished"
    ]  # fmt: skip
    assert (record["running"], record["preempted"], record["finished"]) == (2, ["a"], [7])


@PROPERTY
@given(step=st.integers(0, 2**40), batch=st.lists(tasks(), max_size=8), queued=st.integers(0, 99))
def test_the_dump_writes_a_step_as_the_batch_written_straight_writes_it(
    step: int, batch: list[Task], queued: int
) -> None:
    """Two paths to one line: a step's record() through the writer, and StepLines (the
    lone dump's fast path, which writes from the tasks and builds no Step)."""
    tokens = sum(t.size for t in batch)
    straight = io.BytesIO()
    StepLines(JsonlWriter(straight)).write(step, batch, tokens, queued)
    assert written(Step(step, [task_entry(t) for t in batch], tokens, queued)) == (
        straight.getvalue()
    )


@PROPERTY
@given(
    batch=st.lists(tasks(), max_size=5),
    request=st.none() | st.tuples(st.integers(0, 9), st.lists(ids), st.lists(ids)),
)
def test_a_step_read_back_from_its_record_is_the_same_step(
    batch: list[Task], request: tuple[int, list[Any], list[Any]] | None
) -> None:
    extra = () if request is None else request
    step = Step(5, [task_entry(t) for t in batch], 9, 2, *extra)
    line = written(step)
    again = Step.from_record(orjson.loads(line))
    assert written(again) == line
    assert again.record() == step.record() == as_record(step)


@pytest.mark.parametrize(
    "record",
    [
        {"step": 1, "batch": [], "tokens": 0, "queued": 0, "note": "x"},  # a key too many
        {"step": 1, "batch": [], "queued": 0},  # no tokens
        {"step": True, "batch": [], "tokens": 0, "queued": 0},  # a bool is no step number
        {"step": 1, "batch": {}, "tokens": 0, "queued": 0},
        {"step": 1, "batch": [3], "tokens": 0, "queued": 0},
        {"step": 1, "batch": [], "tokens": 0, "queued": 0, "running": 1, "preempted": []},
        {
            "step": 1,
            "batch": [],
            "tokens": 0,
            "queued": 0,
            "running": "1",
            "preempted": [],
            "finished": [],
        },
    ],
)
def test_a_step_record_from_a_dump_that_is_not_one_is_refused(record: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="step record"):
        Step.from_record(record)


def test_other_records_pass_through_as_the_dump_has_them() -> None:
    cancel = {"line": 3, "op": "cancel", "sid": 1, "dropped": [2]}
    assert step_or_record(cancel) is cancel and as_record(cancel) is cancel
    read = step_or_record({"step": 0, "batch": [], "tokens": 0, "queued": 0})
    assert isinstance(read, Step) and read.queued == 0
