"""fair and sjf at O(log n) a task they take, and the ordered queue of fcfs, priority and
prefill-first at O(1) (O(log n) keyed) a task it takes or passes over (#58), give exactly the
batches of the code they replaced: the pre-change code, kept as
tests/policies/oracle_queues.py, is the oracle.

Each call of a random trace goes to both, each with its own copies of the tasks, under
every parameter that orders or bounds a batch: the batches (as the same task objects), the
rejections and their reasons, what cancel and clear return and in what order, has_work,
the tasks' cancelled marks, the fingerprints and, while explaining, every reason. The traces
reuse tids, submit a task object again (one a batch, a cancel or a clear returned), cancel
and clear, give priorities (negative ones too), outputs and varied chunk sizes, and let the
queue grow.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import Task
from schedcli.model.scheduler import Scheduler
from schedcli.policies.fair import FairScheduler
from schedcli.policies.fcfs import FcfsScheduler
from schedcli.policies.prefill_first import PrefillFirstScheduler
from schedcli.policies.priority import PriorityScheduler
from schedcli.policies.sjf import SjfScheduler
from tests.policies.oracle_queues import (
    OracleFair,
    OracleFcfs,
    OraclePrefillFirst,
    OraclePriority,
    OracleSjf,
)

# (object index, tid, sid, kind, size, produce_output, priority)
Made = tuple[int, int, int, str, int, bool | None, int]
Op = tuple[str, object]
# name -> (new, oracle, the parameter that caps a batch's tasks, extra parameters to draw)
POLICIES: dict[str, tuple[type[Scheduler], type[Scheduler], str]] = {
    "fcfs": (FcfsScheduler, OracleFcfs, "max_num_seqs"),
    "priority": (PriorityScheduler, OraclePriority, "max_num_seqs"),
    "prefill-first": (PrefillFirstScheduler, OraclePrefillFirst, "max_decode_sequences"),
    "sjf": (SjfScheduler, OracleSjf, "max_decode_sequences"),
    "fair": (FairScheduler, OracleFair, "max_num_seqs"),
}


@dataclass
class Side:
    policy: Scheduler
    objects: dict[int, Task] = field(default_factory=dict)
    where: dict[int, int] = field(default_factory=dict)  # id(object) -> its index

    def task(self, made: Made) -> Task:
        index, tid, sid, kind, size, out, priority = made
        t = self.objects.get(index)
        if t is None:
            t = Task(tid, sid, kind, size, produce_output=out, priority=priority)
            self.objects[index] = t
            self.where[id(t)] = index
        return t

    def index(self, tasks: list[Task]) -> list[int]:
        return [self.where[id(t)] for t in tasks]


class Pair:
    """The new policy and the oracle, built alike, given each call alike."""

    def __init__(self, name: str, params: dict[str, object]) -> None:
        new, old, _ = POLICIES[name]
        self.new = Side(new.create(**params))
        self.old = Side(old.create(**params))
        self.made: dict[int, Made] = {}
        self.returned: list[int] = []  # the objects the last call handed back

    def do(self, op: str, arg: object, where: str, whole: bool = True) -> None:
        """One call on both sides, then (``whole``) their whole state compared."""
        new, old = self.new, self.old
        if op == "submit":
            assert isinstance(arg, list)
            for a in arg:
                self.made.setdefault(a[0], a)
            got = new.policy.try_submit([new.task(self.made[a[0]]) for a in arg])
            want = old.policy.try_submit([old.task(self.made[a[0]]) for a in arg])
            assert got == want, where
            returned: list[int] = []
        elif op == "get_work":
            for side in (new, old):
                side.policy.explaining = bool(arg)
            returned = old.index(old.policy.get_work())
            assert new.index(new.policy.get_work()) == returned, where
            if arg:
                assert reasons(new) == reasons(old), where
        elif op == "cancel":
            assert isinstance(arg, int)
            returned = old.index(old.policy.cancel(arg))
            assert new.index(new.policy.cancel(arg)) == returned, where
        else:
            returned = old.index(old.policy.clear())
            assert new.index(new.policy.clear()) == returned, where
        self.returned = returned or self.returned
        assert new.policy.has_work() == old.policy.has_work(), where
        if whole:
            assert new.policy.fingerprint() == old.policy.fingerprint(), where
            marks = [(i, t.cancelled) for i, t in sorted(new.objects.items())]
            assert marks == [(i, t.cancelled) for i, t in sorted(old.objects.items())], where

    def drain(self, explain: bool = False) -> None:
        """Batches until both give none, as the replay's end check asks: the same to the last."""
        for side in (self.new, self.old):
            side.policy.explaining = explain
        for _ in range(100_000):
            returned = self.old.index(self.old.policy.get_work())
            assert self.new.index(self.new.policy.get_work()) == returned
            if explain:
                assert reasons(self.new) == reasons(self.old)
            if not returned:
                break
        assert self.new.policy.fingerprint() == self.old.policy.fingerprint()


def reasons(side: Side) -> list[tuple[int, str, str]] | None:
    left = side.policy.left_behind()
    if left is None:
        return None
    return [(side.index([t])[0], code, detail) for t, code, detail in left]


def draw_params(data: st.DataObject, name: str) -> dict[str, object]:
    """Limits small enough that batches fill and chunks do not fit; fair's weights too."""
    cap_name = POLICIES[name][2]
    cap = data.draw(st.integers(1, 5), label="cap")
    chunk = data.draw(st.integers(1, 9), label="max_prefill_chunk_size")
    floor = cap + chunk if cap_name == "max_decode_sequences" else chunk
    budget = floor + data.draw(st.integers(0, 12), label="budget over the floor")
    params: dict[str, object] = {
        "max_batch_tokens": budget,
        "max_prefill_chunk_size": chunk,
        cap_name: cap,
    }
    if name == "fair":
        weights = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.25, 1e300])
        params["prefill_weight"] = data.draw(weights, label="prefill_weight")
        params["decode_weight"] = data.draw(weights, label="decode_weight")
    return params


def random_trace(data: st.DataObject, name: str) -> None:
    """A trace drawn call by call, against what the last call handed back: a task a
    cancel, a clear or a batch returned is often submitted again, as it was."""
    params = draw_params(data, name)
    chunk = params["max_prefill_chunk_size"]
    assert isinstance(chunk, int)
    sessions = data.draw(st.integers(1, 8))
    tids = data.draw(st.sampled_from([4, 12, 1000]))  # a small pool reuses tids often
    # More submits than batches in some traces: the queue grows, as an overloaded one does.
    submits, batches, churn = data.draw(
        st.sampled_from([(6, 3, 1), (6, 1, 1), (3, 6, 1), (4, 3, 3)])
    )
    kinds = ["submit"] * submits + ["get_work"] * batches + ["cancel", "again"] * churn + ["clear"]
    pair = Pair(name, params)
    made = 0
    for step in range(data.draw(st.integers(1, 80))):
        kind = data.draw(st.sampled_from(kinds))
        if kind == "submit":
            group: list[Made] = []
            sid = data.draw(st.integers(0, sessions - 1))
            for _ in range(data.draw(st.integers(1, 4))):
                decode = data.draw(st.integers(0, 2)) == 0
                size = 1 if decode else data.draw(st.integers(1, chunk))
                if data.draw(st.integers(0, 40)) == 0:
                    size = data.draw(st.sampled_from([0, 2, chunk + 1]))  # refused
                out = None if decode else data.draw(st.sampled_from([None, None, True, False]))
                tid = data.draw(st.integers(0, tids - 1))
                priority = data.draw(st.sampled_from([0, 0, 0, 1, 2, -1, 5]))
                kind_name = "decode" if decode else "prefill"
                group.append((made, tid, sid, kind_name, size, out, priority))
                made += 1
            op: Op = ("submit", group)
        elif kind == "again" and made:
            recent = bool(pair.returned) and data.draw(st.booleans())
            pool = sorted(pair.returned) if recent else list(range(made))
            picked: list[int] = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            op = ("submit", [pair.made[i] for i in dict.fromkeys(picked)])
        elif kind == "get_work":
            op = ("get_work", data.draw(st.booleans()))
        elif kind == "cancel":
            op = ("cancel", data.draw(st.integers(0, sessions - 1)))
        else:
            op = ("clear", None)
        pair.do(*op, where=f"{params}, op {step}: {op}")
    pair.drain(explain=data.draw(st.booleans()))


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _property(name: str) -> Callable[[], None]:
    @SETTINGS
    @given(st.data())
    def check(data: st.DataObject) -> None:
        random_trace(data, name)

    return check


test_fcfs_gives_the_batches_reasons_and_returns_of_the_queue_it_replaced = _property("fcfs")
test_priority_gives_the_batches_reasons_and_returns_of_the_queue_it_replaced = _property("priority")
test_prefill_first_gives_the_batches_reasons_and_returns_of_the_queues_it_replaced = _property(
    "prefill-first"
)
test_sjf_gives_the_batches_reasons_and_returns_of_the_sort_it_replaced = _property("sjf")
test_fair_gives_the_batches_reasons_and_returns_of_the_heap_it_replaced = _property("fair")


def long_trace(name: str, seed: int, events: int, params: dict[str, object]) -> None:
    """Thousands of sessions waiting, prompts arriving faster than batches serve them,
    varied chunks and priorities, sessions decoding many steps ahead, cancels (and rejoins),
    tid reuse from a large pool, tasks handed back submitted again, a clear: long enough
    for every compaction of the queues and rebuild of the indexes to happen many times."""
    rng = random.Random(seed)
    pair = Pair(name, params)
    made = sid = 0
    for n in range(events):
        r = rng.random()
        if r < 0.5:
            sid = rng.randint(0, 3000) if rng.random() < 0.3 else sid + 1
            group: list[Made] = []
            priority = rng.choice((0, 0, 1, 2, -3))
            for _ in range(rng.randint(1, 4)):
                size = rng.choice((1, 2, 5, rng.randint(1, 24), 24))
                out = rng.choice((None, None, False, True))
                group.append((made, rng.randint(0, 20_000), sid, "prefill", size, out, priority))
                made += 1
            op: Op = ("submit", group)
        elif r < 0.78:
            who = 7 if rng.random() < 0.3 else rng.randint(0, sid + 1)  # session 7 piles up
            task: Made = (made, rng.randint(0, 20_000), who, "decode", 1, None, rng.choice((0, 1)))
            op = ("submit", [task])
            made += 1
        elif r < 0.90:
            op = ("get_work", n % 50 == 0)
        elif r < 0.98:
            op = ("cancel", rng.randint(0, sid + 1))
        elif r < 0.9998:
            pool = pair.returned or [0]
            op = ("submit", [pair.made[rng.choice(pool)]] if made else [])
        else:
            op = ("clear", None)
        pair.do(*op, where=f"seed {seed}, op {n}: {op}", whole=n % 97 == 0)
    pair.drain()


@pytest.mark.parametrize("name", list(POLICIES))
def test_each_policy_gives_the_old_batches_on_a_long_overloaded_trace(name: str) -> None:
    cap_name = POLICIES[name][2]
    params: dict[str, object] = {"max_batch_tokens": 64, "max_prefill_chunk_size": 24}
    params[cap_name] = 2 if cap_name == "max_decode_sequences" else 6
    long_trace(name, 1, 8000, params)
    if name == "fair":
        long_trace(name, 2, 4000, {**params, "prefill_weight": 0.0, "decode_weight": 0.5})
