"""engine/travel/client.py: the debugger's handle on its server: the index it streams, the
ranges a question is split into at checkpoints, and what a question does when the server
is gone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from schedcli.engine.travel.client import END, ServerGone, Travel
from schedcli.engine.travel.session import Compare

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "traces" / "cancel-and-rejoin.jsonl"


def unstarted(checkpoints: list[int]) -> Travel:
    """A client's range arithmetic without a server behind it."""
    travel = Travel.__new__(Travel)
    travel.checkpoints = checkpoints
    return travel


def test_a_forward_question_is_split_at_each_checkpoint_and_runs_to_the_end() -> None:
    travel = unstarted([-1, 9, 19])
    assert travel.segments(0, True) == [(0, 9), (10, 19), (20, END)]
    assert travel.segments(12, True) == [(12, 19), (20, END)]
    assert travel.segments(25, True) == [(25, END)]


def test_a_backward_question_asks_the_last_range_first_and_stops_at_the_start() -> None:
    travel = unstarted([-1, 9, 19])
    assert travel.segments(25, False) == [(20, 25), (10, 19), (0, 9)]
    assert travel.segments(5, False) == [(0, 5)]


def test_the_index_holds_every_step_of_the_replay_and_each_view_is_that_step() -> None:
    with Travel(str(TRACE), every=2, compare=Compare()) as travel:
        assert travel.wait("indexed", 60)
        assert travel.failed is None and travel.hello is not None
        assert travel.steps == len(travel.numbers) == len(travel.tokens) == len(travel.batch)
        assert list(travel.numbers) == sorted(travel.numbers)
        for row, step in enumerate(travel.numbers):
            assert travel.row_of(step) == row
            view = travel.view(step)
            batch = view["records"][0]["batch"]
            assert len(batch) == travel.batch[row]
            assert sum(e["size"] for e in batch) == travel.tokens[row]
        assert "ended" in travel.view(travel.numbers[-1] + 1)
        assert travel.row_of(travel.numbers[-1] + 1) == travel.steps


def test_a_scan_finds_the_first_step_a_session_is_dispatched_either_way() -> None:
    with Travel(str(TRACE), every=1) as travel:
        assert travel.wait("indexed", 60)
        cond = [{"kind": "session", "sid": 20}]
        first = travel.scan(cond, 0, True)
        assert first is not None and first["why"] == "the session is dispatched"
        view = travel.view(first["step"])
        assert 20 in [e["sid"] for e in view["records"][0]["batch"]]
        last = travel.scan(cond, travel.numbers[-1], False)
        assert last is not None and last["step"] >= first["step"]
        assert travel.scan(cond, first["step"], True, limit=first["step"]) is None


def test_a_question_after_the_server_is_killed_is_server_gone_not_a_hang() -> None:
    with Travel(str(TRACE), every=1) as travel:
        assert travel.wait("hello", 60)
        os.killpg(travel._process.pid, signal.SIGKILL)
        assert travel.wait("indexed", 30)  # the stream's end wakes every waiter
        assert travel.gone
        with pytest.raises(ServerGone):
            travel.view(0)


def test_a_trace_refused_at_its_header_fails_at_the_start_with_exit_2_and_its_line(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schedcli": 7}\n')
    with Travel(str(bad)) as travel:
        assert travel.wait("hello", 60)
        assert travel.hello is None and travel.steps == 0
        assert travel.failed is not None and travel.failed["exit"] == 2
        assert travel.failed["message"].startswith(f"{bad}:1: ")


def test_a_bad_line_later_ends_the_index_there_with_exit_2_and_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "submit", "tid": 1}\n')
    with Travel(str(bad)) as travel:
        assert travel.wait("indexed", 60)
        assert travel.failed is None and travel.indexed is not None
        ending = travel.indexed["ending"]
        assert ending["exit"] == 2 and ending["message"] == f"{bad}:1: submit has no sid"
