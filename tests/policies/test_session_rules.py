"""A session's chunks leave in order and a batch owes a session one output, in every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedcli import Task
from schedcli.engine.ledger import Ledger
from schedcli.model.errors import InvariantError
from tests.helpers import run_cli


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _chunk(tid: int, sid: int, output: bool) -> dict[str, object]:
    return {"tid": tid, "sid": sid, "kind": "prefill", "size": 2, "produce_output": output}


def test_a_chunk_dispatched_before_the_one_ahead_of_it_is_a_contract_break_in_replay(
    tmp_path: Path,
) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tasks": [_chunk(1, 7, False), _chunk(2, 7, True)]},
            {"op": "get_work"},
            {"op": "get_work"},
        ],
    )
    r = run_cli("replay", str(trace), "-p", "tests.plugin_policies:NewestFirst", "-f", "jsonl")
    assert r.returncode == 3, r.stderr
    err = r.stderr.decode()
    assert "step 0" in err and "chunk 2 of session 7 before chunk 1" in err


def test_chunks_out_of_order_in_one_batch_are_a_contract_break(tmp_path: Path) -> None:
    ledger = Ledger(InvariantError, lambda message: None, budget=None)
    a, b = Task(1, 7, "prefill", 2), Task(2, 7, "prefill", 2)
    a.produce_output, b.produce_output = False, True
    ledger.accept([a, b])
    with pytest.raises(InvariantError, match="chunk 2 of session 7 before chunk 1"):
        ledger.dispatched([b, a])


def test_chunks_in_order_across_batches_and_a_cancelled_chunk_are_fine() -> None:
    ledger = Ledger(InvariantError, lambda message: None, budget=None)
    a, b, c = (Task(i, 7, "prefill", 2) for i in (1, 2, 3))
    a.produce_output = b.produce_output = False
    c.produce_output = True
    ledger.accept([a, b, c])
    ledger.dispatched([a])
    ledger.dispatched([b, c])
    d, e = Task(4, 8, "prefill", 2), Task(5, 8, "prefill", 2)
    ledger.accept([d, e])
    ledger.cancelled(8, [d, e])
    assert not ledger.queued


def test_a_chunk_dispatched_out_of_order_is_a_contract_break_in_simulate(tmp_path: Path) -> None:
    workload = _write(
        tmp_path / "w.jsonl",
        [{"sid": 1, "arrival": 0.0, "prompt_tokens": 40, "output_tokens": 2}],
    )
    out = tmp_path / "trace.jsonl"
    r = run_cli(
        "simulate", str(workload), "-p", "tests.plugin_policies:NewestFirst",
        "--chunk-size", "16", "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    err = r.stderr.decode()
    assert "broke the Scheduler contract at step 0" in err
    assert "chunk 2 of session 1 before chunk 1" in err


def test_a_batch_owing_a_session_two_outputs_apart_is_a_contract_break(tmp_path: Path) -> None:
    # output, no output, output: the outputs are not neighbours, and are counted anyway.
    trace = _write(
        tmp_path / "t.jsonl",
        [
            {"op": "submit", "tasks": [_chunk(1, 7, True), _chunk(2, 7, False)]},
            {"op": "submit", "tasks": [_chunk(3, 7, True)]},
            {"op": "get_work"},
        ],
    )
    r = run_cli("replay", str(trace), "-p", "tests.plugin_policies:WholeQueue", "-f", "jsonl")
    assert r.returncode == 3, r.stderr
    assert "one batch owes session 7 two outputs" in r.stderr.decode()


def test_the_reference_mode_warns_of_two_outputs_apart(tmp_path: Path) -> None:
    ledger_warnings: list[str] = []
    ledger = Ledger(InvariantError, ledger_warnings.append, budget=None, two_outputs_fatal=False)
    a, b, c = Task(1, 7, "prefill", 2), Task(2, 7, "prefill", 2), Task(3, 7, "prefill", 2)
    a.produce_output, b.produce_output, c.produce_output = True, False, True
    ledger.accept([a, b])
    ledger.accept([c])
    ledger.dispatched([a, b, c])
    assert ledger_warnings == ["one batch owes session 7 two outputs"]
