"""A suite's checks run: in this process, or on worker processes (``engine.pool``) whose
end without a verdict fails their trace (a C++ scheduler that ends the process, #54)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TypeVar

import orjson

from ...model.errors import SchedcliError
from ...runtimes.executorch.spec import PREFIX as CXX_PREFIX
from ...streams.source import open_binary
from ..pool import Vanished, answers
from .trace import Job, Verdict, check_job, vanished

T = TypeVar("T")


def checked(jobs: Sequence[Job], workers: int, then: Callable[[Verdict], T]) -> Iterator[T]:
    """``then`` of each job's verdict, in the jobs' order, the jobs checked on ``workers``
    processes (never more than the cores); in this one when there is one at a time and no
    C++ policy, which alone can end the process it runs in (a worker that ends without a
    verdict fails its trace). ``then`` runs where the verdict was reached: a failure's
    facts are the replay's live objects, which stay in that process (``then`` must pickle,
    and what it makes)."""
    workers = min(workers, len(jobs), os.cpu_count() or 1)
    if workers < 2 and not any(map(may_end_the_process, jobs)):
        for job in jobs:
            yield then(check_job(job))
        return
    yield from checked_apart(jobs, max(workers, 1), then)


def checked_apart(jobs: Sequence[Job], workers: int, then: Callable[[Verdict], T]) -> Iterator[T]:
    """``then`` of each job's verdict, from worker processes: one that ends without
    answering (its policy ended the process) fails its trace, with how it ended."""
    answered = answers(partial(_then, then), jobs, workers)
    for job, answer in zip(jobs, answered, strict=True):
        yield then(vanished(job, answer)) if isinstance(answer, Vanished) else answer


def _then(then: Callable[[Verdict], T], job: Job) -> T:
    return then(check_job(job))


def may_end_the_process(job: Job) -> bool:
    """Whether ``job`` may run a C++ scheduler: its folder's policy, or (with none) its
    trace's header, names one."""
    if job.policy is not None:
        return job.policy.startswith(CXX_PREFIX)
    try:
        if not stat.S_ISREG(os.stat(job.trace).st_mode):
            return False  # a FIFO would wait for a writer: its check says what it is
        with open_binary(job.trace) as f:
            first = f.readline(1 << 20)
        header = orjson.loads(first)
    except (SchedcliError, OSError, ValueError, EOFError):
        return False  # a trace that does not open says so when it is checked
    policy = header.get("policy") if isinstance(header, dict) else None
    return isinstance(policy, str) and policy.startswith(CXX_PREFIX)
