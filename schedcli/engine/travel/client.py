"""The client side of the time machine: starts the server, keeps the index it streams
(per-step tokens, queued and batch size in arrays; the marks), and asks it questions.
Thread-safe: the app asks from workers while a reader thread takes the answers."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
from array import array
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Final

import orjson

from ...model.errors import Said
from .session import Compare
from .wire import receive, said_in, send

END: Final = 1 << 62  # "to the end of the replay", as a step


class ServerGone(Exception):
    """The server died (a crash, or killed): every question after it fails."""


class Unanswered(Exception):
    """A question the server could not answer: the worker answering it ended without an
    answer, twice (killed, or its policy ended the process). Asking again may answer."""


class Travel:
    def __init__(
        self,
        path: str,
        *,
        policy: str | None = None,
        params: Mapping[str, object] | None = None,
        compare: Compare | None = None,
        every: int = 1000,
        allow_incomplete: bool = False,
    ) -> None:
        compare = compare or Compare()
        spec = {
            "path": path,
            "policy": policy,
            "params": dict(params or {}),
            "compare": {**asdict(compare), "against_params": dict(compare.against_params)},
            "every": every,
            "allow_incomplete": allow_incomplete,
        }
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the client)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "schedcli.engine.travel.server", orjson.dumps(spec).decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,  # its checkpoints and workers form one group, ended as one
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._in = self._process.stdin.fileno()
        self._out = self._process.stdout.fileno()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self.hello: dict[str, Any] | None = None
        self.failed: dict[str, Any] | None = None  # the trace or policy refused at the start
        # Per row, in order: a step's number (explicit traces may skip some), its tokens,
        # the tasks queued after it, its batch's size.
        self.numbers = array("q")
        self.tokens = array("q")
        self.queued = array("q")
        self.batch = array("q")
        # By step, in the order found: a mark's text is its words and the options it names
        # (the app words them as flags).
        self.marks: list[tuple[int, str, tuple[Said, ...]]] = []
        self.checkpoints: list[int] = [-1]
        self.position = (0, 0)  # bytes read of the trace, and its size
        self.indexed: dict[str, Any] | None = None  # once the replay has run to its end
        self.gone = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # --- the stream ----------------------------------------------------------------------

    def _read(self) -> None:
        while True:
            try:
                message = receive(self._out)
            except (OSError, ValueError):
                message = None
            with self._changed:
                if message is None:
                    self.gone = True
                elif "id" in message:
                    self._answers[message["id"]] = message
                elif "index" in message:
                    self._extend(message["index"])
                elif "hello" in message:
                    self.hello = message["hello"]
                elif "indexed" in message:
                    self.indexed = message["indexed"]
                elif "failed" in message:
                    self.failed = message["failed"]
                self._changed.notify_all()
            if message is None:
                return

    def _extend(self, body: dict[str, Any]) -> None:
        for step, tokens, queued, batch in body["rows"]:
            self.numbers.append(step)
            self.tokens.append(tokens)
            self.queued.append(queued)
            self.batch.append(batch)
        self.marks.extend((m[0], m[1], said_in(m[2])) for m in body["marks"])
        self.checkpoints = body["checkpoints"] or [-1]
        self.position = (body["pos"], body["size"])

    @property
    def steps(self) -> int:
        """Rows indexed so far (a step each)."""
        return len(self.numbers)

    def row_of(self, step: int) -> int:
        """The row of step ``step``, or of the first step after it."""
        return bisect_left(self.numbers, step)

    def wait(self, what: str, timeout: float | None = None) -> bool:
        """Until the server said hello (or failed), or ("indexed") ran to the end."""

        def ready() -> bool:
            if self.gone or self.failed is not None:
                return True
            return self.hello is not None if what == "hello" else self.indexed is not None

        with self._changed:
            return self._changed.wait_for(ready, timeout)

    def messages(self) -> str:
        """What the server wrote to stderr (the policy's notes, warnings)."""
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    # --- questions -----------------------------------------------------------------------

    def ask(self, task: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """The server's answer to ``task``. The wait ends: the server answers every
        question, or says it is lost (``Unanswered``), or ends (``ServerGone``)."""
        n = next(self._ids)
        with self._lock:
            if self.gone:
                raise ServerGone(self.messages())
            send(self._in, {**task, "id": n})
        with self._changed:
            if not self._changed.wait_for(lambda: n in self._answers or self.gone, timeout):
                raise TimeoutError(f"no answer to {task['op']} in {timeout} s")
            if n not in self._answers:
                raise ServerGone(self.messages())
            answer = self._answers.pop(n)
        if "lost" in answer:
            raise Unanswered(f"no answer about step {task['at']}: {answer['lost']}")
        return answer

    def view(self, step: int) -> dict[str, Any]:
        """Step ``step`` on every side; ``{"ended": ...}`` if the replay has no such step."""
        answer = self.ask({"op": "view", "step": step, "at": step})
        return answer.get("view") or {"ended": answer.get("ended")}

    def segments(self, start: int, forward: bool) -> list[tuple[int, int]]:
        """[a, b] ranges that each start right after a checkpoint, from ``start`` on in
        the direction asked (backward: the last range first)."""
        bounds = sorted(set(self.checkpoints) | {-1})
        if forward:
            i = bisect_left(bounds, start)  # bounds[i - 1] < start
            edges = [b for b in bounds[i:]]
            ranges, a = [], start
            for b in edges:
                ranges.append((a, b))
                a = b + 1
            ranges.append((a, END))
            return ranges
        ranges, b = [], start
        for bound in reversed(bounds):
            if bound < b:
                ranges.append((bound + 1, b))
                b = bound
        return ranges

    def scan(
        self,
        conds: list[dict[str, Any]],
        start: int,
        forward: bool,
        stop: threading.Event | None = None,
        limit: int | None = None,
    ) -> dict[str, Any] | None:
        """The first step from ``start`` on (or the last up to it) where one of ``conds``
        holds on the replay, not past ``limit`` (exclusive); None if none does (or
        ``stop`` was set)."""
        for a, b in self.segments(start, forward):
            if stop is not None and stop.is_set():
                return None
            if limit is not None:
                if (a >= limit) if forward else (b <= limit):
                    return None
                a, b = (a, min(b, limit - 1)) if forward else (max(a, limit + 1), b)
            task = {"op": "scan", "from": a, "to": b, "at": a, "conds": conds}
            answer = self.ask({**task, "want": "first" if forward else "last"})
            if answer.get("found") is not None:
                return dict(answer["found"])
            if "ended" in answer and forward:
                return None
        return None

    def life(
        self, key: dict[str, Any], start: int, stop: threading.Event | None = None
    ) -> list[list[Any]]:
        """Every event of a task ({"tid": x}) or session ({"sid": x}) from ``start`` to the
        end of the replay."""
        events: list[list[Any]] = []
        for a, b in self.segments(start, True):
            if stop is not None and stop.is_set():
                break
            answer = self.ask({"op": "life", "from": a, "to": b, "at": a, "key": key})
            events.extend(answer.get("life") or [])
            if "ended" in answer:
                break
        return events

    def close(self) -> None:
        """The server told to end (its stdin closed): it ends its checkpoints and workers
        and reaps them; killed, with its whole group, if it has not within 5 s."""
        process = self._process
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self._reader.join(timeout=1)
        self._stderr.close()

    def __enter__(self) -> Travel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
