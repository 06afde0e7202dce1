"""sjf: decodes first, then the prefill of the session with the shortest remaining prompt."""

from __future__ import annotations

from collections import deque

from mypy_extensions import mypyc_attr

from ..model.scheduler import QueueScheduler
from ..model.task import DECODE, Id, Task, show_id
from ._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_PREFILL_CHUNK_SIZE,
    chunk_fits_budget,
    decodes_leave_room,
)
from ._queues import DecodeQueue, chunk_reasons, decode_reasons, task_state


@mypyc_attr(allow_interpreted_subclasses=True)
class SjfScheduler(QueueScheduler):
    RULE = """Decodes first, in arrival order, one per session, up to max_decode_sequences.
    Then prefill in passes: each pass orders the sessions with queued chunks by their
    queued prefill tokens (shortest remaining prompt first, ties by arrival) and gives
    each at most one chunk, within max_batch_tokens. Passes repeat while one took
    something.
    """

    name = "sjf"
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
        decodes_leave_room(max_decode_sequences, max_batch_tokens)
        chunk_fits_budget(max_prefill_chunk_size, max_batch_tokens)
        self._decodes = DecodeQueue()
        # Insertion order is arrival order: the tie-break. A drained session leaves,
        # and comes back as a new arrival.
        self._chunks: dict[Id, deque[Task]] = {}
        self._remaining: dict[Id, int] = {}

    def fingerprint(self) -> object | None:
        """Its parameters, the decodes in order, and each session's chunks in arrival order
        (the tie-break); the remaining tokens are their sum."""
        sessions = [
            (sid, tuple([task_state(t) for t in chunks])) for sid, chunks in self._chunks.items()
        ]
        return (tuple(self.params().values()), self._decodes.state(), tuple(sessions))

    def enqueue(self, task: Task) -> None:
        sid = task.sid
        if task.kind is DECODE:
            self._decodes.push(task)
            return
        chunks = self._chunks.get(sid)
        if chunks is None:
            chunks = self._chunks[sid] = deque()
            self._remaining[sid] = 0
        chunks.append(task)
        self._remaining[sid] += task.size

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        decoding: dict[Id, Id] = {}
        self._decodes.take(taken, decoding, self.max_decode_sequences)
        spent = len(taken)
        owing: dict[Id, Id] = {}  # sid -> its output chunk's tid in this batch
        budget = self.max_batch_tokens
        chunks_of, remaining = self._chunks, self._remaining
        no_room: dict[Id, int] = {}  # sid -> tokens left when its chunk did not fit
        progress = True
        while progress and spent < budget and chunks_of:
            progress = False
            order = sorted(enumerate(chunks_of), key=lambda item: (remaining[item[1]], item[0]))
            for _, sid in order:
                if spent >= budget:
                    break
                if sid in decoding or sid in owing:
                    continue
                chunks = chunks_of[sid]
                t = chunks[0]
                if t.size > budget - spent:
                    no_room[sid] = budget - spent
                    continue
                chunks.popleft()
                taken.append(t)
                spent += t.size
                progress = True
                no_room.pop(sid, None)
                if t.produce_output:
                    owing[sid] = t.tid
                if chunks:
                    remaining[sid] -= t.size
                else:
                    del chunks_of[sid]
                    del remaining[sid]
        if self.explaining:
            self._explain_later(lambda: self._reasons(decoding, owing, no_room, spent))
        return taken

    def _reasons(
        self, decoding: dict[Id, Id], owing: dict[Id, Id], no_room: dict[Id, int], spent: int
    ) -> dict[int, tuple[str, str]]:
        """Why each task still queued was left out (docs/policies.md, sjf's codes)."""
        why = decode_reasons(self._decodes, decoding, self.max_decode_sequences)

        def front(sid: Id, t: Task) -> tuple[str, str]:
            if sid in owing:
                return (
                    "after_output",
                    f"chunk {show_id(owing[sid])} of its session produces output",
                )
            if sid in no_room:
                return ("no_room", f"{t.size} tokens, {no_room[sid]} left")
            budget = self.max_batch_tokens
            return ("budget_spent", f"{spent} of {budget} tokens were spent before its turn")

        chunk_reasons(why, self._chunks, decoding, front)
        return why

    def remove_session(self, sid: Id) -> list[Task]:
        chunks = self._chunks.pop(sid, None)
        self._remaining.pop(sid, None)
        dropped = list(chunks) if chunks else []
        dropped.extend(self._decodes.remove_session(sid))
        return dropped

    def reset(self) -> None:
        self._decodes.clear()
        self._chunks.clear()
        self._remaining.clear()
