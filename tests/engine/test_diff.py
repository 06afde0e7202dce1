"""engine/diff.py's comparison of records, apart from any replay: what counts as a
difference and what is only shown."""

from __future__ import annotations

from schedcli.engine.diff import FirstDifference, record_difference

STALL = (
    "broke the request-level contract at step 2: stalled since step 0: nothing scheduled, "
    'and the policy\'s state no longer changes. Stuck: request "r4"'
)


def _partial(reason: str) -> dict[str, object]:
    return {"partial": {"reason": reason, "steps": 2, "exit": 3}}


def test_a_break_pinned_under_one_name_matches_the_same_break_under_another_name() -> None:
    # The same scheduler, named as the interpreter it runs in (vllm, vllm@PYTHON).
    pinned = _partial(f"policy 'vllm' {STALL}")
    for name in ("'vllm@/opt/vllm-0.34/bin/python'", '"it\'s mine"'):
        assert record_difference(pinned, _partial(f"policy {name} {STALL}")) is None


def test_another_break_or_another_step_still_differs_whatever_the_names() -> None:
    pinned = _partial(f"policy 'vllm' {STALL}")
    other = _partial("policy 'vllm@/x/python' broke the request-level contract at step 2: "
                     "scheduled request 'r4', which it does not hold")  # fmt: skip
    difference = record_difference(pinned, other)
    assert difference is not None and [f for f, _, _ in difference.fields] == ["partial"]
    later = {"partial": {"reason": f"policy 'vllm@/x/python' {STALL}", "steps": 3, "exit": 3}}
    assert record_difference(pinned, later) is not None


def test_a_slice_both_sides_ran_at_other_sizes_is_resized_not_moved() -> None:
    def entry(tid: str, size: int) -> dict[str, object]:
        return {"tid": tid, "sid": tid.split("@")[0], "kind": "prefill", "size": size}

    first = FirstDifference(1, [entry("0@4", 1), entry("1@0", 32)], [entry("0@4", 1),
                            entry("1@0", 524), entry("2@0", 8)])  # fmt: skip
    assert first.moved() == ([], ["2@0"])
    assert first.resized() == [("1@0", "1", 32, 524)]
