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
from ._queues import FitIndex, chunk_reasons, decode_reasons, task_state
from ._rotation import Decodes


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
        self._decodes = Decodes()
        # Insertion order is arrival order: the tie-break. A drained session leaves,
        # and comes back as a new arrival.
        self._chunks: dict[Id, deque[Task]] = {}
        self._remaining: dict[Id, int] = {}
        # Each session's place in that order, and (between batches) its turn: key
        # (remaining, place), size its front chunk's. A pass serves first(room left).
        self._joined: dict[Id, int] = {}
        self._joins = 0
        self._turns = FitIndex(max_prefill_chunk_size)

    def fingerprint(self) -> object | None:
        """Its parameters, the decodes in order, and each session's chunks in arrival order
        (the tie-break); the remaining tokens are their sum."""
        sessions = [
            (sid, tuple([task_state(t) for t in chunks])) for sid, chunks in self._chunks.items()
        ]
        decodes = tuple([task_state(t) for t in self._decodes.ordered()])
        return (tuple(self.params().values()), decodes, tuple(sessions))

    STATE_FIELDS = ("sessions",)

    def snapshot_queues(self) -> dict[str, object]:
        """``sessions``: the sessions with prefill queued, in the order they arrived (the
        tie-break). The decodes and each session's chunks are in submit order."""
        return {"sessions": list(self._chunks)}

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        from ..model.snapshot import refuse, sessions

        order = sessions(fields["sessions"], "sessions")
        chunks_of: dict[Id, deque[Task]] = {sid: deque() for sid in order}
        for t in queued:
            if t.kind is DECODE:
                self._decodes.push(t)
                continue
            chunks = chunks_of.get(t.sid)
            if chunks is None:
                why = f"session {show_id(t.sid)} has prefill queued (task {show_id(t.tid)})"
                raise refuse("sessions", why + " but is not listed")
            chunks.append(t)
        for i, sid in enumerate(order):
            chunks = chunks_of[sid]
            if not chunks:
                raise refuse(f"sessions[{i}]", f"session {show_id(sid)} has no prefill queued")
            self._chunks[sid] = chunks
            self._remaining[sid] = sum([t.size for t in chunks])
            self._joined[sid] = i
            self._turn(sid)
        self._joins = len(order)

    def enqueue(self, task: Task) -> None:
        sid = task.sid
        if task.kind is DECODE:
            self._decodes.push(task)
            return
        chunks = self._chunks.get(sid)
        if chunks is None:
            chunks = self._chunks[sid] = deque()
            self._remaining[sid] = 0
            self._joined[sid] = self._joins
            self._joins += 1
        chunks.append(task)
        self._remaining[sid] += task.size
        self._turn(sid)

    def _turn(self, sid: Id) -> None:
        """``sid``'s turn from its remaining tokens and its front chunk, as a pass orders it."""
        key = (self._remaining[sid] << 64) | self._joined[sid]
        self._turns.put(sid, key, self._chunks[sid][0].size)

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        decoding: dict[Id, Id] = {}
        self._decodes.take(taken, decoding, self.max_decode_sequences, None)
        if self.explaining:
            return self._take_walking(taken, decoding)
        spent = len(taken)
        budget = self.max_batch_tokens
        chunks_of, remaining, turns = self._chunks, self._remaining, self._turns
        # Sessions out of this batch's passes (decoding, or owed an output): out of turns
        # until it ends.
        aside = [sid for sid in decoding if sid in chunks_of]
        for sid in aside:
            turns.drop(sid)
        # A pass walks the sessions in turn order and serves each whose chunk fits the room
        # left: the next it serves is first(room), as every session before it that is still
        # in turns did not fit and would not fit later (the room only shrinks). One served
        # waits out of turns until the pass ends, so the pass meets it once.
        while spent < budget:
            served: list[Id] = []
            progress = False
            while spent < budget:
                entry = turns.first(budget - spent)
                if entry is None:
                    break
                sid = entry[1]
                turns.drop(sid)
                chunks = chunks_of[sid]
                t = chunks.popleft()
                taken.append(t)
                spent += t.size
                progress = True
                if chunks:
                    remaining[sid] -= t.size
                    (aside if t.produce_output else served).append(sid)
                else:
                    del chunks_of[sid]
                    del remaining[sid]
                    del self._joined[sid]
            for sid in served:
                self._turn(sid)
            if not progress:
                break
        for sid in aside:
            if sid in chunks_of:
                self._turn(sid)
        return taken

    def _take_walking(self, taken: list[Task], decoding: dict[Id, Id]) -> list[Task]:
        """take_batch's prefill passes walking every session in order (a sort of them all),
        to say why each task was left: the same batch, at O(sessions) a pass, as
        explaining costs anyway."""
        spent = len(taken)
        owing: dict[Id, Id] = {}  # sid -> its output chunk's tid in this batch
        budget = self.max_batch_tokens
        chunks_of, remaining = self._chunks, self._remaining
        no_room: dict[Id, int] = {}  # sid -> tokens left when its chunk did not fit
        served: list[Id] = []
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
                served.append(sid)
                no_room.pop(sid, None)
                if t.produce_output:
                    owing[sid] = t.tid
                if chunks:
                    remaining[sid] -= t.size
                else:
                    del chunks_of[sid]
                    del remaining[sid]
        for sid in served:
            if sid in chunks_of:
                self._turn(sid)
            elif sid in self._joined:
                del self._joined[sid]
                self._turns.drop(sid)
        self._explain_later(lambda: self._reasons(decoding, owing, no_room, spent))
        return taken

    def _reasons(
        self, decoding: dict[Id, Id], owing: dict[Id, Id], no_room: dict[Id, int], spent: int
    ) -> dict[int, tuple[str, str]]:
        """Why each task still queued was left out (docs/policies.md, sjf's codes)."""
        why = decode_reasons(self._decodes.ordered(), decoding, self.max_decode_sequences)

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
        dropped: list[Task] = []
        if chunks is not None:
            del self._remaining[sid]
            del self._joined[sid]
            self._turns.drop(sid)
            dropped.extend(chunks)
        dropped.extend(self._decodes.remove_session(sid))
        return dropped

    def reset(self) -> None:
        self._decodes.clear()
        self._chunks.clear()
        self._remaining.clear()
        self._joined.clear()
        self._turns.clear()
