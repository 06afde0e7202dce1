"""Why a task was left behind: every reason code of every built-in policy, each in the
situation that produces it (docs/policies.md lists them)."""

from __future__ import annotations

import pytest

from schedcli import Scheduler, Task
from schedcli.catalog.registry import build_policy
from tests.helpers import dc, pf


def left(policy: Scheduler, *groups: list[Task]) -> dict[object, str]:
    """Submit the groups, take one batch, and return tid -> reason code of the rest."""
    policy.explaining = True
    for group in groups:
        assert policy.submit(group), group
    policy.get_work()
    reasons = policy.left_behind()
    assert reasons is not None
    return {t.tid: code for t, code, _ in reasons}


def out(tid: int, sid: int, size: int, produce: bool) -> Task:
    return Task(tid, sid, "prefill", size, produce_output=produce)


DF = {"max_batch_tokens": 8, "max_decode_sequences": 2, "max_prefill_chunk_size": 4}


@pytest.mark.parametrize("name", ["decode-first", "sjf"])
class TestDecodeFirstFamily:
    def test_decode_cap(self, name: str) -> None:
        p = build_policy(name, DF)
        assert left(p, [dc(1, 10)], [dc(2, 20)], [dc(3, 30)])[3] == "decode_cap"

    def test_decode_cap_detail_counts_the_cap_in_words(self, name: str) -> None:
        for cap, said in ((1, "1 decode was already taken"), (2, "2 decodes were already taken")):
            p = build_policy(name, {**DF, "max_decode_sequences": cap})
            p.explaining = True
            assert p.submit([dc(1, 10)]) and p.submit([dc(2, 20)]) and p.submit([dc(3, 30)])
            p.get_work()
            details = {
                t.tid: detail for t, code, detail in p.left_behind() or [] if code == "decode_cap"
            }
            assert details[3] == said

    def test_one_decode_per_session(self, name: str) -> None:
        p = build_policy(name, DF)
        assert left(p, [dc(1, 10)], [dc(2, 10)])[2] == "one_decode_per_session"

    def test_session_decoding(self, name: str) -> None:
        p = build_policy(name, DF)
        assert left(p, [dc(1, 10)], [pf(2, 10, 2)])[2] == "session_decoding"

    def test_no_room(self, name: str) -> None:
        p = build_policy(name, DF)
        assert left(p, [pf(1, 10, 4)], [pf(2, 20, 3)], [pf(3, 30, 4)])[3] == "no_room"

    def test_budget_spent(self, name: str) -> None:
        p = build_policy(name, DF)
        reasons = left(p, [pf(1, 10, 4)], [pf(2, 20, 4)], [pf(3, 30, 4)])
        assert reasons[3] == "budget_spent"

    def test_behind_own_chunk(self, name: str) -> None:
        p = build_policy(name, DF)
        reasons = left(p, [pf(1, 10, 4), pf(2, 10, 4), pf(3, 10, 4)], [pf(4, 20, 4)])
        assert reasons[2] == "budget_spent" and reasons[3] == "behind_own_chunk"


def test_decode_first_second_output() -> None:
    p = build_policy("decode-first", DF)
    assert left(p, [pf(1, 10, 2)], [pf(2, 10, 2)])[2] == "second_output"


def test_sjf_after_output() -> None:
    p = build_policy("sjf", DF)
    assert left(p, [pf(1, 10, 2)], [pf(2, 10, 2)])[2] == "after_output"


FCFS = {"max_batch_tokens": 8, "max_num_seqs": 2, "max_prefill_chunk_size": 4}


@pytest.mark.parametrize("name", ["fcfs", "priority"])
class TestFcfsFamily:
    def test_seq_cap(self, name: str) -> None:
        p = build_policy(name, FCFS)
        assert left(p, [dc(1, 10)], [dc(2, 20)], [dc(3, 30)])[3] == "seq_cap"

    def test_session_rule(self, name: str) -> None:
        p = build_policy(name, FCFS)
        assert left(p, [dc(1, 10)], [pf(2, 10, 1)])[2] == "session_rule"

    def test_behind_own_task(self, name: str) -> None:
        p = build_policy(name, {**FCFS, "max_num_seqs": 4})
        assert left(p, [dc(1, 10)], [pf(2, 10, 1)], [pf(3, 10, 1)])[3] == "behind_own_task"

    def test_no_room_and_head_of_line(self, name: str) -> None:
        p = build_policy(name, {**FCFS, "max_num_seqs": 4})
        reasons = left(p, [pf(1, 10, 4)], [pf(2, 20, 4)], [pf(3, 30, 4)], [dc(4, 40)])
        assert reasons[3] == "no_room" and reasons[4] == "head_of_line"


def details(policy: Scheduler, code: str, *groups: list[Task]) -> set[str]:
    """Submit the groups, take one batch, and return the details given with ``code``."""
    policy.explaining = True
    for group in groups:
        assert policy.submit(group), group
    policy.get_work()
    return {detail for _, c, detail in policy.left_behind() or [] if c == code}


@pytest.mark.parametrize("name", ["fcfs", "priority", "fair"])
def test_seq_cap_detail_counts_the_cap_in_words(name: str) -> None:
    for cap, said in ((1, "1 task was already taken"), (2, "2 tasks were already taken")):
        p = build_policy(name, {**FCFS, "max_num_seqs": cap})
        assert details(p, "seq_cap", [dc(1, 10)], [dc(2, 20)], [dc(3, 30)]) == {said}


def test_prefill_first_decode_cap_detail_counts_the_cap_in_words() -> None:
    for cap, said in ((1, "1 decode was already taken"), (2, "2 decodes were already taken")):
        p = build_policy("prefill-first", {**PF, "max_decode_sequences": cap})
        assert details(p, "decode_cap", [dc(1, 10)], [dc(2, 20)], [dc(3, 30)]) == {said}


PF = {"max_batch_tokens": 8, "max_decode_sequences": 1, "max_prefill_chunk_size": 4}


def test_prefill_first_decodes_wait_for_prefill() -> None:
    p = build_policy("prefill-first", PF)
    assert left(p, [dc(1, 10)], [pf(2, 20, 4)])[1] == "prefill_first"


def test_prefill_first_decode_cap() -> None:
    p = build_policy("prefill-first", PF)
    assert left(p, [dc(1, 10)], [dc(2, 20)])[2] == "decode_cap"


def test_prefill_first_no_room_head_of_line_and_own_task() -> None:
    p = build_policy("prefill-first", PF)
    reasons = left(p, [pf(1, 10, 4)], [pf(2, 20, 3)], [pf(3, 30, 4)], [pf(4, 40, 1), pf(5, 40, 1)])
    assert reasons[3] == "no_room" and reasons[4] == "head_of_line"


FAIR = {"max_batch_tokens": 8, "max_num_seqs": 2, "max_prefill_chunk_size": 4}


def test_fair_seq_cap() -> None:
    p = build_policy("fair", FAIR)
    assert left(p, [dc(1, 10)], [dc(2, 20)], [dc(3, 30)])[3] == "seq_cap"


def test_fair_session_rule() -> None:
    p = build_policy("fair", {**FAIR, "max_num_seqs": 4})
    assert left(p, [dc(1, 10)], [dc(2, 10)])[2] == "session_rule"


def test_fair_no_room() -> None:
    p = build_policy("fair", {**FAIR, "max_num_seqs": 4})
    assert left(p, [pf(1, 10, 4)], [pf(2, 20, 3)], [pf(3, 30, 4)])[3] == "no_room"


def test_fair_budget_spent() -> None:
    p = build_policy("fair", {**FAIR, "max_num_seqs": 4})
    reasons = left(p, [pf(1, 10, 4)], [pf(2, 20, 4)], [pf(3, 30, 1)])
    assert reasons[3] == "budget_spent"


def test_fair_behind_own_task() -> None:
    p = build_policy("fair", {**FAIR, "max_num_seqs": 4})
    reasons = left(p, [pf(1, 10, 4), pf(2, 10, 4), pf(3, 10, 4)], [pf(4, 20, 4)])
    assert reasons[2] == "budget_spent" and reasons[3] == "behind_own_task"


def test_reasons_cost_nothing_unless_asked() -> None:
    p = build_policy("decode-first", DF)
    p.submit([dc(1, 10)])
    p.submit([dc(2, 10)])
    p.get_work()
    assert p.left_behind() is None


def test_a_plugin_without_reasons_gives_none() -> None:
    from tests.plugin_policies import OnePerBatch

    p = OnePerBatch()
    p.explaining = True
    p.submit([dc(1, 10)])
    p.submit([dc(2, 20)])
    p.get_work()
    assert p.left_behind() is None
