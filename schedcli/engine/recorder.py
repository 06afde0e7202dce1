"""Recording a live scheduler: every call, with the batch it returned, as a replayable trace.

``RecordingScheduler`` wraps any ``Scheduler`` and is one itself. Calls are recorded in
the order the inner scheduler saw them (the recorder holds its lock across the call and
the write), so a recording made under concurrent producers replays exactly.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import orjson
from mypy_extensions import mypyc_attr

from ..catalog.registry import policy_reference
from ..formats.writer import LineBuffer, TraceWriter, task_record
from ..model.limits import INT_MAX, INT_MIN
from ..model.records import Left, Record
from ..model.scheduler import Scheduler, own_subclass_cache
from ..model.task import DECODE, Id, Task
from ..streams.output import atomic_output
from .flight import Window

# The gathered lines of recordings not yet closed, written at exit even when their owner
# never closes them: what a plain file's own buffer would do for it.
_unclosed: dict[int, LineBuffer] = {}


def _write_unclosed() -> None:
    for gathered in list(_unclosed.values()):
        with contextlib.suppress(Exception):  # a stream already closed: nothing to save
            gathered.flush()


atexit.register(_write_unclosed)


@mypyc_attr(allow_interpreted_subclasses=True)
class RecordingScheduler(Scheduler):
    """``inner``, recorded to ``target`` (a path, ``.gz`` compressed, or a binary stream).

    ``clock=True`` adds ``t``, monotonic seconds since the recorder started. With
    ``ring=N`` nothing is written as it happens: the last N calls are kept in memory and
    ``dump(path)`` writes them as a trace that replays on its own; an exception escaping
    the inner scheduler dumps them next to ``target`` first (``TARGET.crash-K.jsonl``).
    """

    def __init__(
        self,
        inner: Scheduler,
        target: str | Path | IO[bytes] | None = None,
        *,
        clock: bool = False,
        ring: int | None = None,
    ) -> None:
        if ring is None and target is None:
            raise ValueError("a recording needs a target path or stream (or ring=N)")
        if ring is not None and ring < 1:
            raise ValueError(f"ring must be >= 1, not {ring}")
        self.inner = inner
        # Every call reaches inner under this lock, so inner's own is only a cost.
        self._lock = threading.Lock()
        # Bound once: compiled, a call through them skips the method lookup.
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        inner.promise_serial_calls()
        self._start = time.monotonic()
        self._clock = clock
        self._stack = contextlib.ExitStack()
        self._target = target
        self._crashes = itertools.count(1)
        self._tails: dict[int, str] = {}
        self._writer: TraceWriter | None = None
        self._window: Window | None = Window(ring) if ring is not None else None
        if ring is None:
            self._writer = TraceWriter(self._open(target))
            self._writer.header(*self._header())

    # --- the five calls, recorded ----------------------------------------------------

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = tasks if isinstance(tasks, list) else list(tasks)
        unwritable = _unrecordable(group)
        if unwritable is not None:
            return unwritable  # refused before the inner scheduler sees it: no trace of it
        self._acquire()  # not ``with``: compiled, about 0.1 µs less a call
        try:
            try:
                reason = self.inner.try_submit(group)
            except Exception as e:
                self._crashed({"op": "submit", "tasks": [_task_record(t) for t in group]}, e)
                raise
            # Outputs as settled by the inner scheduler, so the replay sees what it saw.
            writer, window = self._writer, self._window
            if reason is None and len(group) == 1:
                # The common one-task submit: its line, written, or kept by the ring as is.
                line = None if self._clock else _inline_line(group[0], self._tails)
                if line is not None and writer is not None:
                    writer.event.write_line(line)
                    return None
                if line is not None and window is not None:
                    window.add_line(line, group[0].tid)
                    return None
                if writer is not None:
                    inline = _inline_submit(group[0], self._now() if self._clock else None)
                    if inline is not None:
                        writer.event.write(inline)
                        return None
            records = [_task_record(t) for t in group]
            event: Record = {"op": "submit", "tasks": records}
            if self._clock:
                event = {"op": "submit", "t": self._now(), "tasks": records}
            if reason is not None:
                event["meta"] = {"rejected": reason}
            if writer is not None:
                writer.event.write(event)
            else:
                self._emit(event, accepted=records if reason is None else None)
            return reason
        finally:
            self._release()

    def has_work(self) -> bool:
        with self._lock:
            return self.inner.has_work()

    def get_work(self) -> list[Task]:
        self._acquire()
        try:
            try:
                batch = self.inner.get_work()
            except Exception as e:
                self._crashed({"op": "get_work"}, e)
                raise
            expect = [t.tid for t in batch]
            if self._clock:
                event: Record = {"op": "get_work", "t": self._now(), "expect": expect}
            else:
                event = {"op": "get_work", "expect": expect}
            if self._writer is not None:
                self._writer.event.write(event)
            else:
                self._emit(event, removed=expect)
            return batch
        finally:
            self._release()

    def cancel(self, sid: Id) -> list[Task]:
        with self._lock:
            dropped: list[Task] = self._call({"op": "cancel", "sid": sid}, self.inner.cancel, sid)
            event: Record = {"op": "cancel"}
            self._stamp(event)
            event["sid"] = sid
            self._emit(event, removed=[t.tid for t in dropped])
            return dropped

    def clear(self) -> list[Task]:
        with self._lock:
            dropped: list[Task] = self._call({"op": "clear"}, self.inner.clear)
            event: Record = {"op": "clear"}
            self._stamp(event)
            self._emit(event, removed=[t.tid for t in dropped])
            return dropped

    @property
    def token_budget(self) -> int | None:
        return self.inner.token_budget

    @property
    def one_output_per_session(self) -> bool:
        return self.inner.one_output_per_session

    @property
    def prefill_chunk_limit(self) -> int | None:
        return self.inner.prefill_chunk_limit

    @property
    def explaining(self) -> bool:
        return self.inner.explaining

    @explaining.setter
    def explaining(self, on: bool) -> None:
        self.inner.explaining = on

    def left_behind(self) -> Left:
        with self._lock:
            return self.inner.left_behind()

    def params(self) -> dict[str, Any]:
        return self.inner.params()

    # --- the file --------------------------------------------------------------------

    def flush(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.out.flush()

    def close(self) -> None:
        with self._lock:
            self._writer = None
            self._stack.close()

    def __enter__(self) -> RecordingScheduler:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def dump(self, path: str | Path) -> None:
        """Ring mode: the last calls as a trace of their own, written atomically."""
        with self._lock:
            self._dump(str(path))

    # --- inside ----------------------------------------------------------------------

    def _open(self, target: str | Path | IO[bytes] | None) -> IO[bytes] | LineBuffer:
        """A file of our own is written through a LineBuffer (flushed before it closes); a
        caller's stream is written line by line, as the caller may read it as it comes."""
        if isinstance(target, str | Path):
            gathered = LineBuffer(self._stack.enter_context(_output(str(target))))
            _unclosed[id(gathered)] = gathered
            self._stack.callback(_unclosed.pop, id(gathered), None)
            self._stack.callback(gathered.flush)
            return gathered
        assert target is not None
        return target

    def _header(self) -> tuple[str | None, dict[str, Any] | None, Any]:
        inner = self.inner
        cls: Any = type(inner)  # any class: mypyc would read its attributes as a policy's
        meta: dict[str, Any] = {"recorded_by": "schedcli.record.RecordingScheduler"}
        policy = policy_reference(cls)  # what a replay resolves to this class
        if inner.PARAMS:
            return policy, inner.params(), meta
        meta["class"] = f"{cls.__module__}:{cls.__qualname__}"
        return policy, None, meta

    def _now(self) -> float:
        return round(time.monotonic() - self._start, 9)

    def _stamp(self, event: Record) -> None:
        if self._clock:
            event["t"] = self._now()

    def _call(self, event: Record, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as e:
            self._crashed(event, e)
            raise

    def _crashed(self, call: Record, e: Exception) -> None:
        """An exception escapes the inner scheduler: the call that raised is recorded, with
        the exception's text in its ``meta.raised``, so a replay makes the same call. In
        ring mode the window is dumped next to the target, ending in that call and a
        partial marker, and the path is said on stderr."""
        raised = f"{type(e).__name__}: {e}"
        self._stamp(call)
        call["meta"] = {"raised": raised}
        if self._writer is not None:
            self._writer.event.write(call)
            return
        if self._window is None or self._target is None:
            return
        path = f"{self._crash_base()}.crash-{next(self._crashes)}.jsonl"
        self._dump(path, call, f"the scheduler raised in {call['op']}: {raised}")
        print(
            f"schedcli: the scheduler raised in {call['op']} ({raised}); the last "
            f"{self._window.count} calls are in {path}",
            file=sys.stderr,
        )

    def _crash_base(self) -> str:
        target = self._target
        return str(target) if isinstance(target, str | Path) else "schedcli-recording"

    def _emit(
        self,
        event: Record,
        *,
        accepted: list[Record] | None = None,
        removed: list[Id] | None = None,
    ) -> None:
        if self._writer is not None:
            self._writer.event.write(event)
        else:
            assert self._window is not None
            self._window.add(event, accepted, removed or [])

    def _dump(self, path: str, raising: Record | None = None, why: str = "") -> None:
        """The window as a trace; after a crash, ending in the call that raised and a
        partial marker that says why."""
        assert self._window is not None, "dump() is for a recorder made with ring=N"
        with atomic_output(path) as out:
            writer = TraceWriter(out)
            policy, params, meta = self._header()
            writer.header(policy, params, {**meta, "flight_recorder": self._window.size})
            for event in self._window.replayable():
                writer.event(event)
            if raising is not None:
                writer.event(raising)
                writer.partial(why)


def _unrecordable(group: list[Task]) -> str | None:
    """Why a task of ``group`` cannot be written to a trace (an id that is neither a
    UTF-8 string nor a 64-bit integer, a bool among them; a size past 64 bits; a prepared
    input a trace could not read back; a meta that is not JSON), or None."""
    for t in group:
        for name, value in (("tid", t.tid), ("sid", t.sid)):
            if type(value) is int and INT_MIN <= value <= INT_MAX:
                continue
            if type(value) is not str or not _utf8(value):
                return (
                    f"task {name} {value!r} cannot be recorded: a trace's ids are UTF-8 "
                    "strings or 64-bit integers"
                )
        if t.size > INT_MAX:
            return f"task size {t.size} cannot be recorded: a trace's sizes fit in 64 bits"
        if t.prepared is not None and not _prepared_ok(t):
            return (
                f"task {t.tid!r}'s prepared {t.prepared!r} cannot be recorded: a trace's is "
                "(backing size, offset), 64-bit integers, the slice inside it, and no tokens"
            )
        if t.meta is not None:
            try:
                orjson.dumps(t.meta)
            except TypeError as e:
                return f"task {t.tid!r}'s meta cannot be recorded: {e}"
    return None


def _prepared_ok(t: Task) -> bool:
    """The task's ``prepared`` is what a trace reads back (docs/trace-format.md)."""
    p: Any = t.prepared
    if type(p) is not tuple or len(p) != 2 or t.tokens is not None:
        return False
    backing, offset = p
    if type(backing) is not int or type(offset) is not int:
        return False
    return 1 <= backing <= INT_MAX and offset >= 0 and offset + t.size <= backing


def _utf8(s: str) -> bool:
    if s.isascii():
        return True
    try:
        s.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _common(t: Task) -> bool:
    """The common task: no position, prepared input, priority or meta, its output settled."""
    return (
        t.position is None
        and t.prepared is None
        and t.meta is None
        and not t.priority
        and t.produce_output is not None
    )


def _inline_submit(t: Task, at: float | None) -> Record | None:
    """An accepted submit of one ``_common`` task as one line, the task's fields inline, as
    trace v1 allows: one dict to build and write instead of three. ``produce_output`` is
    written only when False: a group of one produces output by default
    (docs/trace-format.md). None for any other task."""
    if not _common(t):
        return None
    event: Record = (
        {"op": "submit", "tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size}
        if at is None
        else {"op": "submit", "t": at, "tid": t.tid, "sid": t.sid, "kind": t.kind, "size": t.size}
    )  # kind: a str enum, written as its value
    if not t.produce_output:
        event["produce_output"] = False
    return event


# Ids and sizes whose decimal digits are their JSON, well inside what orjson writes.
_SMALL: Final = 1 << 53


# Tails of one-token decode lines kept per session (``_inline_line``), up to this many.
_TAILS: Final = 4096


def _inline_line(t: Task, tails: dict[int, str]) -> bytes | None:
    """``_inline_submit``'s line, byte for byte, for a task whose ids and size are small
    ints and which produces output, written without a dict or orjson (the common call;
    recording costs 38% fewer instructions so); None for any other task. A one-token
    decode's line ends in its session's tail, kept in ``tails`` (the recorder's own)."""
    tid, sid, size = t.tid, t.sid, t.size
    if (
        type(tid) is not int
        or type(sid) is not int
        or not (-_SMALL < tid < _SMALL and -_SMALL < sid < _SMALL and size < _SMALL)
        or t.produce_output is not True
        or not _common(t)
    ):
        return None
    if size != 1 or t.kind is not DECODE:
        kind = "decode" if t.kind is DECODE else "prefill"
        return f'{{"op":"submit","tid":{tid},"sid":{sid},"kind":"{kind}","size":{size}}}\n'.encode()
    tail = tails.get(sid)
    if tail is None:
        if len(tails) >= _TAILS:
            tails.clear()
        tail = tails[sid] = f',"sid":{sid},"kind":"decode","size":1}}\n'
    return f'{{"op":"submit","tid":{tid}{tail}'.encode()


def _task_record(t: Task) -> Record:
    """``task_record(t, outputs=True)``, inlined for the common task (no position or meta)."""
    if _common(t):
        return {
            "tid": t.tid,
            "sid": t.sid,
            "kind": t.kind,  # a str enum: written as its value
            "size": t.size,
            "produce_output": t.produce_output,
        }
    return task_record(t, outputs=True)


@contextlib.contextmanager
def _output(path: str) -> Iterator[IO[bytes]]:
    """The recording's file: written as calls happen (``.gz`` compressed by name)."""
    from ..streams.output import output_stream

    with output_stream(path) as out:
        yield out


own_subclass_cache(RecordingScheduler)
