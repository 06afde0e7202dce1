"""A kit for policy authors: the Scheduler interface's promises as a model checked after
every call, and random traffic to drive it (docs/plugins.md, "Test it").

    from schedcli.testing import check_policy

    def test_my_policy_keeps_every_promise():
        check_policy(lambda: MyPolicy(max_batch_tokens=64))

Nothing here is specific to one policy except the limits it declares (max_batch_tokens,
max_decode_sequences, max_num_seqs). schedcli's own property tests use the same model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .model.scheduler import Scheduler
from .model.task import Id, Task


@dataclass
class Op:
    name: str  # submit | get_work | cancel | clear
    group: list[tuple[Id, Id, str, int, bool | None, int]] = field(default_factory=list)
    sid: Id = 0

    def tasks(self) -> list[Task]:
        return [
            Task(tid, sid, kind, size, produce_output=out, priority=prio)
            for tid, sid, kind, size, out, prio in self.group
        ]


class Model:
    """What must be true of the scheduler after each call."""

    def __init__(self, policy: Scheduler) -> None:
        self.policy = policy
        params = policy.params()
        self.budget = policy.token_budget
        self.decode_cap: int | None = params.get("max_decode_sequences")
        self.seq_cap: int | None = params.get("max_num_seqs")
        self.outstanding: dict[Id, Task] = {}
        self.accepted = 0
        self.returned = 0
        self.steps = 0

    def _take_back(self, tasks: Iterable[Task], how: str) -> None:
        for t in tasks:
            mine = self.outstanding.get(t.tid)
            assert mine is t, f"{how} returned {t!r}, which is not queued (lost or returned twice)"
            del self.outstanding[t.tid]
            self.returned += 1

    def submit(self, tasks: list[Task]) -> bool:
        generic_reason = None
        seen: set[Id] = set()
        for t in tasks:
            if t.size == 0 or (t.is_decode and t.size != 1):
                generic_reason = "size"
            if t.tid in self.outstanding or t.tid in seen:
                generic_reason = "tid"
            seen.add(t.tid)
        reason = self.policy.try_submit(tasks)
        if generic_reason is not None:
            assert reason is not None, f"accepted a group that breaks the {generic_reason} rule"
        if reason is None:
            for t in tasks:
                self.outstanding[t.tid] = t
            self.accepted += len(tasks)
        self.check_has_work()
        return reason is None

    def get_work(self) -> list[Task]:
        before = dict(self.outstanding)
        batch = self.policy.get_work()
        self.steps += 1
        self.check_batch(batch, before)
        self._take_back(batch, "get_work")
        if before:
            assert batch, "get_work returned an empty batch while work was queued"
        self.check_has_work()
        return batch

    def cancel(self, sid: Id) -> list[Task]:
        expected = [t for t in self.outstanding.values() if t.sid == sid]
        dropped = self.policy.cancel(sid)
        assert sorted(map(id, dropped)) == sorted(map(id, expected)), (
            "cancel returned the wrong set"
        )
        assert all(t.cancelled for t in dropped)
        self._take_back(dropped, "cancel")
        self.check_has_work()
        return dropped

    def clear(self) -> list[Task]:
        expected = list(self.outstanding.values())
        dropped = self.policy.clear()
        assert [id(t) for t in dropped] == [id(t) for t in expected], (
            "clear must return every queued task, in submission order"
        )
        assert all(t.cancelled for t in dropped)
        self._take_back(dropped, "clear")
        self.check_has_work()
        return dropped

    def drain(self) -> None:
        limit = len(self.outstanding) + 1
        for _ in range(limit):
            if not self.policy.has_work():
                break
            self.get_work()
        assert not self.policy.has_work(), "the policy did not drain"
        assert not self.outstanding
        assert self.accepted == self.returned

    def check_has_work(self) -> None:
        assert self.policy.has_work() == bool(self.outstanding)

    def check_batch(self, batch: list[Task], before: dict[Id, Task]) -> None:
        tokens = sum(t.size for t in batch)
        if self.budget is not None:
            assert tokens <= self.budget, f"batch of {tokens} tokens over budget {self.budget}"
        if self.decode_cap is not None:
            decodes = sum(1 for t in batch if t.is_decode)
            assert decodes <= self.decode_cap, f"{decodes} decodes over cap {self.decode_cap}"
        if self.seq_cap is not None:
            assert len(batch) <= self.seq_cap, f"{len(batch)} tasks over cap {self.seq_cap}"
        by_session: dict[Id, list[Task]] = {}
        for t in batch:
            by_session.setdefault(t.sid, []).append(t)
        for sid, mine in by_session.items():
            if len(mine) > 1:
                assert not any(t.is_decode for t in mine), f"decode of {sid!r} shares the batch"
            outputs = sum(1 for t in mine if t.produce_output)
            assert outputs <= 1, f"batch owes session {sid!r} {outputs} outputs"
            # A session's chunks leave in submission order: each is the oldest of its
            # session's queued prefill chunks at the time.
            queued_chunks = [t for t in before.values() if t.sid == sid and not t.is_decode]
            taken_chunks = [t for t in mine if not t.is_decode]
            for taken, due in zip(taken_chunks, queued_chunks, strict=False):
                assert taken is due, (
                    f"get_work dispatched chunk {taken.tid!r} of session {sid!r} "
                    f"before chunk {due.tid!r}, submitted ahead of it"
                )


def random_ops(rng: random.Random, n: int, *, max_size: int, tids: int, sids: int) -> list[Op]:
    """A random call sequence that provokes tid reuse, rejections and session clashes."""
    ops: list[Op] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            sid = rng.randrange(sids)
            group: list[tuple[Id, Id, str, int, bool | None, int]] = []
            for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
                kind = "decode" if rng.random() < 0.45 else "prefill"
                size = 1 if kind == "decode" else rng.randint(1, max_size)
                if rng.random() < 0.03:
                    size = rng.choice((0, 2, max_size + 3))
                out = rng.choice((None, None, None, True, False)) if kind == "prefill" else None
                group.append((rng.randrange(tids), sid, kind, size, out, rng.randint(-2, 2)))
            ops.append(Op("submit", group))
        elif r < 0.82:
            ops.append(Op("get_work"))
        elif r < 0.97:
            ops.append(Op("cancel", sid=rng.randrange(sids)))
        else:
            ops.append(Op("clear"))
    return ops


def play(model: Model, ops: Iterable[Op]) -> list[Any]:
    """Apply the ops through the model; returns a transcript for determinism checks."""
    transcript: list[Any] = []
    for op in ops:
        if op.name == "submit":
            transcript.append(("submit", model.submit(op.tasks())))
        elif op.name == "get_work":
            transcript.append(("get_work", [t.tid for t in model.get_work()]))
        elif op.name == "cancel":
            transcript.append(("cancel", [t.tid for t in model.cancel(op.sid)]))
        else:
            transcript.append(("clear", [t.tid for t in model.clear()]))
    model.drain()
    return transcript


def check_policy(
    make: Callable[[], Scheduler],
    *,
    seeds: Iterable[int] = range(4),
    operations: int = 3000,
    max_size: int | None = None,
) -> None:
    """Drive fresh policies from ``make`` with random traffic (submits with tid reuse and
    rejections, get_work, cancel, clear) and assert every promise after every call, then
    that each drains. Raises AssertionError naming the broken promise. Deterministic."""
    for seed in seeds:
        rng = random.Random(seed)
        model = Model(make())
        limit = max_size or model.policy.prefill_chunk_limit or 16
        play(model, random_ops(rng, operations, max_size=limit, tids=40, sids=8))


__all__ = ["Model", "Op", "check_policy", "play", "random_ops"]
