"""engine/travel/worker.py: a worker's one question about the steps ahead (view, scan,
life), answered from a session run in this process."""

from __future__ import annotations

from typing import Any

from schedcli.engine.travel.session import Compare
from schedcli.engine.travel.worker import Done, worker_for
from tests.engine.travel._session import session


def ask(task: dict[str, Any], compare: Compare | None = None) -> list[dict[str, Any]]:
    """The replies to ``task``, from a session run from the trace's start."""
    replies: list[dict[str, Any]] = []
    with session(compare) as (s, _):
        worker = worker_for({"id": 7, **task}, s, -1, replies.append)
        try:
            s.run()
        except Done:
            pass
        else:
            worker.ended(None)
    return replies


def test_view_answers_the_step_with_its_queue_as_the_policy_saw_it() -> None:
    [reply] = ask({"op": "view", "step": 2})
    assert reply["id"] == 7
    view = reply["view"]
    assert view["step"] == 2 and [e["tid"] for e in view["records"][0]["batch"]] == [3, 7]
    [queue] = view["queues"]
    assert queue is not None and {3, 4, 7, 8, 9} <= {e["tid"] for e in queue}
    assert view["other"] is None


def test_view_under_check_carries_the_expect_it_is_compared_with() -> None:
    [reply] = ask({"op": "view", "step": 1}, Compare(check=True))
    assert [list(pair) for pair in reply["view"]["other"]] == [[2, None], [6, None]]


def test_view_of_a_step_past_the_end_says_the_replay_ended() -> None:
    assert ask({"op": "view", "step": 99}) == [{"id": 7, "ended": {"steps": 6}}]


def _scan(conds: list[dict[str, Any]], want: str = "first") -> Any:
    [reply] = ask({"op": "scan", "from": 0, "to": 5, "want": want, "conds": conds})
    return reply["found"]


def test_scan_finds_the_first_and_the_last_step_a_session_is_dispatched() -> None:
    assert _scan([{"kind": "session", "sid": 30}])["step"] == 2
    assert _scan([{"kind": "session", "sid": 30}], want="last")["step"] == 4
    assert _scan([{"kind": "session", "sid": 99}]) is None


def test_scan_finds_a_task_that_waited_more_than_k_steps() -> None:
    found = _scan([{"kind": "wait", "k": 1}])
    assert found["step"] == 2 and "waited 2 steps (since step 0)" in found["why"]


def test_scan_finds_a_task_queued_before_it_is_dispatched() -> None:
    found = _scan([{"kind": "find", "tid": 9}])
    assert (found["step"], found["why"]) == (2, "queued")


def test_life_follows_a_task_from_submit_to_dispatch() -> None:
    [reply] = ask({"op": "life", "from": 0, "to": 5, "key": {"tid": 4}})
    kinds = [(step, what) for step, what, _, _ in reply["life"]]
    assert kinds[0] == (0, "submitted") and kinds[-1] == (3, "dispatched")
    assert all(what == "passed over" for _, what in kinds[1:-1]) and len(kinds) > 2
