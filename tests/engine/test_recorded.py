"""engine/recorded.py: what a recording says beyond its batches (a rejected submit, a call
that raised), and how --check reports a replay that disagrees with it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from schedcli.engine.recorded import (
    OutcomeMismatch,
    RecordingRaised,
    raised_in,
    recorded_rejection,
)
from schedcli.engine.run import open_replay
from schedcli.model.errors import CheckFailed

HEADER = {"schedcli": 1, "policy": "decode-first", "params": {"max_batch_tokens": 10,
          "max_decode_sequences": 2, "max_prefill_chunk_size": 4}}  # fmt: skip
RECORDER = {**HEADER, "meta": {"recorded_by": "test"}}


def check(lines: list[dict[str, Any]], allow_incomplete: bool = False) -> None:
    data = b"".join(orjson.dumps(x) + b"\n" for x in lines)
    with open_replay("r.jsonl", data=data, allow_incomplete=allow_incomplete) as opened:
        opened.replayer(lambda _: None, check=True).replay()


def submit(tid: int, size: int, meta: object = None) -> dict[str, Any]:
    """A submit of one task as a recorder writes it (a group with the call's meta)."""
    event: dict[str, Any] = {"op": "submit", "tasks": [
        {"tid": tid, "sid": tid, "kind": "prefill", "size": size}]}  # fmt: skip
    if meta is not None:
        event["meta"] = meta
    return event


def test_a_submit_the_recording_rejected_and_the_replay_accepted_is_a_difference() -> None:
    with pytest.raises(OutcomeMismatch) as caught:
        check([HEADER, submit(1, 4, {"rejected": "too big"}), {"op": "get_work"}])
    e = caught.value
    assert isinstance(e, CheckFailed) and e.exit_code == 1
    assert (e.line, e.recorded, e.replayed) == (2, "too big", None)
    assert str(e) == (
        "r.jsonl:2: the recording rejected this submit (too big); the replay accepted it"
    )


def test_a_recorder_s_accepted_submit_the_replay_rejects_is_a_difference() -> None:
    # A recorder marks every rejection, so an unmarked submit was accepted.
    with pytest.raises(OutcomeMismatch) as caught:
        check([RECORDER, submit(1, 4), submit(2, 5), {"op": "get_work"}])
    e = caught.value
    assert (e.line, e.recorded) == (3, None) and e.replayed is not None
    assert str(e).startswith("r.jsonl:3: the recording accepted this submit; the replay rejected")


def test_outcomes_that_agree_pass_and_an_unmarked_trace_vouches_for_none() -> None:
    check([RECORDER, submit(1, 4), submit(2, 5, {"rejected": "chunk"}), {"op": "get_work"}])
    check([HEADER, submit(1, 4), submit(2, 5), {"op": "get_work"}])  # no recorder: unsaid


def test_a_call_the_recorded_scheduler_raised_in_ends_what_check_can_vouch_for() -> None:
    lines = [RECORDER, submit(1, 4), {"op": "get_work", "meta": {"raised": "boom"}}]
    with pytest.raises(RecordingRaised) as caught:
        check(lines)
    assert caught.value.line == 3 and caught.value.exit_code == 1
    assert str(caught.value).startswith(
        "r.jsonl:3: the recorded scheduler raised in get_work (boom): the recording is incomplete"
    )
    check(lines, allow_incomplete=True)  # what came before is checked


def test_the_recorder_s_marks_are_read_from_a_meta_object_only() -> None:
    assert recorded_rejection({"rejected": 5}) == "5"
    assert recorded_rejection({"other": 1}) is None
    assert recorded_rejection(["rejected"]) is None and recorded_rejection(None) is None
    assert raised_in({"raised": "x"}) == "x" and raised_in("raised") is None
