"""decode-first under ``compat=reference``: the reference's bookkeeping, flaws included.

The reference finds queued tasks by tid and leaves a cancelled decode in its queue
until it surfaces. Both are reproduced here on purpose, so a recording made under the
C++ runner replays batch for batch:

- ``pending`` maps tid -> task and is what "queued" means. Dispatch and release erase
  by tid, so a stale queue entry can release (or a dispatch can forget) a newer task
  that reuses its tid. The replay engine's ledger reports what that breaks.
- Prefill passes never read ``produce_output``: a session may get two outputs.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final

from mypy_extensions import mypyc_attr

from ..model.scheduler import Param, Scheduler, note_group
from ..model.task import DECODE, Id, Task, id_key, settle_outputs, show_id
from ._limits import MAX_BATCH_TOKENS, MAX_DECODE_SEQUENCES, MAX_PREFILL_CHUNK_SIZE
from ._rotation import Decodes, Rotation

FIXED: Final = "fixed"
REFERENCE: Final = "reference"

COMPAT = Param(
    "compat",
    str,
    FIXED,
    "fixed: the reference plus its two fixes; reference: batch for batch as the C++ runner",
    choices=(FIXED, REFERENCE),
)


@mypyc_attr(allow_interpreted_subclasses=True)
class ReferenceDecodeFirst(Scheduler):
    """The reference's state and algorithm behind the five calls of the interface.

    What ``decode-first`` with ``compat=reference`` builds (``DecodeFirstScheduler.create``):
    registered under decode-first's name and parameters, so a recording of it names
    decode-first with ``compat: reference`` and replays as it.
    """

    name = "decode-first"
    PARAMS = (MAX_BATCH_TOKENS, MAX_DECODE_SEQUENCES, MAX_PREFILL_CHUNK_SIZE, COMPAT)
    compat = REFERENCE

    def __init__(self, budget: int, decode_cap: int, chunk_limit: int) -> None:
        self._lock = threading.Lock()
        self.budget = budget
        self.decode_cap = decode_cap
        self.chunk_limit = chunk_limit
        self.pending: dict[Id, Task] = {}
        # The reference's decode deque, stale entries and all (_rotation.Decodes): a decode
        # its cancel marked stays queued until a batch's walk passes it.
        self.decodes = Decodes(keep_stale=True)
        # Its rotation (_rotation.Rotation): a session is in it exactly when it has an
        # entry in chunks, even an entry emptied by cancel: the pass that reaches it retires
        # both together. A chunk queue never holds a task marked cancelled: the reference's
        # cancel empties the session's queue, and its clear every queue.
        self.rotation = Rotation(budget)
        self.chunks = self.rotation.chunks
        # tid -> (group, task) for a pending task submitted in a group of two or more: a
        # snapshot's groups (QueueScheduler's, as note_group keeps it).
        self._grouped: dict[Id, tuple[int, Task]] = {}
        self._groups = 0

    def refusal(self, group: list[Task]) -> str | None:
        for i, t in enumerate(group):
            if t.size == 0:
                return f"task {show_id(t.tid)} has size 0"
            if t.kind is DECODE:
                if t.size != 1:
                    return f"decode {show_id(t.tid)} has size {t.size}; a decode is 1 token"
            elif t.size > self.chunk_limit:
                return (
                    f"prefill chunk of {t.size} tokens exceeds max_prefill_chunk_size "
                    f"{self.chunk_limit}"
                )
            if t.tid in self.pending:
                return f"tid {show_id(t.tid)} is already queued"
            if any(u.tid == t.tid for u in group[:i]):
                return f"tid {show_id(t.tid)} appears twice in the group"
        return None

    @property
    def token_budget(self) -> int | None:
        return self.budget

    @property
    def prefill_chunk_limit(self) -> int | None:
        return self.chunk_limit

    @property
    def one_output_per_session(self) -> bool:
        return False  # the reference's flaw, kept: the engine reports it as a warning

    def params(self) -> dict[str, Any]:
        return {
            "max_batch_tokens": self.budget,
            "max_decode_sequences": self.decode_cap,
            "max_prefill_chunk_size": self.chunk_limit,
            "compat": "reference",
        }

    def fingerprint(self) -> object | None:
        """Its parameters, the tids ``pending`` holds (has_work and every erase read only
        those), and both queues in order, stale entries included, each task with whether
        it is marked cancelled (a stale entry is skipped by that mark)."""
        decodes = [_entry(t) for t in self.decodes.ordered()]
        chunks_of = self.chunks
        rotation = [
            (sid, tuple([_entry(t) for t in chunks_of[sid]])) for sid in self.rotation.order()
        ]
        return (
            (self.budget, self.decode_cap, self.chunk_limit),
            tuple(self.pending),
            tuple(decodes),
            tuple(rotation),
        )

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        with self._lock:
            return self._submit(list(tasks))

    def has_work(self) -> bool:
        with self._lock:
            return bool(self.pending)

    def get_work(self) -> list[Task]:
        with self._lock:
            return self._get_work()

    def cancel(self, sid: Id) -> list[Task]:
        with self._lock:
            return self._cancel(sid)

    def clear(self) -> list[Task]:
        with self._lock:
            return self._clear()

    def _submit(self, group: list[Task]) -> str | None:
        reason = self.refusal(group)
        if reason is not None:
            return reason
        settle_outputs(group)
        if len(group) > 1:
            self._groups += 1
            self._grouped = note_group(self._grouped, self._groups, group, self.pending)
        for t in group:
            marked = t.cancelled
            t.cancelled = False
            self.pending[t.tid] = t
            if t.kind is not DECODE:
                self.rotation.add(t)
                continue
            if marked:
                # A task the reference's cancel returned, submitted again: any stale entry
                # of it in the decode deque is live once more, as the reference reads it.
                self.decodes.settle(t.sid, self.decodes.moved(t.sid))
            self.decodes.push(t)
        return None

    def snapshot(self) -> dict[str, object]:
        """``queued``: the pending tasks (what has_work, clear and a submit's tid check
        see), by group in submit order; ``decodes``: the decode deque in order;
        ``rotation``: the sessions from its head, each with its chunks in order (none: an
        entry a cancel emptied). In both, a pending task is its tid; an entry that is not
        pending is written out whole, with ``cancelled``: true for a decode the cancel
        marked (stale: skipped where a walk meets it), false for a task whose tid another
        task's release erased from pending (it is still dispatched)."""
        from ..model.snapshot import VERSION, grouped, task_fields

        with self._lock:
            pending = self.pending

            def entry(t: Task) -> object:
                if pending.get(t.tid) is t:
                    return t.tid
                whole = task_fields(t)
                whole["cancelled"] = t.cancelled
                return whole

            chunks_of = self.chunks
            return {
                "version": VERSION,
                "policy": self.name,
                "queued": grouped(pending.values(), self._grouped),
                "decodes": [entry(t) for t in self.decodes.ordered()],
                "rotation": [
                    {"sid": sid, "chunks": [entry(t) for t in chunks_of[sid]]}
                    for sid in self.rotation.order()
                ],
            }

    def restore(self, state: Mapping[str, object]) -> None:
        from ..model.snapshot import (
            Placed,
            a_bool,
            a_dict,
            a_list,
            a_task,
            an_id,
            read_state,
            refuse,
        )

        with self._lock:
            if self.pending or self.chunks:
                raise refuse("", "a state is restored into a freshly built policy only")
            groups, fields = read_state(state, self.name, ("decodes", "rotation"))
            pending = self.pending
            for i, group in enumerate(groups):
                reason = self.refusal(group)
                if reason is not None:
                    raise refuse(f"queued[{i}]", reason)
                for t in group:
                    pending[t.tid] = t
                if len(group) > 1:
                    self._groups += 1
                    self._grouped = note_group(self._grouped, self._groups, group, pending)
            placed = Placed(pending.values())

            def entry(v: object, where: str, decode: bool) -> Task:
                if isinstance(v, dict):
                    t, whole = a_task(v, where, ("cancelled",))
                    if "cancelled" not in whole:
                        raise refuse(where, "has no field 'cancelled' (an entry not pending)")
                    t.cancelled = a_bool(whole["cancelled"], f"{where}.cancelled")
                    if t.cancelled and not decode:
                        raise refuse(f"{where}.cancelled", "a chunk queue holds no cancelled task")
                    if not decode and t.size > self.chunk_limit:
                        why = f"a chunk of {t.size} tokens exceeds max_prefill_chunk_size"
                        raise refuse(f"{where}.size", f"{why} {self.chunk_limit}")
                else:
                    t = placed.take(an_id(v, where), where)
                if (t.kind is DECODE) != decode:
                    what = "a decode" if decode else "a prefill chunk"
                    raise refuse(where, f"task {show_id(t.tid)} is not {what}")
                return t

            decodes = [
                entry(v, f"decodes[{i}]", True)
                for i, v in enumerate(a_list(fields["decodes"], "decodes"))
            ]
            rotation: list[tuple[Id, deque[Task]]] = []
            seen: set[tuple[type, Id]] = set()
            for i, v in enumerate(a_list(fields["rotation"], "rotation")):
                where = f"rotation[{i}]"
                fields_of = a_dict(v, where, ("sid", "chunks"))
                sid = an_id(fields_of["sid"], f"{where}.sid")
                if id_key(sid) in seen:
                    raise refuse(f"{where}.sid", f"session {show_id(sid)} is listed twice")
                seen.add(id_key(sid))
                chunks: deque[Task] = deque()
                for j, c in enumerate(a_list(fields_of["chunks"], f"{where}.chunks")):
                    t = entry(c, f"{where}.chunks[{j}]", False)
                    if t.sid != sid or type(t.sid) is not type(sid):
                        why = f"task {show_id(t.tid)} is session {show_id(t.sid)}'s"
                        raise refuse(f"{where}.chunks[{j}]", why)
                    chunks.append(t)
                rotation.append((sid, chunks))
            for t in placed.left.values():
                field = "decodes" if t.kind is DECODE else "rotation"
                raise refuse(field, f"pending task {show_id(t.tid)} is in neither queue")
            for t in decodes:
                self.decodes.push(t)
            self.rotation.restore(rotation)

    def _release(self, t: Task) -> bool:
        """Erase ``t``'s tid from pending; whichever task held it, ``t`` is the one marked."""
        if self.pending.pop(t.tid, None) is None:
            return False
        t.cancelled = True
        return True

    def _cancel(self, sid: Id) -> list[Task]:
        dropped: list[Task] = []
        queue = self.chunks.get(sid)
        if queue is not None:
            dropped.extend(t for t in queue if self._release(t))
            queue.clear()
            self.rotation.emptied(sid)
        # Every decode entry of the session, stale ones too, in the deque's order: those
        # that left its walked list (marked ones turn stale there), then those still in it
        # (a mark there is read where the walk meets it).
        moved = self.decodes.moved(sid)
        dropped.extend(t for _, t in moved if self._release(t))
        dropped.extend(t for t in self.decodes.in_main(sid) if self._release(t))
        if moved:
            self.decodes.settle(sid, moved)
        return dropped

    def _clear(self) -> list[Task]:
        dropped = list(self.pending.values())
        for t in dropped:
            t.cancelled = True
        self.pending.clear()
        self.decodes.clear()
        self.rotation.clear()
        return dropped

    def _get_work(self) -> list[Task]:
        taken: list[Task] = []
        decoding: dict[Id, Id] = {}
        pending = self.pending
        self.decodes.take(taken, decoding, self.decode_cap, pending)
        self.rotation.take(taken, len(taken), self.budget, decoding, None, pending, None)
        return taken


def _entry(t: Task) -> tuple[object, ...]:
    """A queue entry as the reference decides from it."""
    return (t.tid, t.sid, t.kind, t.size, t.cancelled)
