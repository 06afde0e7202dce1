"""decode-first as it was before #58: the oracle the O(log n) policy is held to.

This is the pre-#58 code of schedcli/policies/decode_first.py, _decode_first_reference.py
and the parts of _queues.py they used (DecodeQueue, end_walk, decode_reasons,
chunk_reasons: one copy of those, in oracle_queues.py, serves both oracles), kept unchanged
as a test oracle: it walks the whole rotation and the whole
decode queue every pass, which is what made an overloaded replay quadratic, and its batches,
rejections, cancel and clear returns, reasons and fingerprints are what the new policy
must give exactly (tests/policies/test_decode_first_same_batches.py). Do not "fix" it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from schedcli.model.scheduler import QueueScheduler, Scheduler, check_params
from schedcli.model.task import DECODE, Id, Task, settle_outputs, show_id
from schedcli.policies._decode_first_reference import COMPAT, FIXED, REFERENCE
from schedcli.policies._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_PREFILL_CHUNK_SIZE,
    decodes_leave_room,
)
from schedcli.policies._queues import task_state
from tests.policies.oracle_queues import DecodeQueue, chunk_reasons, decode_reasons, end_walk


class OracleReferenceDecodeFirst(Scheduler):
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
        self.decodes: deque[Task] = deque()
        # A session is in the rotation exactly when it has an entry here, even an
        # entry emptied by cancel: the pass that reaches it retires both together.
        self.chunks: dict[Id, deque[Task]] = {}
        self.rotation: deque[Id] = deque()

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
        decodes = [_entry(t) for t in self.decodes]
        chunks_of = self.chunks
        rotation = [(sid, tuple([_entry(t) for t in chunks_of[sid]])) for sid in self.rotation]
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
        for t in group:
            t.cancelled = False
            self.pending[t.tid] = t
            if t.kind is DECODE:
                self.decodes.append(t)
                continue
            queue = self.chunks.get(t.sid)
            if queue is None:
                queue = self.chunks[t.sid] = deque()
                self.rotation.append(t.sid)
            queue.append(t)
        return None

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
        dropped.extend(t for t in self.decodes if t.sid == sid and self._release(t))
        return dropped

    def _clear(self) -> list[Task]:
        dropped = list(self.pending.values())
        for t in dropped:
            t.cancelled = True
        self.pending.clear()
        self.decodes.clear()
        self.chunks.clear()
        self.rotation.clear()
        return dropped

    def _get_work(self) -> list[Task]:
        taken: list[Task] = []
        decoding: set[Id] = set()
        self._take_decodes(taken, decoding)
        spent = len(taken)
        while spent < self.budget:
            spent, progress = self._prefill_pass(taken, spent, decoding)
            if not progress:
                break
        return taken

    def _take_decodes(self, taken: list[Task], decoding: set[Id]) -> None:
        queue, pending = self.decodes, self.pending
        deferred: list[Task] = []
        while len(taken) < self.decode_cap:
            while queue and queue[0].cancelled:
                queue.popleft()
            if not queue:
                break
            t = queue.popleft()
            if t.sid in decoding:
                deferred.append(t)
                continue
            decoding.add(t.sid)
            taken.append(t)
            pending.pop(t.tid, None)
        queue.extendleft(reversed(deferred))

    def _prefill_pass(self, taken: list[Task], spent: int, decoding: set[Id]) -> tuple[int, bool]:
        rotation, pending = self.rotation, self.pending
        progress = False
        deferred: list[Id] = []
        served: list[Id] = []
        while spent < self.budget and rotation:
            sid = rotation.popleft()
            queue = self.chunks[sid]
            while queue and queue[0].cancelled:
                queue.popleft()
            if not queue:
                del self.chunks[sid]
                continue
            if sid in decoding or queue[0].size > self.budget - spent:
                deferred.append(sid)
                continue
            t = queue.popleft()
            taken.append(t)
            pending.pop(t.tid, None)
            spent += t.size
            progress = True
            if queue:
                served.append(sid)
            else:
                del self.chunks[sid]
        rotation.extendleft(reversed(deferred))
        rotation.extend(served)
        return spent, progress


def _entry(t: Task) -> tuple[object, ...]:
    """A queue entry as the reference decides from it."""
    return (t.tid, t.sid, t.kind, t.size, t.cancelled)


class OracleDecodeFirst(QueueScheduler):
    RULE = """Decodes first, in arrival order, one per session, up to max_decode_sequences.
    Then prefill in passes over a rotation of sessions, one chunk per session per pass,
    within max_batch_tokens. A session passed over (its decode is in the batch, its
    chunk does not fit, or its chunk would be the session's second output in the batch)
    keeps its place at the front; a served one goes to the back. compat=reference drops
    the two fixes (one output per session, release by identity) to match the C++ runner.
    """

    name = "decode-first"
    PARAMS = (MAX_BATCH_TOKENS, MAX_DECODE_SEQUENCES, MAX_PREFILL_CHUNK_SIZE, COMPAT)
    max_batch_tokens: int
    max_decode_sequences: int
    max_prefill_chunk_size: int
    compat: str

    def __init__(
        self,
        max_batch_tokens: int = 544,
        max_decode_sequences: int = 32,
        max_prefill_chunk_size: int = 256,
        compat: str = FIXED,
    ) -> None:
        super().__init__(
            max_batch_tokens=max_batch_tokens,
            max_decode_sequences=max_decode_sequences,
            max_prefill_chunk_size=max_prefill_chunk_size,
            compat=compat,
        )
        b, d, c = max_batch_tokens, max_decode_sequences, max_prefill_chunk_size
        decodes_leave_room(d, b)
        # The floor: a saturated decode batch plus one full chunk must fit. Below it a
        # chunk of max_prefill_chunk_size could be admitted and then never fit in any
        # batch, stranded rather than delayed. It also lets the decode loop spend
        # without checking the budget.
        if c > b - d:
            raise ValueError(
                f"max_prefill_chunk_size ({c}) must be <= max_batch_tokens - "
                f"max_decode_sequences ({b - d}): a full chunk must fit beside a full "
                "decode batch"
            )
        self._decodes = DecodeQueue()
        # A session is in the rotation exactly when it has an entry here, so joining
        # is decided by the entry's creation, not by its queue being empty. An entry
        # emptied by cancel() stays until a pass reaches it: the session keeps its
        # place, and rejoining before then cannot give it a second slot.
        self._chunks: dict[Id, deque[Task]] = {}
        # The rotation is _rotation[_turn:], walked in place (_queues.end_walk).
        self._rotation: list[Id] = []
        self._turn = 0
        # Explaining: the reason a session's front chunk was passed over in this batch,
        # and every queued task's reason after it (by object id).
        self._why: dict[Id, tuple[str, str]] = {}
        if compat == REFERENCE:
            raise ValueError(
                "compat=reference is the reference's own class: build it with "
                "DecodeFirstScheduler.create(..., compat='reference') or build_policy"
            )

    @classmethod
    def create(cls, **params: Any) -> Scheduler:
        """The policy for these parameters: the reference's own bookkeeping, call for call,
        under ``compat=reference``; else this class."""
        if params.get("compat") == REFERENCE:
            check_params(cls.PARAMS, params)  # the same checks as the fixed policy's
            b = params.get("max_batch_tokens", MAX_BATCH_TOKENS.default)
            d = params.get("max_decode_sequences", MAX_DECODE_SEQUENCES.default)
            c = params.get("max_prefill_chunk_size", MAX_PREFILL_CHUNK_SIZE.default)
            cls(b, d, c)  # refuses the same limits
            return OracleReferenceDecodeFirst(b, d, c)
        return cls(**params)

    # --- compat=fixed ---------------------------------------------------------

    def fingerprint(self) -> object | None:
        """Its parameters, the decodes in order, and the rotation from its turn, each
        session with its queued chunks (an entry a cancel emptied included: it holds the
        session's place). The reasons it keeps decide nothing."""
        chunks_of = self._chunks
        rotation = [
            (sid, tuple([task_state(t) for t in chunks_of[sid]]))
            for sid in self._rotation[self._turn :]
        ]
        return (tuple(self.params().values()), self._decodes.state(), tuple(rotation))

    def enqueue(self, task: Task) -> None:
        sid = task.sid
        if task.kind is DECODE:
            self._decodes.push(task)
            return
        chunks = self._chunks.get(sid)
        if chunks is None:
            chunks = self._chunks[sid] = deque()
            self._rotation.append(sid)
        chunks.append(task)

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        decoding: dict[Id, Id] = {}  # sid -> the tid of its decode in this batch
        self._decodes.take(taken, decoding, self.max_decode_sequences)
        spent = len(taken)
        # Sessions with an output-producing chunk in the batch, and that chunk's tid (a
        # decoding session is passed over anyway, so only chunks add to it).
        outputs: dict[Id, Id] = {}
        self._why.clear()
        while spent < self.max_batch_tokens:
            spent, progress = self._prefill_pass(taken, spent, decoding, outputs)
            if not progress:
                break
        if self.explaining:
            passed = dict(self._why)
            self._explain_later(lambda: self._reasons(decoding, spent, passed))
        return taken

    def _reasons(
        self, decoding: dict[Id, Id], spent: int, passed: dict[Id, tuple[str, str]]
    ) -> dict[int, tuple[str, str]]:
        """Why each task still queued was left out (docs/policies.md, decode-first's codes)."""
        why = decode_reasons(self._decodes, decoding, self.max_decode_sequences)
        budget = self.max_batch_tokens
        spent_all = ("budget_spent", f"{spent} of {budget} tokens were spent before its turn")

        def front(sid: Id, t: Task) -> tuple[str, str]:
            return passed.get(sid) or spent_all

        chunk_reasons(why, self._chunks, decoding, front)
        return why

    def _prefill_pass(
        self, taken: list[Task], spent: int, decoding: dict[Id, Id], outputs: dict[Id, Id]
    ) -> tuple[int, bool]:
        budget = self.max_batch_tokens
        rotation = self._rotation
        chunks_of = self._chunks
        progress = False
        # The pass walks the rotation without moving it. A session passed over keeps its
        # place; one served goes to the back, one found empty leaves. Until the first of
        # those, the walked part needs no rewriting (kept is None).
        kept: list[Id] | None = None
        served: list[Id] = []
        # Nothing rejoins the rotation inside this loop: one turn per session per pass.
        start = i = self._turn
        end = len(rotation)
        while spent < budget and i < end:
            sid = rotation[i]
            i += 1
            chunks = chunks_of[sid]
            if not chunks:
                del chunks_of[sid]
                if kept is None:
                    kept = rotation[start : i - 1]
                continue
            if sid in decoding:
                # No chunk beside the session's own decode: two ranges that do not
                # adjoin, both producing output.
                if kept is not None:
                    kept.append(sid)
                continue
            t = chunks[0]
            if t.size > budget - spent:
                # Pass the turn on: a smaller chunk behind this one may still fit.
                if kept is not None:
                    kept.append(sid)
                if self.explaining:
                    self._why[sid] = ("no_room", f"{t.size} tokens, {budget - spent} left")
                continue
            if t.produce_output and sid in outputs:
                # Fix 2: the batch already owes this session an output. Passed over
                # exactly like a chunk that does not fit, so it keeps its place.
                if kept is not None:
                    kept.append(sid)
                if self.explaining:
                    detail = f"chunk {show_id(outputs[sid])} of its session produces output"
                    self._why[sid] = ("second_output", detail)
                continue
            chunks.popleft()
            taken.append(t)
            spent += t.size
            progress = True
            if t.produce_output:
                outputs[sid] = t.tid
            if kept is None:
                kept = rotation[start : i - 1]
            if chunks:
                served.append(sid)
            else:
                del chunks_of[sid]
        if kept is not None:
            # Got-nothing outranks got-something: the passed-over keep the front, in
            # order, ahead of the unwalked rest; the served go to the back.
            rotation.extend(served)
            self._turn = end_walk(rotation, i, kept)
        return spent, progress

    def remove_session(self, sid: Id) -> list[Task]:
        dropped: list[Task] = []
        chunks = self._chunks.get(sid)
        if chunks:
            dropped.extend(chunks)
            chunks.clear()
        dropped.extend(self._decodes.remove_session(sid))
        return dropped

    def reset(self) -> None:
        self._decodes.clear()
        self._chunks.clear()
        self._rotation.clear()
        self._turn = 0
