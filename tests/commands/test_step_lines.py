"""A dump's step lines are the same bytes whether the engine builds the batch record or
the dump writes them straight from the batch (a replay whose only output is the dump)."""

from __future__ import annotations

import io
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from schedcli.app.views.outputs import DumpView, Fanout, Timeline
from schedcli.engine.ledger import Ledger
from schedcli.formats.step_lines import StepLines
from schedcli.formats.writer import JsonlWriter
from schedcli.model.errors import InvariantError
from schedcli.model.task import Task
from tests.helpers import EXAMPLES, run_cli

INT64 = st.integers(-(2**63), 2**63 - 1)
IDS = st.one_of(INT64, st.text(max_size=6))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@st.composite
def batches(draw: st.DrawFn) -> list[Task]:
    """Tasks of distinct sessions (the ledger's session rules then hold), any ids and meta;
    decodes mostly of one token and no meta, the entries spelt without orjson."""
    sids = draw(st.lists(IDS, max_size=6, unique_by=lambda v: (type(v), v)))
    tids = draw(
        st.lists(IDS, min_size=len(sids), max_size=len(sids), unique_by=lambda v: (type(v), v))
    )
    tasks = []
    for tid, sid in zip(tids, sids, strict=True):
        if draw(st.booleans()):
            size, kind = draw(st.sampled_from([1, 1, 1, 2])), "decode"
        else:
            size, kind = draw(st.integers(1, 2**31)), "prefill"
        meta = draw(st.sampled_from([None, None, None]) | JSON)
        tasks.append(Task(tid, sid, kind, size, meta=meta))
    return tasks


def _refuse(message: str) -> InvariantError:
    raise AssertionError(message)


def _warn(message: str) -> None:
    raise AssertionError(message)


def _record_line(batch: list[Task], step: int, queued: int) -> bytes:
    """The step line as the engine's record makes it: the ledger's entries, then orjson."""
    ledger = Ledger(_refuse, _warn, budget=None)
    ledger.accept(batch)
    tokens, entries = ledger.dispatched(batch)
    out = io.BytesIO()
    JsonlWriter(out).write({"step": step, "batch": entries, "tokens": tokens, "queued": queued})
    return out.getvalue()


@given(batches(), st.integers(0, 2**62), st.integers(0, 2**62))
@example([Task(1, "s", "decode", 1, meta={"t": 1e16, "x": [1e-7, -0.0, 1.5e300]})], 0, 0)
@example([Task('\u2028\x00"\\é', 7, "prefill", 3, meta="\x1f")], 5, 2)
def test_a_step_line_written_from_the_batch_is_the_engines_record_byte_for_byte(
    batch: list[Task], step: int, queued: int
) -> None:
    out = io.BytesIO()
    tokens = sum(t.size for t in batch)
    StepLines(JsonlWriter(out)).write(step, batch, tokens, queued)
    assert out.getvalue() == _record_line(batch, step, queued)


def test_a_session_is_spelt_as_its_own_id_in_every_later_step() -> None:
    # 1, "1" and True: a cache of spellings keyed by id must keep them apart (1 == True).
    out = io.BytesIO()
    lines = StepLines(JsonlWriter(out))
    steps = [[Task(1, 1, "decode", 1)], [Task(2, "1", "decode", 1), Task(3, True, "decode", 1)]]
    steps += [[Task(4, True, "decode", 1)], [Task(5, 1, "decode", 1), Task(6, "x", "decode", 1)]]
    for step, batch in enumerate(steps):
        lines.write(step, batch, len(batch), 0)
    assert out.getvalue() == b"".join(_record_line(b, i, 0) for i, b in enumerate(steps))
    assert b'"sid":true' in out.getvalue() and b'"sid":"1"' in out.getvalue()


def test_only_a_lone_dump_takes_its_step_lines_from_the_batch(tmp_path: Path) -> None:
    with ExitStack() as stack:
        dump = DumpView(io.BytesIO(), stack, False)
        assert Fanout([dump]).dump is dump.step_lines
        timeline = Timeline(str(tmp_path / "t.json"), stack)
        assert Fanout([dump, timeline]).dump is None  # the timeline needs the records


def _trace_with_meta_and_text_ids(path: Path) -> Path:
    lines: list[dict[str, Any]] = [
        {"schedcli": 1, "policy": "decode-first"},
        {
            "op": "submit",
            "tasks": [
                {
                    "tid": 'a\u00e9"',
                    "sid": "s\n1",
                    "kind": "prefill",
                    "size": 40,
                    "meta": {"w": 1e16},
                },
                {
                    "tid": 2,
                    "sid": "s\n1",
                    "kind": "prefill",
                    "size": 8,
                    "meta": [0.1, None, "\u2028"],
                },
            ],
        },
        {"op": "submit", "tid": 3, "sid": 9, "kind": "decode", "size": 1, "meta": -1.5e300},
        {"op": "get_work"},
        {"op": "submit", "tid": 4, "sid": 9, "kind": "decode", "size": 1},
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


@pytest.mark.parametrize("trace", [*EXAMPLES, None], ids=lambda p: p.name if p else "meta-ids")
def test_a_dump_is_the_same_bytes_with_or_without_another_output(
    tmp_path: Path, trace: Path | None
) -> None:
    path = trace or _trace_with_meta_and_text_ids(tmp_path / "meta.jsonl")
    alone = run_cli("replay", str(path), "-f", "jsonl")
    beside = run_cli("replay", str(path), "-f", "jsonl", "--perfetto", str(tmp_path / "t.json"))
    assert alone.returncode == beside.returncode == 0, alone.stderr.decode()
    assert b'"step":' in alone.stdout
    assert alone.stdout == beside.stdout
