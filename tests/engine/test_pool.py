"""engine/pool.py: the one pool check and sweep run on. Answers in order (or as they come,
with their index), a worker that ends without answering is a Vanished for its job and the
rest still answered, an exception a job raises is raised here, and leaving early leaves
no worker behind."""

from __future__ import annotations

import os
import time

import pytest

from schedcli.engine.pool import Processes, Vanished, answers, in_order


def _square(n: int) -> int:
    if n == 3:
        time.sleep(0.2)  # answered after those behind it
    return n * n


def _ends_on_two(n: int) -> int:
    if n == 2:
        os._exit(7)
    return n


def _raises_on_one(n: int) -> int:
    if n == 1:
        raise ValueError("one")
    return n


def _sleeps(n: int) -> int:
    if n:
        time.sleep(30)
    return n


def test_answers_come_in_the_jobs_order_whatever_order_they_are_made_in() -> None:
    assert list(answers(_square, range(6), 3)) == [0, 1, 4, 9, 16, 25]


def test_completed_gives_each_answer_once_with_its_index() -> None:
    got = list(Processes(3).completed(_square, [(n,) for n in range(6)]))
    assert sorted(got) == [(n, n * n) for n in range(6)]


def test_a_worker_that_ends_without_answering_is_vanished_for_its_job_only() -> None:
    got = list(answers(_ends_on_two, range(5), 2))
    assert got == [0, 1, Vanished(7), 3, 4]
    assert Vanished(7).how == "exit status 7" and Vanished(-9).how == "signal 9, SIGKILL"


def test_an_exception_a_job_raises_is_raised_here() -> None:
    with pytest.raises(ValueError, match="one"):
        list(answers(_raises_on_one, range(3), 2))


def test_a_forkserver_pool_gives_the_same_answers_as_a_forked_one() -> None:
    jobs = [(n,) for n in range(5)]
    server = Processes(2, "forkserver", ["schedcli.engine.pool"])
    assert list(in_order(server.completed(_square, jobs), 5)) == list(answers(_square, range(5), 2))


def test_leaving_early_stops_the_workers_at_once() -> None:
    import multiprocessing

    started = time.monotonic()
    answered = answers(_sleeps, range(4), 2)
    assert next(answered) == 0  # the other worker is well into its 30 s
    answered.close()
    assert multiprocessing.active_children() == []
    assert time.monotonic() - started < 10
