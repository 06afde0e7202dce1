"""engine/travel/state.py: a policy's state as the debugger shows it."""

from __future__ import annotations

from schedcli.engine.travel.state import ITEMS, policy_state, shown
from schedcli.policies.fcfs import FcfsScheduler
from tests.helpers import dc, make, pf


def test_decode_first_shows_its_queues_in_order_and_hides_its_bookkeeping() -> None:
    policy = make(2, 4)
    policy.submit([pf(1, 10, 3)])
    policy.submit([pf(2, 20, 4)])
    policy.submit([dc(3, 30)])
    rows = dict(policy_state(policy))
    assert not {"_left", "_why", "_lock"} & set(rows)
    text = " ".join(rows.values())
    assert "1/10 prefill 3" in text and "2/20 prefill 4" in text and "3/30 decode 1" in text
    assert text.index("1/10 prefill 3") < text.index("2/20 prefill 4")


def test_a_long_container_is_cut_short_with_how_many_more() -> None:
    assert shown(list(range(ITEMS + 5)), 3) == f"[{', '.join(map(str, range(ITEMS)))}, … 5 more]"
    assert shown(list(range(ITEMS)), 3).endswith(f"{ITEMS - 1}]")


def test_values_are_shown_as_a_person_reads_them() -> None:
    assert shown(pf("a", 5, 7), 3) == '"a"/5 prefill 7'  # a string id quoted
    assert shown({"k": [1, "x"]}, 3) == "{'k': [1, 'x']}"
    assert shown([[[[1]]]], 3) == "[[[…]]]"  # nested past the depth shown
    assert shown(None, 0) == "None" and shown(2.5, 0) == "2.5"


def test_every_builtin_shows_a_queued_task() -> None:
    policy = FcfsScheduler(64, 4, max_prefill_chunk_size=16)
    policy.submit([pf(7, 1, 4)])
    assert any("7/1 prefill 4" in value for _, value in policy_state(policy))
