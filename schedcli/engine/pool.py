"""Jobs on worker processes, where a worker that ends without answering is an answer too
(#54): its job gets a ``Vanished``, never a hang and never a pass.

``multiprocessing.Pool`` loses the job of a worker that dies (a C++ scheduler that ends the
process): it starts another worker and waits for the lost answer forever. Here each worker
has a pipe of its own and the parent waits on the pipes and the workers' ends together.

Invariants:
- A worker holds at most one job at a time, so a worker's end names its job.
- Answers come back in the jobs' order, each as soon as it and those before it are in.
- An exception a job raises is raised here, as the pool's ``imap`` would; an ending worker
  is a ``Vanished`` for its job, and another worker takes the jobs left.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from ..streams.interrupt import die_with_parent

J = TypeVar("J")
R = TypeVar("R")


@dataclass(frozen=True)
class Vanished:
    """A worker ended without answering its job: how it ended."""

    exitcode: int | None  # multiprocessing's: the status, or minus the signal

    @property
    def how(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            return f"signal {-code}, {signal.Signals(-code).name}"
        return f"exit status {code}"


def _serve(
    conn: Connection, fn: Callable[[Any], Any], setup: Callable[[], None] | None, parent: int
) -> None:
    die_with_parent(parent)  # a worker never outlives the process that waits for it
    if setup is not None:
        setup()
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        index, job = item
        try:
            answer: tuple[str, Any] = ("ok", fn(job))
        except Exception as e:  # raised in the parent, as Pool.imap raises it
            answer = ("raised", e)
        try:
            conn.send((index, answer))
        except Exception as e:  # an answer that does not pickle
            conn.send((index, ("raised", RuntimeError(f"{type(e).__name__}: {e}"))))


@dataclass
class _Worker(Generic[J]):
    process: BaseProcess
    conn: Connection
    job: int | None = None


def answers(
    fn: Callable[[J], R],
    jobs: Sequence[J],
    workers: int,
    setup: Callable[[], None] | None = None,
) -> Iterator[R | Vanished]:
    """``fn`` of each job, in order, on ``workers`` forked processes (each running
    ``setup`` first); a ``Vanished`` for a job whose worker ended before answering it."""
    context = multiprocessing.get_context("fork")
    left = deque(enumerate(jobs))
    done: dict[int, R | Vanished] = {}
    crew: list[_Worker[J]] = []
    finished = False

    def hire() -> None:
        here, there = context.Pipe()
        process = context.Process(target=_serve, args=(there, fn, setup, os.getpid()), daemon=True)
        process.start()
        there.close()
        worker: _Worker[J] = _Worker(process, here)
        crew.append(worker)
        give(worker)

    def give(worker: _Worker[J]) -> None:
        if left:
            index, job = left.popleft()
            worker.job = index
            worker.conn.send((index, job))
        else:
            worker.job = None

    try:
        for _ in range(min(workers, len(jobs))):
            hire()
        shown = 0
        while shown < len(jobs):
            while shown in done:
                yield done.pop(shown)
                shown += 1
            if shown == len(jobs):
                break
            busy = [w for w in crew if w.job is not None]
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                ended = worker.process.sentinel in ready
                if worker.conn in ready:
                    try:
                        index, (kind, value) = worker.conn.recv()
                    except (EOFError, OSError):
                        ended = True  # it ended without a word
                    else:
                        if kind == "raised":
                            raise value
                        done[index] = value
                        give(worker)
                        continue
                if ended:
                    worker.process.join()
                    assert worker.job is not None
                    done[worker.job] = Vanished(worker.process.exitcode)
                    worker.conn.close()
                    crew.remove(worker)
                    if left:
                        hire()
        finished = True
    finally:
        for worker in crew:
            if finished:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)  # no more work: it leaves on its own
            elif worker.process.is_alive():
                # Leaving early (a stop, an error): the job being run stops (each worker's
                # own stop handler cleans up) and no more start.
                with contextlib.suppress(OSError):
                    os.kill(worker.process.pid or 0, signal.SIGTERM)
        for worker in crew:
            worker.process.join()
            worker.conn.close()


__all__ = ["Vanished", "answers"]
