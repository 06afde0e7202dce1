"""The debugger's time machine, a process of its own (``python -m
schedcli.engine.travel.server SPEC``), speaking ``wire`` messages on its stdin and stdout.

It replays the trace once, sending the client an index of every step (tokens, queued,
batch size) and its marks as it goes. Every ``every`` steps it forks a *checkpoint*: a
copy of the whole replay, stopped there, whatever the policy (compiled, C++ or vLLM's,
all are process state). A question about step t goes to the checkpoint nearest before t,
which forks a *worker* that replays on from there and answers (``worker.py``), so an answer
costs at most the steps between two checkpoints. A worker answers its checkpoint, which
passes the answer on whole; a worker that ends without one (killed, or its policy ending
the process) is told of as ``lost``, and the server asks once more before passing the loss
to the client: every question gets an answer, a loss, or the server's end. Checkpoints are
capped at ``CAP``; past it, the one whose neighbours are nearest is dropped for each new
one, and new ones come further apart, so memory follows the cap, not the trace, and the
gaps stay even.

Invariant: a checkpoint at ``bound`` has run every side's steps up to ``bound`` and none
past it, so it answers questions about steps after ``bound`` only.
"""

from __future__ import annotations

import functools
import gc
import os
import select
import signal
import stat
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import orjson

from ...model.errors import InvariantError, Said, SchedcliError
from ...model.records import Record
from ...model.steps import Step
from ..run import OpenReplay, open_replay
from .session import Compare, Session
from .wire import receive, said_out, send, whole, write_all
from .worker import Done, worker_for

CAP: Final = 32
FLUSH_SECONDS: Final = 0.05  # the index reaches the client at least this often
ASKED: Final = 2  # times a question is asked before its loss is passed on


@dataclass
class _Checkpoint:
    bound: int
    pid: int
    requests: int  # fd: questions to it
    replies: int  # fd: its workers' answers, passed on whole (or their loss)
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)  # questions, by id


def _offsets() -> dict[int, int]:
    """Where each regular file this process reads stands, taken before a fork: after it,
    parent and child share one offset until the child has its own (``_reopen``)."""
    offsets = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) and os.O_ACCMODE & _flags(fd) == os.O_RDONLY:
                offsets[fd] = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            continue
    return offsets


def _reopen(offsets: dict[int, int]) -> None:
    """Each file of ``offsets`` opened again (the same file, renamed or deleted since
    included) at its offset, under the same descriptor."""
    for fd, at in offsets.items():
        fresh = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        os.lseek(fresh, at, os.SEEK_SET)
        os.dup2(fresh, fd, inheritable=False)
        os.close(fresh)


def _flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


def ending_of(e: BaseException, steps: int) -> dict[str, Any]:
    """How the replay stopped, as the client shows it and exits with."""
    code = e.exit_code if isinstance(e, SchedcliError) else 4
    message = str(e) if isinstance(e, SchedcliError) else f"{type(e).__name__}: {e}"
    return {"exit": code, "message": message, "step": steps, "broke": isinstance(e, InvariantError)}


class Server:
    def __init__(self, spec: dict[str, Any], commands: int, out: int) -> None:
        self.spec, self.commands, self.out = spec, commands, out
        self.every: int = spec.get("every", 1000)
        self.checkpoints: list[_Checkpoint] = []
        self.next_checkpoint = self.every
        self.forkable = hasattr(os, "fork") and os.path.isdir("/proc/self/fd")
        self.rows: list[list[int]] = []
        self.marks: list[list[Any]] = []
        self.flushed_at = time.monotonic()
        self.position: Any = None
        self.size = 0
        self.session: Session | None = None
        self.serving = True  # False in a checkpoint or worker

    # --- the replay ----------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except SchedcliError as e:  # before the first step: the trace or the policy refused
            send(self.out, {"failed": ending_of(e, 0)})

    def _run(self) -> None:
        spec = self.spec
        ending: dict[str, Any] | None = None
        with self._open(lambda m: print(m, file=sys.stderr)) as opened:
            compare = Compare(**spec["compare"])
            incomplete = spec.get("allow_incomplete", False)
            session = self.session = Session(opened, compare, self, incomplete)
            self.position = opened.reader.position
            self.size = _size(spec["path"])
            self.forkable = self.forkable and type(opened.policy).forkable
            self._hello(opened.level.name, opened.policy_name, opened.token_budget)
            if self.forkable:
                self.checkpoint(-1)
            try:
                session.run()
            except Done:
                os._exit(0)
            except Exception as e:  # every stop is told, the replay's own and a crash alike
                if not self.serving:
                    self._worker_ended(ending_of(e, session.steps))
                ending = ending_of(e, session.steps)
            if not self.serving:
                self._worker_ended(None)
            self._flush()
            compared = session.compared()  # the verdict's: what differs, to the end
            send(
                self.out,
                {"indexed": {"steps": session.steps, "ending": ending, "compared": compared}},
            )
            self._serve()

    def _open(self, note: Callable[[str], None]) -> AbstractContextManager[OpenReplay]:
        """The trace opened for one pass, as the spec says (the index's, or a re-run's)."""
        spec = self.spec
        return open_replay(
            spec["path"],
            policy=spec.get("policy"),
            params=spec.get("params") or {},
            note=note,
            allow_incomplete=spec.get("allow_incomplete", False),
        )

    def _hello(self, level: str, policy: str, budget: int | None) -> None:
        session = self.session
        assert session is not None
        names = [side.name for side in session.sides]
        send(
            self.out,
            {
                "hello": {
                    "level": level,
                    "policies": names,
                    "other": session.compare.label,
                    "budget": budget,
                    "every": self.every,
                    "checkpoints": self.forkable,
                }
            },
        )

    # --- the session's hooks, while serving -------------------------------------------------

    def side_step(self, side: int, step: int, record: Step) -> None:
        pass

    def event(self, record: Record, step: int) -> None:
        pass

    def mark(self, step: int, kind: str, *text: Said) -> None:
        self.marks.append([step, kind, said_out(text)])

    def aligned(self, step: int, records: list[Record | None], other: Any) -> None:
        mine = records[0]
        if mine is None:
            self.rows.append([step, 0, 0, 0])
        else:
            self.rows.append([step, mine["tokens"], mine["queued"], len(mine["batch"])])
        if step & 63 == 0 and time.monotonic() - self.flushed_at > FLUSH_SECONDS:
            self._flush()
            self._poll(0)
        if step >= self.next_checkpoint and self.forkable:
            self.next_checkpoint = step + self.every
            self.checkpoint(step)  # last: in a worker, the replay goes on from here

    def _flush(self) -> None:
        position = self.position() if self.position is not None else 0
        body = {
            "rows": self.rows,
            "marks": self.marks,
            "pos": position,
            "size": self.size,
            "checkpoints": [c.bound for c in self.checkpoints],
        }
        send(self.out, {"index": body})
        self.rows, self.marks = [], []
        self.flushed_at = time.monotonic()

    # --- checkpoints -----------------------------------------------------------------------

    def checkpoint(self, step: int) -> None:
        assert self.session is not None
        bound = max([step, *(side.last_step for side in self.session.sides)])
        if len(self.checkpoints) >= CAP:
            self._thin(bound)
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        offsets = _offsets()
        gc.freeze()  # a collection writes to every object it visits: pages copied per fork
        pid = os.fork()
        if pid:
            os.close(requests_r)
            os.close(replies_w)
            self.checkpoints.append(_Checkpoint(bound, pid, requests_w, replies_r))
            return
        os.close(requests_w)
        os.close(replies_r)
        _reopen(offsets)
        self._leave_server()
        while True:  # the checkpoint: a worker per question, one at a time
            task = receive(requests_r)
            if task is None:
                os._exit(0)
            offsets = _offsets()
            answer_r, answer_w = os.pipe()
            worker = os.fork()
            if worker == 0:
                os.close(requests_r)
                os.close(replies_w)
                os.close(answer_r)
                _reopen(offsets)
                worker_for(task, self.session, bound, functools.partial(send, answer_w))
                return  # on with the replay, as the worker
            os.close(answer_w)
            written, status = _answer_of(worker, answer_r)
            os.close(answer_r)
            if status is None:  # passed on at once; the worker reaped after
                write_all(replies_w, written)
                _reap(worker)
            else:  # never a question left without an answer
                send(replies_w, {"id": task["id"], "lost": _lost(status)})

    def _leave_server(self) -> None:
        """In a new checkpoint: no part of the server's conversation, its own file offsets."""
        self.serving = False
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for c in self.checkpoints:
            os.close(c.requests)
            os.close(c.replies)
        self.checkpoints = []
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (self.commands, self.out):
            os.dup2(devnull, fd)
        os.close(devnull)

    def _thin(self, bound: int) -> None:
        """One checkpoint dropped, the one whose neighbours are nearest each other (never
        the first, nor one answering), so the gaps stay even; new ones come further apart
        as the trace goes on (``every``: at least bound / CAP)."""
        kept = self.checkpoints
        gaps = [
            (kept[i + 1].bound - kept[i - 1].bound, i)
            for i in range(1, len(kept) - 1)
            if not kept[i].pending
        ]
        if gaps:
            _, i = min(gaps)
            dropped = kept.pop(i)
            os.kill(dropped.pid, signal.SIGKILL)
            os.close(dropped.requests)
            os.close(dropped.replies)
        self.every = max(self.every, bound // CAP)

    # --- questions -----------------------------------------------------------------------

    def _worker_ended(self, ending: dict[str, Any] | None) -> None:
        hooks: Any = self.session.hooks if self.session is not None else None
        if hooks is not None and hooks is not self:
            hooks.ended(ending)
        os._exit(0)

    def _serve(self) -> None:
        while True:
            self._poll(None)

    def _poll(self, timeout: float | None) -> None:
        """Questions passed on, answers passed back; the end of everything once the
        client has gone (the process group: checkpoints and workers too)."""
        by_fd = {c.replies: c for c in self.checkpoints}
        ready, _, _ = select.select([self.commands, *by_fd], [], [], timeout)
        for fd in ready:
            if fd == self.commands:
                task = receive(fd)
                if task is None:
                    _end_of_everything()
                self._ask(task)
            else:
                answer = receive(fd)
                checkpoint = by_fd[fd]
                if answer is None:  # the checkpoint ended: its questions asked elsewhere
                    self.checkpoints.remove(checkpoint)
                    os.close(checkpoint.requests)
                    os.close(checkpoint.replies)
                    for task in checkpoint.pending.values():
                        self._again(task, "the checkpoint answering it ended")
                    continue
                task = checkpoint.pending.pop(answer["id"], None)
                if "lost" in answer and task is not None:
                    self._again(task, answer["lost"])
                    continue
                send(self.out, answer)

    def _ask(self, task: dict[str, Any]) -> None:
        at = task["at"]
        usable = [c for c in self.checkpoints if c.bound < at]
        if not usable:
            if self.forkable:  # the first checkpoint ended: no replay here to risk
                send(self.out, {"id": task["id"], "lost": "no checkpoint before it is left"})
            else:
                self._inline(task)
            return
        checkpoint = max(usable, key=lambda c: c.bound)
        checkpoint.pending[task["id"]] = task
        send(checkpoint.requests, task)

    def _again(self, task: dict[str, Any], why: str) -> None:
        """A question whose worker ended without answering: asked once more, then its loss
        passed on (a policy that ends the process there ends every worker alike)."""
        asked = task.get("asked", 1)
        if asked >= ASKED:
            send(self.out, {"id": task["id"], "lost": why})
            return
        self._ask({**task, "asked": asked + 1})

    def _inline(self, task: dict[str, Any]) -> None:
        """No checkpoint to fork (a policy that cannot be forked): a replay from the start."""
        spec = self.spec
        with self._open(lambda _: None) as opened:
            compare = Compare(**spec["compare"])
            session = Session(opened, compare, self, spec.get("allow_incomplete", False))
            hooks = worker_for(task, session, -1, lambda m: send(self.out, m))
            try:
                session.run()
            except Done:
                return
            except Exception as e:
                hooks.ended(ending_of(e, session.steps))
                return
            hooks.ended(None)


def _answer_of(worker: int, answers: int) -> tuple[bytes, int | None]:
    """What ``worker`` wrote on ``answers``: one whole message (and None), or what it had
    written when it ended, and its wait status. Its end is its pipe's end, or its exit where
    a process it started holds the pipe open."""
    os.set_blocking(answers, False)
    written = bytearray()
    status: int | None = None
    while True:
        ready, _, _ = select.select([answers], [], [], 0.1 if status is None else 0)
        if ready:
            try:
                chunk = os.read(answers, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                break
            written += chunk
            if whole(written):
                return bytes(written), None
        elif status is not None:
            break
        else:
            try:
                pid, got = os.waitpid(worker, os.WNOHANG)
            except ChildProcessError:
                pid, got = worker, 0
            if pid:
                status = got
    return bytes(written), _reap(worker) if status is None else status


def _reap(worker: int) -> int:
    """The worker waited for; its wait status (0 if it was reaped already)."""
    try:
        return os.waitpid(worker, 0)[1]
    except ChildProcessError:
        return 0


def _lost(status: int) -> str:
    """How a worker ended without answering, from its wait status."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the worker answering it was killed ({name})"
    code = os.waitstatus_to_exitcode(status)
    return f"the worker answering it ended (exit status {code}) without an answer"


def _end_of_everything() -> NoReturn:
    """The client has gone: every checkpoint and worker ended and reaped, then this."""
    os.killpg(0, signal.SIGTERM)  # all but the server, which ignores it
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass
    os._exit(0)


def _adopt_orphans() -> None:
    """Workers whose checkpoint was dropped become this process's children (to reap),
    not init's (which, in a container, may never reap them)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def main() -> None:
    spec = orjson.loads(sys.argv[1])
    # The conversation gets private descriptors; what a policy prints goes to stderr.
    commands, out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # checkpoints dropped are reaped
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's end, sent by itself
    _adopt_orphans()
    Server(spec, commands, out).run()
    _end_of_everything()


if __name__ == "__main__":
    main()
