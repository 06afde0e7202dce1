"""The interface's promises, checked against every registered policy with random traffic."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import Scheduler, Task, policy_sources
from schedcli.catalog.registry import build_policy
from tests.conformance import Model, Op, play, random_ops

POLICIES = sorted(n for n, s in policy_sources().items() if s.level == "task")


def random_params(name: str, rng: random.Random) -> dict[str, Any]:
    """Small random limits the policy accepts (small limits reach the edge cases)."""
    cls = policy_sources()[name].load()
    for _ in range(200):
        params: dict[str, Any] = {}
        for p in cls.PARAMS:
            if p.type is str:
                params[p.name] = p.default  # compat=reference breaks the promises on purpose
            elif p.type is int:
                params[p.name] = rng.randint(1, 24)
            else:
                params[p.name] = round(rng.uniform(0.5, 3.0), 3)
        try:
            cls(**params)
        except ValueError:
            continue
        return params
    return {}


def chunk_limit(policy: Scheduler) -> int:
    params = policy.params()
    if "max_prefill_chunk_size" in params:
        return int(params["max_prefill_chunk_size"])
    budget = policy.token_budget
    return min(budget, 16) if budget else 16


def fresh(name: str, seed: int) -> tuple[Model, random.Random]:
    rng = random.Random(seed)
    policy = build_policy(name, random_params(name, rng))
    return Model(policy), rng


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("seed", range(6))
def test_thousands_of_random_operations_keep_every_promise(name: str, seed: int) -> None:
    model, rng = fresh(name, seed)
    ops = random_ops(rng, 5000, max_size=chunk_limit(model.policy), tids=40, sids=8)
    play(model, ops)
    assert model.steps > 1000


op_strategy = st.one_of(
    st.builds(
        Op,
        st.just("submit"),
        st.lists(
            st.tuples(
                st.integers(0, 12),
                st.integers(0, 4),
                st.sampled_from(["prefill", "decode"]),
                st.integers(0, 9),
                st.sampled_from([None, True, False]),
                st.integers(-1, 1),
            ),
            min_size=1,
            max_size=4,
        ),
    ),
    st.builds(Op, st.just("get_work")),
    st.builds(Op, st.just("cancel"), sid=st.integers(0, 4)),
    st.builds(Op, st.just("clear")),
)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), ops=st.lists(op_strategy, max_size=120))
def test_any_call_sequence_keeps_every_promise(name: str, seed: int, ops: list[Op]) -> None:
    model, _ = fresh(name, seed)
    play(model, ops)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_same_calls_give_the_same_batches(name: str, seed: int) -> None:
    runs = []
    for _ in range(2):
        model, rng = fresh(name, seed)
        runs.append(
            play(model, random_ops(rng, 400, max_size=chunk_limit(model.policy), tids=30, sids=6))
        )
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", POLICIES)
def test_many_producers_one_consumer_lose_nothing(name: str) -> None:
    policy = build_policy(name)
    producers, per_producer = 6, 400
    chunk = chunk_limit(policy)
    done = threading.Event()
    got: list[Task] = []
    submitted: list[Task] = []
    lock = threading.Lock()

    def produce(p: int) -> None:
        rng = random.Random(p)
        for i in range(per_producer):
            sid = f"p{p}s{rng.randrange(5)}"
            kind = "decode" if rng.random() < 0.5 else "prefill"
            t = Task((p, i).__repr__(), sid, kind, 1 if kind == "decode" else rng.randint(1, chunk))
            assert policy.submit([t])
            with lock:
                submitted.append(t)

    def consume() -> None:
        while not done.is_set() or policy.has_work():
            got.extend(policy.get_work())

    consumer = threading.Thread(target=consume)
    consumer.start()
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done.set()
    consumer.join(timeout=60)
    assert not consumer.is_alive()
    assert len(got) == producers * per_producer
    assert {id(t) for t in got} == {id(t) for t in submitted}


@pytest.mark.parametrize("name", POLICIES)
def test_observers_calling_has_work_during_scheduling_are_safe(name: str) -> None:
    policy = build_policy(name)
    stop = threading.Event()
    errors: list[BaseException] = []

    def observe() -> None:
        try:
            while not stop.is_set():
                assert policy.has_work() in (True, False)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    observers = [threading.Thread(target=observe) for _ in range(3)]
    for th in observers:
        th.start()
    model = Model(policy)
    rng = random.Random(7)
    play(model, random_ops(rng, 3000, max_size=chunk_limit(policy), tids=50, sids=10))
    stop.set()
    for th in observers:
        th.join()
    assert errors == []
