"""engine/shrink/stated.py: a state's units dropped keep a state its policy restores."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.engine.shrink.stated import keeping, plainer, units_of_state
from tests.policies.test_snapshot import Op, apply, build, ops

# compat=reference's rotation holds its chunks whole: its states are reduced where the
# policy takes the result, and only there.
CLEANED = ["decode-first", "fair", "fcfs", "prefill-first", "priority", "sjf"]


def state_line(name: str, sequence: list[Op]) -> dict[str, Any]:
    policy = build(name)
    for op in sequence:
        apply(policy, op)
    state = orjson.loads(orjson.dumps(policy.snapshot()))
    queued = sum(len(g) for g in state["queued"])
    ledger = {"accepted": queued + 5, "dispatched": 4, "cancelled": 1, "rejected": 0,
              "rejected_tasks": 0, "tokens": 9}  # fmt: skip
    return {"op": "state", "step": 3, "state": state, "ledger": ledger}


@pytest.mark.parametrize("name", CLEANED)
@settings(max_examples=80, deadline=None)
@given(sequence=ops, data=st.data())
def test_a_state_with_any_of_its_tasks_dropped_restores_into_its_policy(
    name: str, sequence: list[Op], data: st.DataObject
) -> None:
    line = state_line(name, sequence)
    units = units_of_state(line)
    tasks = [u for u in units if u[0] == "task"]
    kept = data.draw(st.lists(st.sampled_from(tasks), unique=True)) if tasks else []
    others = [u for u in units if u[0] != "task"]
    smaller = keeping(line, [*kept, *others])
    restored = build(name)
    restored.restore(smaller["state"])  # the policy's own check: a second path
    assert sum(len(g) for g in smaller["state"]["queued"]) == len(kept)
    held = smaller["ledger"]
    assert held["accepted"] - held["dispatched"] - held["cancelled"] == len(kept)
    assert keeping(line, units) == line  # every unit kept: the same state


def test_plainer_states_empty_the_ledger_and_round_the_counters() -> None:
    line = {
        "op": "state",
        "step": 7,
        "state": {"version": 1, "policy": "fair", "queued": [], "backlog": [],
                  "counters": [["a", 12.5], ["b", 10.0]]},
        "ledger": {"accepted": 3, "dispatched": 3, "cancelled": 0, "rejected": 1,
                   "rejected_tasks": 2, "tokens": 40},
    }  # fmt: skip
    tried = plainer(line)
    assert tried[0]["ledger"] == {"accepted": 0, "dispatched": 0, "cancelled": 0,
                                  "rejected": 0, "rejected_tasks": 0, "tokens": 0}  # fmt: skip
    assert tried[1]["state"]["counters"] == [["a", 0.0], ["b", 0.0]]
    assert tried[2]["state"]["counters"] == [["a", 2.5], ["b", 0.0]]
    assert [["a", 0.0], ["b", 10.0]] in [t["state"]["counters"] for t in tried]
    assert [["a", 12.0], ["b", 10.0]] in [t["state"]["counters"] for t in tried]
