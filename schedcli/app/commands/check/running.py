"""Running a suite's checks: in this process, or on worker processes whose end without a
verdict fails their trace (a C++ scheduler that ends the process, #54)."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator, Sequence

import orjson

from ....engine.pool import Vanished, answers
from ....engine.stall import STALL_STEPS_ENV
from ....model.errors import SchedcliError
from ....runtimes.executorch.spec import ENV_ROOT
from ....runtimes.executorch.spec import PREFIX as CXX_PREFIX
from ....streams.source import open_binary
from .suite import BROKEN, CheckRequest, Job, Suite, Verdict, check_job


def run_suite(req: CheckRequest, suite: Suite) -> Iterator[Verdict]:
    """Each trace's verdict, in the suite's order, the traces checked on ``req.jobs``
    processes; in this one when there is one job at a time and no C++ policy, which alone
    can end the process it runs in (a worker that ends without a verdict fails its trace)."""
    jobs = suite_jobs(req, suite)
    workers = min(req.jobs or 1, len(jobs), os.cpu_count() or 1)  # no more than the cores
    if workers < 2 and not any(map(may_end_the_process, jobs)):
        yield from map(check_job, jobs)
        return
    yield from checked_apart(jobs, max(workers, 1))


def suite_jobs(req: CheckRequest, suite: Suite) -> list[Job]:
    """Each trace of the suite as a job, under its folder's policy and parameters, or the
    command line's: -p replaces a folder's policy and its parameters (they were set for
    that policy), -P goes over what applies. Each carries what the run was given outside
    the command's arguments (``Job.executorch``, ``Job.stall_steps``): the checkout only
    for a job that builds a C++ policy, whose reproduce command needs it."""
    jobs = []
    for trace, golden in suite.traces:
        settings = req.config.settings_for(trace)
        folder = {} if req.policy is not None else settings.params
        job = Job(
            trace,
            golden,
            req.policy if req.policy is not None else settings.policy,
            {**folder, **req.params},
            req.update,
            req.dry_run,
            req.golden_required(trace),
            req.allow_incomplete,
            suite.alias,
            stall_steps=os.environ.get(STALL_STEPS_ENV) or None,
        )
        if may_end_the_process(job):
            job.executorch = os.environ.get(ENV_ROOT) or None
        jobs.append(job)
    return jobs


def checked_apart(jobs: Sequence[Job], workers: int) -> Iterator[Verdict]:
    """Each job's verdict from worker processes: one that ends without answering (its
    policy ended the process) fails its trace, with how it ended."""
    for job, answer in zip(jobs, answers(check_job, jobs, workers, _worker_signals), strict=True):
        yield answer if isinstance(answer, Verdict) else _vanished(job, answer)


def _vanished(job: Job, ended: Vanished) -> Verdict:
    detail = (
        f"{job.trace}: the process checking it ended ({ended.how}) without a verdict: its "
        "policy ended the process (a C++ scheduler must return from every call)"
    )
    verdict = Verdict(job.trace, None, BROKEN, "", detail, None)
    verdict.exit_code = 3
    verdict.job = job
    return verdict


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


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the command (which terminates it), and on termination
    exits quietly through its ``finally`` blocks (a golden being written is not put in
    place: its temporary file goes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_quietly)


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
