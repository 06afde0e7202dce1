"""decode-first's queues at O(log n) a step (#58) give exactly the batches of the walk they
replace: the pre-#58 code, kept as tests/policies/oracle_decode_first.py, is the oracle.

Each call of a random trace goes to both, each with its own copies of the tasks, in both
modes: the batches (as the same task objects), the rejections and their reasons, what
cancel and clear return and in what order, has_work, the tasks' cancelled marks, the
fingerprints and (compat=fixed, while explaining) every reason. The traces reuse tids,
submit a task object again (one a batch, a cancel or a clear returned), cancel and clear,
and vary the chunk sizes, with the queue left to grow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import DecodeFirstScheduler, Task
from schedcli.model.scheduler import Scheduler
from tests.policies.oracle_decode_first import OracleDecodeFirst

# One call: ("submit", [(object index, tid, sid, kind, size, produce_output), ...]), where
# an object index already made submits that same object again; ("get_work", explain);
# ("cancel", sid); ("clear", None).
Op = tuple[str, object]


@dataclass
class Side:
    policy: Scheduler
    objects: dict[int, Task] = field(default_factory=dict)
    where: dict[int, int] = field(default_factory=dict)  # id(object) -> its index

    def task(self, index: int, tid: int, sid: int, kind: str, size: int, out: bool | None) -> Task:
        t = self.objects.get(index)
        if t is None:
            t = self.objects[index] = Task(tid, sid, kind, size, produce_output=out)
            self.where[id(t)] = index
        return t

    def index(self, tasks: list[Task]) -> list[int]:
        return [self.where[id(t)] for t in tasks]


class Pair:
    """The new policy and the oracle, built alike, given each call alike."""

    def __init__(self, params: tuple[int, int, int], compat: str) -> None:
        b, d, c = params
        kw = {"max_batch_tokens": b, "max_decode_sequences": d, "max_prefill_chunk_size": c}
        self.new = Side(DecodeFirstScheduler.create(**kw, compat=compat))
        self.old = Side(OracleDecodeFirst.create(**kw, compat=compat))
        self.made: dict[int, tuple[int, int, int, str, int, bool | None]] = {}
        self.returned: list[int] = []  # the objects the last call handed back

    def do(self, op: str, arg: object, where: str, whole: bool = True) -> None:
        """One call on both sides, then (``whole``) their whole state compared."""
        new, old = self.new, self.old
        if op == "submit":
            assert isinstance(arg, list)
            for a in arg:
                self.made.setdefault(a[0], a)
            got = new.policy.try_submit([new.task(*self.made[a[0]]) for a in arg])
            want = old.policy.try_submit([old.task(*self.made[a[0]]) for a in arg])
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

    def drain(self) -> None:
        """Batches until both give none, as the replay's end check asks: the same to the last."""
        for _ in range(100_000):
            returned = self.old.index(self.old.policy.get_work())
            assert self.new.index(self.new.policy.get_work()) == returned
            if not returned:
                break
        assert self.new.policy.fingerprint() == self.old.policy.fingerprint()


def reasons(side: Side) -> list[tuple[int, str, str]] | None:
    left = side.policy.left_behind()
    if left is None:
        return None
    return [(side.index([t])[0], code, detail) for t, code, detail in left]


def random_trace(data: st.DataObject, compat: str) -> None:
    """A trace drawn call by call, against what the last call handed back: a task a
    cancel, a clear or a batch returned is often submitted again, as it was."""
    d = data.draw(st.integers(1, 4))
    c = data.draw(st.integers(1, 8))
    params = (d + c + data.draw(st.integers(0, 10)), d, c)
    sessions = data.draw(st.integers(1, 8))
    tids = data.draw(st.sampled_from([4, 12, 1000]))  # a small pool reuses tids often
    # More submits than batches in some traces: the queue grows, as an overloaded one does.
    # In others, cancels and tasks submitted again churn: the reference's stale decodes.
    submits, batches, churn = data.draw(
        st.sampled_from([(6, 3, 1), (6, 1, 1), (3, 6, 1), (4, 3, 3)])
    )
    kinds = ["submit"] * submits + ["get_work"] * batches + ["cancel", "again"] * churn + ["clear"]
    pair = Pair(params, compat)
    made = 0
    for step in range(data.draw(st.integers(1, 80))):
        kind = data.draw(st.sampled_from(kinds))
        if kind == "submit":
            group = []
            sid = data.draw(st.integers(0, sessions - 1))
            for _ in range(data.draw(st.integers(1, 4))):
                decode = data.draw(st.integers(0, 2)) == 0
                size = 1 if decode else data.draw(st.integers(1, c))
                if data.draw(st.integers(0, 40)) == 0:
                    size = data.draw(st.sampled_from([0, 2, c + 1]))  # refused, with a reason
                out = None if decode else data.draw(st.sampled_from([None, None, True, False]))
                tid = data.draw(st.integers(0, tids - 1))
                group.append((made, tid, sid, "decode" if decode else "prefill", size, out))
                made += 1
            op: Op = ("submit", group)
        elif kind == "again" and made:
            # Task objects submitted before, submitted again (as they were made): mostly
            # ones the last call handed back.
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
    pair.drain()


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_fixed_mode_gives_the_batches_reasons_and_returns_of_the_walk_it_replaced(
    data: st.DataObject,
) -> None:
    random_trace(data, "fixed")


@SETTINGS
@given(st.data())
def test_reference_mode_gives_the_batches_and_returns_of_the_walk_it_replaced(
    data: st.DataObject,
) -> None:
    random_trace(data, "reference")


def long_trace(seed: int, events: int, compat: str) -> None:
    """Thousands of sessions waiting, prompts arriving faster than batches serve them,
    varied chunks, a session decoding many steps ahead, cancels (and rejoins), tid reuse
    from a large pool, tasks handed back submitted again, a clear: long enough for every
    compaction and renumbering of the queues to happen many times."""
    rng = random.Random(seed)
    pair = Pair((64, 2, 24), compat)
    made = sid = 0
    for n in range(events):
        r = rng.random()
        if r < 0.52:
            sid = rng.randint(0, 3000) if rng.random() < 0.3 else sid + 1
            group = []
            for _ in range(rng.randint(1, 4)):
                size = rng.choice((1, 2, 5, rng.randint(1, 24), 24))
                out = rng.choice((None, None, False, True))
                group.append((made, rng.randint(0, 20_000), sid, "prefill", size, out))
                made += 1
            op: Op = ("submit", group)
        elif r < 0.80:
            who = 7 if rng.random() < 0.3 else rng.randint(0, sid + 1)  # session 7 piles up
            op = ("submit", [(made, rng.randint(0, 20_000), who, "decode", 1, None)])
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


def test_both_modes_give_the_walks_batches_on_a_long_overloaded_trace() -> None:
    for compat in ("fixed", "reference"):
        long_trace(1, 8000, compat)


def test_both_modes_give_the_walks_decodes_from_a_queue_of_thousands() -> None:
    """Thousands of sessions' decodes queued, two taken a batch, with cancels and a tid
    reused, a session's decodes piling up behind its first, and tasks submitted again: past
    every compaction of the decode queue."""
    for compat in ("fixed", "reference"):
        rng = random.Random(5)
        pair = Pair((64, 2, 24), compat)
        made = 0
        for n in range(12_000):
            r = rng.random()
            if n < 3000 or r < 0.3:
                sid = 7 if rng.random() < 0.2 else rng.randint(0, 5000)
                op: Op = ("submit", [(made, rng.randint(0, 6000), sid, "decode", 1, None)])
                made += 1
            elif r < 0.85:
                op = ("get_work", False)
            elif r < 0.97:
                op = ("cancel", 7 if rng.random() < 0.1 else rng.randint(0, 5000))
            else:
                op = ("submit", [pair.made[rng.choice(pair.returned or [0])]])
            pair.do(*op, where=f"{compat}, op {n}: {op}", whole=n % 211 == 0)
        pair.drain()


def test_a_cancelled_decode_submitted_again_is_queued_where_the_reference_has_it() -> None:
    """compat=reference keeps a cancelled decode in its deque, marked, until a walk passes
    it; the same task submitted again unmarks it there, so it is queued twice. Whether it
    had been deferred behind its session's first decode or not, the batches are the walk's."""
    d1, d2, d3 = (
        (0, 1, 10, "decode", 1, None),
        (1, 2, 10, "decode", 1, None),
        (2, 3, 20, "decode", 1, None),
    )
    for first_deferred in (True, False):
        pair = Pair((4, 2, 1), "reference")
        pair.do("submit", [d1, d2] if first_deferred else [d1], "setup")
        pair.do("submit", [d3], "setup")
        if first_deferred:
            pair.do("get_work", False, "d1 taken, d2 deferred behind it")
        pair.do("cancel", 10, "d2 (or d1) marked, kept")
        pair.do("submit", [d2] if first_deferred else [d1], "submitted again")
        pair.drain()
