"""decode-first: ExecuTorch's batching policy (decode_first_scheduler.h), ported."""

from __future__ import annotations

from collections import deque

from ..scheduler import QueueScheduler
from ..task import DECODE, Id, Task
from ._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_PREFILL_CHUNK_SIZE,
    decodes_leave_room,
)
from ._queues import DecodeQueue


class DecodeFirstScheduler(QueueScheduler):
    """Decodes first, in arrival order, one per session, up to max_decode_sequences.
    Then prefill in passes over a rotation of sessions, one chunk per session per pass,
    within max_batch_tokens. A session passed over (its decode is in the batch, or its
    chunk does not fit) keeps its place at the front; a served one goes to the back.
    """

    name = "decode-first"
    PARAMS = (MAX_BATCH_TOKENS, MAX_DECODE_SEQUENCES, MAX_PREFILL_CHUNK_SIZE)
    max_batch_tokens: int
    max_decode_sequences: int
    max_prefill_chunk_size: int

    def __init__(
        self,
        max_batch_tokens: int = 544,
        max_decode_sequences: int = 32,
        max_prefill_chunk_size: int = 256,
    ) -> None:
        super().__init__(
            max_batch_tokens=max_batch_tokens,
            max_decode_sequences=max_decode_sequences,
            max_prefill_chunk_size=max_prefill_chunk_size,
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
        self._rotation: deque[Id] = deque()

    def _enqueue(self, task: Task) -> None:
        sid = task.sid
        if task.kind is DECODE:
            self._decodes.push(task)
            return
        chunks = self._chunks.get(sid)
        if chunks is None:
            chunks = self._chunks[sid] = deque()
            self._rotation.append(sid)
        chunks.append(task)

    def _take(self) -> list[Task]:
        taken: list[Task] = []
        decoding: set[Id] = set()
        self._decodes.take(taken, decoding, self.max_decode_sequences)
        spent = len(taken)
        owing: set[Id] = set()
        while spent < self.max_batch_tokens:
            spent, progress = self._prefill_pass(taken, spent, decoding, owing)
            if not progress:
                break
        return taken

    def _prefill_pass(
        self, taken: list[Task], spent: int, decoding: set[Id], owing: set[Id]
    ) -> tuple[int, bool]:
        budget = self.max_batch_tokens
        rotation = self._rotation
        chunks_of = self._chunks
        progress = False
        deferred: list[Id] = []
        served: list[Id] = []
        # Nothing rejoins the rotation inside this loop: one turn per session per pass.
        while spent < budget and rotation:
            sid = rotation.popleft()
            chunks = chunks_of[sid]
            if not chunks:
                del chunks_of[sid]
                continue
            if sid in decoding:
                # No chunk beside the session's own decode: two ranges that do not
                # adjoin, both producing output.
                deferred.append(sid)
                continue
            if sid in owing:
                # Its prompt's last chunk is already in this batch; the next prompt
                # waits so the batch owes the session one output, not two.
                served.append(sid)
                continue
            t = chunks[0]
            if t.size > budget - spent:
                # Pass the turn on: a smaller chunk behind this one may still fit.
                deferred.append(sid)
                continue
            chunks.popleft()
            taken.append(t)
            spent += t.size
            progress = True
            if t.produce_output:
                owing.add(sid)
            if chunks:
                served.append(sid)
            else:
                del chunks_of[sid]
        # Got-nothing outranks got-something: the deferred were popped before whatever
        # remains, so restoring them at the head keeps arrival order.
        rotation.extendleft(reversed(deferred))
        rotation.extend(served)
        return spent, progress

    def _remove_session(self, sid: Id) -> list[Task]:
        dropped: list[Task] = []
        chunks = self._chunks.get(sid)
        if chunks:
            dropped.extend(chunks)
            chunks.clear()
        dropped.extend(self._decodes.remove_session(sid))
        return dropped

    def _reset(self) -> None:
        self._decodes.clear()
        self._chunks.clear()
        self._rotation.clear()
