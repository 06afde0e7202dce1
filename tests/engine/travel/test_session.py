"""engine/travel/session.py: one debugging session's replay, its steps aligned across
sides and marked where they differ from what they are compared with."""

from __future__ import annotations

from pathlib import Path

import orjson

from schedcli.engine.travel.session import Compare
from tests.engine.travel._session import TRACE, session


def test_every_step_is_handed_on_once_in_order() -> None:
    with session() as (s, heard):
        s.run()
    assert [step for step, _, _ in heard.pairs] == list(range(6)) == list(range(s.steps))
    assert heard.marks == [] and s.compared() is None
    assert heard.pairs[0][1][0]["batch"][0]["tid"] == 1


def test_under_check_a_step_that_differs_from_its_expect_is_marked_and_counted() -> None:
    lines = Path(TRACE).read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b"[2, 6]" in line)  # step 1
    lines[at] = lines[at].replace(b"[2, 6]", b"[6, 2, 99]")
    with session(Compare(check=True), data=b"".join(lines)) as (s, heard):
        s.run()
    assert heard.marks == [(1, "div", "differs from the trace's expect")]
    compared = s.compared()
    assert compared is not None
    assert (compared["identical"], compared["steps"], compared["first"]) == (False, 1, 1)
    # What each step is compared with: its expect, as (who, size) pairs (a task-level
    # expect names tids alone).
    expects = [[who for who, size in other] for _, _, other in heard.pairs][:2]
    assert expects == [[1, 5], [6, 2, 99]]
    assert {size for _, _, other in heard.pairs for _, size in other} == {None}


def test_under_check_a_trace_matching_its_expects_is_identical() -> None:
    with session(Compare(check=True)) as (s, heard):
        s.run()
    assert heard.marks == []
    assert s.compared() == {
        "identical": True, "steps": 0, "records": 0, "first": None, "pins_a_break": False,
    }  # fmt: skip


def test_against_another_policy_steps_are_paired_and_the_first_difference_marked() -> None:
    with session(Compare(against="fcfs")) as (s, heard):
        s.run()
    assert all(len(records) == 2 for _, records, _ in heard.pairs)
    assert {side for side, _ in heard.steps} == {0, 1}
    compared = s.compared()
    assert compared is not None and compared["identical"] is False
    first = compared["first"]
    assert (first, "div", "fcfs schedules differently") in heard.marks
    _, (mine, theirs), _ = heard.pairs[first]
    assert mine is not None and theirs is not None and mine["batch"] != theirs["batch"]


def test_against_the_same_policy_nothing_differs() -> None:
    with session(Compare(against="decode-first", against_params=_params())) as (s, heard):
        s.run()
    assert heard.marks == [] and s.compared() is not None
    assert s.compared()["identical"] is True  # type: ignore[index]


def test_a_golden_missing_a_step_is_marked_at_the_end(tmp_path: Path) -> None:
    golden = Path(TRACE).parent / "golden" / "rotation-fairness.dump.jsonl"
    records = [orjson.loads(line) for line in golden.read_bytes().splitlines()]
    cut = [r for r in records if r.get("step") != 5]
    short = tmp_path / "g.jsonl"
    short.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in cut))
    with session(Compare(golden=str(golden))) as (s, heard):
        s.run()
    assert heard.marks == [] and s.compared()["identical"] is True  # type: ignore[index]
    with session(Compare(golden=str(short))) as (s, heard):
        s.run()
    assert (5, "div", "the golden has no step 5") in heard.marks


def _params() -> dict[str, object]:
    return orjson.loads(Path(TRACE).read_bytes().splitlines()[0])["params"]  # type: ignore[no-any-return]
