"""Jobs on worker processes (or a Ray cluster), the one pool ``check`` and ``sweep`` share,
where a worker that ends without answering is an answer too (#54): its job gets a
``Vanished``, never a hang and never a pass.

``multiprocessing.Pool`` loses the job of a worker that dies (a C++ scheduler that ends the
process): it starts another worker and waits for the lost answer forever. Here each worker
has a pipe of its own and the parent waits on the pipes and the workers' ends together.

Invariants:
- A worker holds at most one job at a time, so a worker's end names its job.
- ``completed`` gives each answer as it comes in, with its job's index; ``answers`` gives
  them in the jobs' order, each as soon as it and those before it are in.
- An exception a job raises is raised here, as the pool's ``imap`` would; an ending worker
  is a ``Vanished`` for its job, and another worker takes the jobs left.
- A stop reaches the workers: each leaves Ctrl-C to the parent, and the parent leaving
  early (a stop, an error) terminates them, each exiting through its ``finally`` blocks
  (a file being written is not put in place: its temporary file goes). A worker that never
  sees that signal still leaves when told there is no more work.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, TypeVar

from ..streams.interrupt import die_with_parent

J = TypeVar("J")
R = TypeVar("R")
Args = tuple[Any, ...]  # a job: the arguments of one call


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


# Each answer as it comes in, with its job's index.
Answered = Generator[tuple[int, "R | Vanished"], None, None]


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the parent (which terminates it), and on termination
    exits quietly through its ``finally`` blocks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_quietly)


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _serve(
    conn: Connection,
    fn: Callable[..., Any],
    setup: Callable[[], None] | None,
    parent: int | None,
) -> None:
    # A worker never outlives the process that waits for it (a forkserver's worker: the
    # server, which leaves with the parent).
    die_with_parent(os.getppid() if parent is None else parent)
    _worker_signals()
    if setup is not None:
        setup()
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        index, args = item
        try:
            answer: tuple[str, Any] = ("ok", fn(*args))
        except Exception as e:  # raised in the parent, as Pool.imap raises it
            answer = ("raised", e)
        try:
            conn.send((index, answer))
        except Exception as e:  # an answer that does not pickle
            conn.send((index, ("raised", RuntimeError(f"{type(e).__name__}: {e}"))))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    job: int | None = None


@dataclass
class Processes:
    """``workers`` local processes, started by ``start`` (``fork``: a copy of this process,
    what it has loaded included; ``forkserver``: forks of a clean server that has imported
    ``preload``, never of this process, for a caller with threads; its ``fn`` and ``setup``
    must pickle), each running ``setup`` first."""

    workers: int
    start: str = "fork"
    preload: Sequence[str] = ()
    setup: Callable[[], None] | None = None
    sees_files: bool = field(default=True, init=False)  # a job may name a file by its path

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def put(self, data: bytes) -> Any:
        """What stands for ``data`` in a job: the workers read files themselves."""
        return data

    def completed(self, fn: Callable[..., R], jobs: Sequence[Args]) -> Answered[R]:
        """``fn(*job)`` of each job with its index, as each comes in; a ``Vanished`` for a
        job whose worker ended before answering it."""
        context: Any = multiprocessing.get_context(self.start)  # fork's or forkserver's
        if self.start == "forkserver" and self.preload:
            context.set_forkserver_preload(list(self.preload))
        parent = os.getpid() if self.start == "fork" else None
        left = deque(enumerate(jobs))
        crew: list[_Worker] = []
        finished = False

        def hire() -> None:
            here, there = context.Pipe()
            process = context.Process(
                target=_serve, args=(there, fn, self.setup, parent), daemon=True
            )
            process.start()
            there.close()
            worker = _Worker(process, here)
            crew.append(worker)
            give(worker)

        def give(worker: _Worker) -> None:
            if left:
                index, job = left.popleft()
                worker.job = index
                worker.conn.send((index, job))
            else:
                worker.job = None

        try:
            for _ in range(min(self.workers, len(jobs))):
                hire()
            answered = 0
            while answered < len(jobs):
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
                            give(worker)
                            answered += 1
                            yield index, value
                            continue
                    if ended:
                        worker.process.join()
                        assert worker.job is not None
                        lost = worker.job
                        worker.conn.close()
                        crew.remove(worker)
                        if left:
                            hire()
                        answered += 1
                        yield lost, Vanished(worker.process.exitcode)
            finished = True
        finally:
            for worker in crew:
                if finished:
                    with contextlib.suppress(OSError):
                        worker.conn.send(None)  # no more work: it leaves on its own
                elif worker.process.is_alive():
                    # Leaving early (a stop, an error): the job being run stops (each
                    # worker's own stop handler cleans up) and no more start.
                    with contextlib.suppress(OSError):
                        os.kill(worker.process.pid or 0, signal.SIGTERM)
            for worker in crew:
                worker.process.join()
                worker.conn.close()


@dataclass
class RayCluster:
    """A Ray cluster (``address``; none: one started here with ``workers`` CPUs, shut down
    on leaving). Its workers may not see this machine's files: a job carries what it reads
    (``put``). A worker's end is Ray's error, raised here. Entering without Ray installed
    raises ``ImportError``."""

    workers: int | None = None
    address: str | None = None
    sees_files: bool = field(default=False, init=False)
    _started: bool = field(default=False, init=False)

    def __enter__(self) -> RayCluster:
        import ray

        self._started = not ray.is_initialized()
        if self._started:
            options: dict[str, Any] = (
                {"address": self.address} if self.address else {"num_cpus": self.workers}
            )
            ray.init(include_dashboard=False, log_to_driver=False, **options)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._started:
            import ray

            ray.shutdown()

    def put(self, data: bytes) -> Any:
        """``data`` in the cluster's object store, once: a job's argument the workers read."""
        import ray

        return ray.put(data)

    def completed(self, fn: Callable[..., R], jobs: Sequence[Args]) -> Answered[R]:
        import ray

        remote: Any = ray.remote(fn)
        refs = {remote.remote(*job): index for index, job in enumerate(jobs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield refs[ready[0]], ray.get(ready[0])


Pool = Processes | RayCluster


def in_order(answered: Generator[tuple[int, R], None, None], count: int) -> Iterator[R]:
    """``count`` answers that come in any order, given in their jobs' order, each as soon
    as it and those before it are in."""
    done: dict[int, R] = {}
    shown = 0
    with contextlib.closing(answered):  # left early: the pool stops its workers at once
        for index, answer in answered:
            done[index] = answer
            while shown in done:
                yield done.pop(shown)
                shown += 1
    assert shown == count, (shown, count)


def answers(
    fn: Callable[[J], R],
    jobs: Sequence[J],
    workers: int,
    setup: Callable[[], None] | None = None,
) -> Iterator[R | Vanished]:
    """``fn`` of each job, in order, on ``workers`` forked processes (each running
    ``setup`` first); a ``Vanished`` for a job whose worker ended before answering it."""
    pool = Processes(workers, setup=setup)
    return in_order(pool.completed(fn, [(job,) for job in jobs]), len(jobs))


__all__ = ["Pool", "Processes", "RayCluster", "Vanished", "answers", "in_order"]
