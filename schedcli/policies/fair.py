"""fair: virtual token counters per session (VTC, Sheng et al., OSDI 2024)."""

from __future__ import annotations

import heapq
import struct
from collections import deque
from typing import Final

from mypy_extensions import mypyc_attr

from ..model.scheduler import Param, QueueScheduler
from ..model.task import DECODE, Id, Task, show_id
from ._limits import MAX_BATCH_TOKENS, MAX_NUM_SEQS, MAX_PREFILL_CHUNK_SIZE, chunk_fits_budget
from ._queues import BatchSessions, FitIndex, seq_cap_text, task_state


@mypyc_attr(allow_interpreted_subclasses=True)
class FairScheduler(QueueScheduler):
    RULE = """Each session has a virtual token counter. A batch is filled by repeatedly serving
    the backlogged session with the lowest counter (ties by arrival): its oldest task,
    if the session rule and the budget allow, else the session sits this batch out.
    Serving charges prefill tokens x prefill_weight and decode tokens x decode_weight.
    A session that becomes backlogged again is lifted to the lowest counter among the
    backlogged sessions, so idle time earns no credit.
    """

    name = "fair"
    PARAMS = (
        MAX_BATCH_TOKENS,
        MAX_NUM_SEQS,
        MAX_PREFILL_CHUNK_SIZE,
        Param("prefill_weight", float, 1.0, "counter charge per prefill token", minimum=0),
        Param("decode_weight", float, 2.0, "counter charge per decode token", minimum=0),
    )
    max_batch_tokens: int
    max_num_seqs: int
    max_prefill_chunk_size: int
    prefill_weight: float
    decode_weight: float

    def __init__(
        self,
        max_batch_tokens: int = 544,
        max_num_seqs: int = 64,
        max_prefill_chunk_size: int = 256,
        prefill_weight: float = 1.0,
        decode_weight: float = 2.0,
    ) -> None:
        super().__init__(
            max_batch_tokens=max_batch_tokens,
            max_num_seqs=max_num_seqs,
            max_prefill_chunk_size=max_prefill_chunk_size,
            prefill_weight=prefill_weight,
            decode_weight=decode_weight,
        )
        chunk_fits_budget(max_prefill_chunk_size, max_batch_tokens)
        # Backlogged sessions, in the order they became backlogged (the tie-break).
        self._backlog: dict[Id, deque[Task]] = {}
        # Counters outlive backlogs: one float per session seen.
        self._counter: dict[Id, float] = {}
        # Each backlogged session's place in that order, and (between batches) its turn:
        # key (counter, place), size its front task's. A batch serves first(room left).
        self._joined: dict[Id, int] = {}
        self._joins = 0
        self._turns = FitIndex(max_prefill_chunk_size)

    def counter(self, sid: Id) -> float:
        with self._lock:
            return self._counter.get(sid, 0.0)

    def fingerprint(self) -> object | None:
        """Its parameters and the backlog in order (the tie-break), each session with its
        counter and its tasks. The counters of sessions not backlogged decide only what a
        submit does, which comes from outside. (A counter is only added to and compared:
        -0.0 and 0.0 answer alike.)"""
        counter = self._counter
        backlog = [
            (sid, counter[sid], tuple([task_state(t) for t in queue]))
            for sid, queue in self._backlog.items()
        ]
        return (tuple(self.params().values()), tuple(backlog))

    STATE_FIELDS = ("backlog", "counters")

    def snapshot_queues(self) -> dict[str, object]:
        """``backlog``: the sessions with tasks queued, in the order they became backlogged
        (the tie-break); ``counters``: [session, virtual counter] for every session seen
        (one coming back starts from its own). Each session's tasks are in submit order."""
        return {
            "backlog": list(self._backlog),
            "counters": [[sid, c] for sid, c in self._counter.items()],
        }

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        from ..model.snapshot import a_counter, a_list, an_id, refuse, sessions

        backlog = sessions(fields["backlog"], "backlog")
        counters: dict[Id, float] = {}
        for i, v in enumerate(a_list(fields["counters"], "counters")):
            pair = a_list(v, f"counters[{i}]")
            if len(pair) != 2:
                raise refuse(f"counters[{i}]", "must be [session, counter]")
            sid = an_id(pair[0], f"counters[{i}][0]")
            if sid in counters:
                raise refuse(f"counters[{i}]", f"session {show_id(sid)} is listed twice")
            counters[sid] = a_counter(pair[1], f"counters[{i}][1]")
        queues: dict[Id, deque[Task]] = {sid: deque() for sid in backlog}
        for t in queued:
            queue = queues.get(t.sid)
            if queue is None:
                why = f"session {show_id(t.sid)} has tasks queued (task {show_id(t.tid)})"
                raise refuse("backlog", why + " but is not in the backlog")
            queue.append(t)
        for i, sid in enumerate(backlog):
            if not queues[sid]:
                raise refuse(f"backlog[{i}]", f"session {show_id(sid)} has no task queued")
            if sid not in counters:
                raise refuse(f"backlog[{i}]", f"session {show_id(sid)} has no counter")
        self._counter.update(counters)
        for i, sid in enumerate(backlog):
            self._backlog[sid] = queues[sid]
            self._joined[sid] = i
            self._turn(sid)
        self._joins = len(backlog)

    def enqueue(self, task: Task) -> None:
        sid = task.sid
        queue = self._backlog.get(sid)
        if queue is None:
            own = self._counter.get(sid, 0.0)
            least = self._turns.first(self.max_prefill_chunk_size)  # any size
            if least is not None:  # the lowest counter among the backlogged
                own = max(own, self._counter[least[1]])
            self._counter[sid] = own
            queue = self._backlog[sid] = deque()
            self._joined[sid] = self._joins
            self._joins += 1
            queue.append(task)
            self._turn(sid)
            return
        queue.append(task)

    def _turn(self, sid: Id) -> None:
        """``sid``'s turn from its counter and its front task, as the walk orders it."""
        self._turns.put(
            sid, _key(self._counter[sid], self._joined[sid]), self._backlog[sid][0].size
        )

    def take_batch(self) -> list[Task]:
        if self.explaining:
            return self._take_walking()
        taken: list[Task] = []
        backlog, counter, turns = self._backlog, self._counter, self._turns
        sessions = BatchSessions()
        budget, cap = self.max_batch_tokens, self.max_num_seqs
        spent = 0
        aside: list[Id] = []  # served, and sitting the rest of this batch out
        # The walk in turn order serves the first session whose task fits the room left;
        # every one before it does not fit, sits this batch out, and would not fit later
        # (the room only shrinks): first(room) finds that session without walking them.
        # A session in turns may take its front task: it has nothing in the batch, or only
        # prefill chunks without output, and its front is a chunk (else it is aside).
        while len(taken) < cap and spent < budget:
            entry = turns.first(budget - spent)
            if entry is None:
                break
            sid = entry[1]
            queue = backlog[sid]
            t = queue.popleft()
            taken.append(t)
            sessions.add(t)
            spent += t.size
            weight = self.decode_weight if t.kind is DECODE else self.prefill_weight
            counter[sid] += weight * t.size
            if not queue:
                del backlog[sid]
                del self._joined[sid]
                turns.drop(sid)
            elif sid in sessions.closed or queue[0].kind is DECODE:
                turns.drop(sid)
                aside.append(sid)
            else:
                self._turn(sid)
        for sid in aside:
            self._turn(sid)
        return taken

    def _take_walking(self) -> list[Task]:
        """take_batch walking every session in turn (a heap of them all), to say why each
        task was left: the same batch, at O(backlog) a batch, as explaining costs anyway."""
        taken: list[Task] = []
        backlog, counter = self._backlog, self._counter
        heap = [(counter[sid], order, sid) for order, sid in enumerate(backlog)]
        heapq.heapify(heap)
        sessions = BatchSessions()
        budget, cap = self.max_batch_tokens, self.max_num_seqs
        spent = 0
        why: dict[int, tuple[str, str]] = {}
        served: list[Id] = []
        while heap and len(taken) < cap and spent < budget:
            _, order, sid = heapq.heappop(heap)
            queue = backlog[sid]
            t = queue[0]
            if not sessions.allows(t) or t.size > budget - spent:
                why[id(t)] = (
                    ("no_room", f"{t.size} tokens, {budget - spent} left")
                    if sessions.allows(t)
                    else ("session_rule", "its session has a decode or an output in this batch")
                )
                continue  # sits this batch out
            queue.popleft()
            taken.append(t)
            sessions.add(t)
            spent += t.size
            served.append(sid)
            weight = self.decode_weight if t.kind is DECODE else self.prefill_weight
            counter[sid] += weight * t.size
            if not queue:
                del backlog[sid]
            elif sid not in sessions.closed:
                heapq.heappush(heap, (counter[sid], order, sid))
        for sid in served:
            if sid in backlog:
                self._turn(sid)
            elif sid in self._joined:
                del self._joined[sid]
                self._turns.drop(sid)
        capped = len(taken) >= cap
        self._explain_later(lambda: self._reasons(why, sessions, capped, spent))
        return taken

    def _reasons(
        self, why: dict[int, tuple[str, str]], sessions: BatchSessions, capped: bool, spent: int
    ) -> dict[int, tuple[str, str]]:
        """Why each task still queued was left out (docs/policies.md, fair's codes)."""
        if capped:
            stop = ("seq_cap", seq_cap_text(self.max_num_seqs))
        else:
            stop = ("budget_spent", f"{spent} of {self.max_batch_tokens} tokens were spent")
        for sid, queue in self._backlog.items():
            for i, t in enumerate(queue):
                if i:
                    ahead = show_id(queue[0].tid)
                    why[id(t)] = ("behind_own_task", f"task {ahead} of its session is ahead")
                elif id(t) not in why:
                    if sid in sessions.closed:
                        detail = "its session has a decode or an output in this batch"
                        why[id(t)] = ("session_rule", detail)
                    else:
                        why[id(t)] = stop
        return why

    def remove_session(self, sid: Id) -> list[Task]:
        queue = self._backlog.pop(sid, None)
        if queue is None:
            return []
        del self._joined[sid]
        self._turns.drop(sid)
        return list(queue)

    def reset(self) -> None:
        self._backlog.clear()
        self._joined.clear()
        self._turns.clear()


_DOUBLE: Final = struct.Struct("<q")
_FLOAT: Final = struct.Struct("<d")


def _key(counter: float, joined: int) -> int:
    """(counter, joined) as one int in the same order: a counter is never below 0.0, and a
    float's bits read as an int order the floats at or above 0 (-0.0, equal to 0.0, is 0.0
    first)."""
    bits: int = _DOUBLE.unpack(_FLOAT.pack(counter + 0.0))[0]
    return (bits << 64) | joined
