"""fcfs, priority, prefill-first, sjf and fair as they were before #58 item 2: the oracles
the new queues are held to.

This is the pre-change code of schedcli/policies/fcfs.py, priority.py, prefill_first.py,
sjf.py, fair.py and the parts of _queues.py they used, kept unchanged as test oracles:
fair re-heaps and sjf re-sorts every waiting session each pass, and the ordered queue walks
its dict's deleted slots, which made an overloaded replay quadratic. Their batches,
rejections, cancel and clear returns, reasons and fingerprints are what the new policies
must give exactly (tests/policies/test_queues_same_batches.py). Do not "fix" them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

from schedcli.model.records import Reasons
from schedcli.model.scheduler import Param, QueueScheduler
from schedcli.model.tally import SessionTally
from schedcli.model.task import DECODE, Id, Task, show_id
from schedcli.policies._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_NUM_SEQS,
    MAX_PREFILL_CHUNK_SIZE,
    chunk_fits_budget,
    decodes_fit_budget,
    decodes_leave_room,
)
from schedcli.policies._queues import decode_cap_text, seq_cap_text

_ARRIVAL_BITS: Final = 64
_ARRIVAL_MASK: Final = (1 << _ARRIVAL_BITS) - 1


def task_state(t: Task) -> tuple[object, ...]:
    """What a built-in decides from in a queued task (for its fingerprint): its ids, kind,
    size and whether it produces output."""
    return (t.tid, t.sid, t.kind, t.size, t.produce_output)


def _arrival(entry: int) -> int:
    # Below 2**62 the key is 0 and the entry is the arrival: no big-int arithmetic.
    return entry & _ARRIVAL_MASK if entry >> 62 else entry


class OrderedQueue:
    """Queued tasks in (key, arrival) order, removable by session in O(session).

    While every key is 0 the order is arrival order, which ``_live`` keeps by itself: a
    pass walks it, and nothing taken out is put back. The first nonzero key builds a heap
    of entries, and from then on entries taken out of the heap but not dispatched are put
    back with their original (key, arrival), so a task that waits never loses its place.
    A task's key is raised to that of its session's previous queued task, so keys never
    reorder a session.

    A pass is ``pop`` until None or enough, ``taken`` for each task dispatched, and
    ``put_back`` of the rest, which ends it; nothing is pushed during a pass.
    """

    def __init__(self) -> None:
        self._live: dict[int, Task] = {}
        # sid -> {arrival: key}, in arrival order; a dict so removal is O(1).
        self._of_session: dict[Id, dict[int, int]] = {}
        self._arrivals = 0
        # None until a key is nonzero (fcfs never sets one): raising a key to its
        # session's last one changes nothing until then, and arrival order needs no heap.
        self._heap: list[int] | None = None
        # The unkeyed pass: where it has got to in _live, and the arrivals it took, which
        # leave _live when it ends (a dict cannot shrink while it is walked).
        self._cursor: Iterator[tuple[int, Task]] | None = None
        self._gone: list[int] = []

    def __len__(self) -> int:
        return len(self._live) - len(self._gone)

    def count(self, sid: Id) -> int:
        return len(self._of_session.get(sid, ()))

    def tasks(self) -> Iterator[Task]:
        """The queued tasks, in arrival order."""
        return iter(self._live.values())

    def state(self) -> tuple[object, ...]:
        """The queued tasks in the order a pass meets them, (key, arrival), each with its
        key: what a pass decides from. Arrival numbers themselves, the heap's layout and its
        stale entries decide nothing, and are left out. (Between passes only.)"""
        live = self._live
        if self._heap is None:  # every key is 0, and _live is in arrival order
            return tuple([(0, task_state(t)) for t in live.values()])
        keyed: list[tuple[int, int]] = sorted(
            [(key, arrival) for mine in self._of_session.values() for arrival, key in mine.items()]
        )
        return tuple([(key, task_state(live[arrival])) for key, arrival in keyed])

    def push(self, task: Task, key: int = 0) -> None:
        arrival = self._arrivals
        self._arrivals += 1
        heap = self._heap
        mine = self._of_session.get(task.sid)
        if mine is None:
            mine = self._of_session[task.sid] = {}
        elif heap is not None:
            key = max(key, next(reversed(mine.values())))
        elif key < 0:
            key = 0  # the last key of the session, like every key so far
        if heap is None and key:
            heap = self._heap = list(self._live)  # arrivals in order: already a heap
        if heap is not None:
            heapq.heappush(heap, (key << _ARRIVAL_BITS) + arrival)
        self._live[arrival] = task
        mine[arrival] = key

    def pop(self) -> tuple[int, Task] | None:
        """The next live entry of the pass (put it back or ``taken`` it)."""
        heap, live = self._heap, self._live
        if heap is None:
            cursor = self._cursor
            if cursor is None:
                cursor = self._cursor = iter(live.items())
            for item in cursor:
                return item
            return None
        while heap:
            entry = heapq.heappop(heap)
            t = live.get(_arrival(entry))
            if t is not None:
                return entry, t
        return None

    def is_oldest(self, entry: int, task: Task) -> bool:
        """Whether no earlier task of the same session is still queued."""
        for oldest in self._of_session[task.sid]:  # compiled, a loop beats next(iter(...))
            return oldest == _arrival(entry)
        return False

    def put_back(self, entries: list[int]) -> None:
        """End the pass: ``entries``, popped and not taken, keep their places."""
        heap = self._heap
        if heap is None:
            live = self._live
            for arrival in self._gone:
                del live[arrival]
            self._gone.clear()
            self._cursor = None
            return
        for entry in entries:
            heapq.heappush(heap, entry)

    def taken(self, entry: int, task: Task) -> None:
        arrival = _arrival(entry)
        if self._heap is None:
            self._gone.append(arrival)
        else:
            del self._live[arrival]
        mine = self._of_session[task.sid]
        del mine[arrival]
        if not mine:
            del self._of_session[task.sid]

    def remove_session(self, sid: Id) -> list[Task]:
        """The session's queued tasks in arrival order; their heap entries go stale."""
        arrivals = self._of_session.pop(sid, None)
        if not arrivals:
            return []
        live = self._live
        return [live.pop(a) for a in arrivals]

    def clear(self) -> None:
        if self._heap is not None:
            self._heap.clear()
        self._live.clear()
        self._of_session.clear()


class BatchSessions:
    """Which sessions a batch under construction holds, for the interface's session rule.

    A session may appear more than once only as consecutive prefill chunks, and only
    until one of its tasks produces output: a decode or an output chunk closes it.
    """

    __slots__ = ("closed", "present")

    def __init__(self) -> None:
        self.present: set[Id] = set()
        self.closed: set[Id] = set()

    def allows(self, t: Task) -> bool:
        sid = t.sid
        if sid in self.closed:
            return False
        return not (t.kind is DECODE and sid in self.present)

    def add(self, t: Task) -> None:
        self.present.add(t.sid)
        if t.kind is DECODE or t.produce_output:
            self.closed.add(t.sid)


Why = Reasons  # the name the kit exports
"""Reasons a task was left out of a batch, by the task's object id (while explaining)."""


def take_in_order(
    queue: OrderedQueue,
    taken: list[Task],
    sessions: BatchSessions,
    *,
    budget: int,
    spent: int,
    cap: int,
    why: Why | None = None,
    cap_code: str = "seq_cap",
) -> int:
    """Take from the head while tasks fit; returns the tokens spent.

    A task the session rule forbids, or one behind an older task of its session, waits
    (as do its session's later tasks, which keep their order) without ending the batch;
    the first task that does not fit the budget ends it: head-of-line blocking, on purpose.
    With ``why``, every task left in the queue gets its reason.
    """
    waiting: list[int] = []
    blocked: set[Id] = set()
    blocked_total = 0
    stop: tuple[str, str] | None = None
    try:
        while len(taken) < cap and len(queue) > blocked_total:
            item = queue.pop()
            if item is None:
                break
            entry, t = item
            sid = t.sid
            if not queue.is_oldest(entry, t):
                # A session's tasks leave in its submission order, whatever their keys:
                # this one waits for the older one, which is still to come.
                waiting.append(entry)
                if why is not None:
                    why[id(t)] = ("behind_own_task", "an earlier task of its session is queued")
                continue
            if sid in blocked or not sessions.allows(t):
                waiting.append(entry)
                if why is not None:
                    why[id(t)] = (
                        ("behind_own_task", "an earlier task of its session waits")
                        if sid in blocked
                        else ("session_rule", "its session has a decode or an output in this batch")
                    )
                if sid not in blocked:
                    blocked.add(sid)
                    blocked_total += queue.count(sid)
                continue
            if t.size > budget - spent:
                waiting.append(entry)
                if why is not None:
                    why[id(t)] = ("no_room", f"{t.size} tokens, {budget - spent} left")
                    stop = ("head_of_line", f"task {show_id(t.tid)} ahead of it did not fit")
                break
            queue.taken(entry, t)
            taken.append(t)
            sessions.add(t)
            spent += t.size
    finally:
        queue.put_back(waiting)  # ends the pass, however it ends
    if why is not None:
        if stop is None:
            said = decode_cap_text(cap) if cap_code == "decode_cap" else seq_cap_text(cap)
            stop = (cap_code, said)
        for t in queue.tasks():
            if id(t) not in why:
                own = t.sid in blocked
                why[id(t)] = (
                    ("behind_own_task", "an earlier task of its session waits") if own else stop
                )
    return spent


# A queue walked from the front is a list read from a head index: compiled, a list is
# indexed in place, where each deque call is a call by name. Slots before the head are
# spent; they are dropped once there are this many and they are most of the list, so
# memory follows what is queued.
_COMPACT_AFTER: Final = 1024
_T = TypeVar("_T")


def end_walk(items: list[_T], walked_to: int, passed: list[_T]) -> int:
    """After a walk from the head to ``walked_to``: the items ``passed`` over (in order,
    every other walked item gone) take the last walked slots, ahead of the unwalked rest.
    Returns the new head, having dropped the spent slots if they are most of the list."""
    head = walked_to - len(passed)
    for j, item in enumerate(passed):
        items[head + j] = item
    if head > _COMPACT_AFTER and 2 * head > len(items):
        del items[:head]
        head = 0
    return head


class DecodeQueue:
    """Queued decodes in arrival order, with a tally per session for cheap cancels."""

    def __init__(self) -> None:
        self._items: list[Task] = []
        self._head = 0
        self._of_session = SessionTally()

    def push(self, task: Task) -> None:
        self._items.append(task)
        self._of_session.add(task.sid)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._items[self._head :])

    def state(self) -> tuple[object, ...]:
        """The queued decodes in order, as a fingerprint holds them (the tally is derived)."""
        return tuple([task_state(t) for t in self._items[self._head :]])

    def __len__(self) -> int:
        return len(self._items) - self._head

    def take(self, taken: list[Task], decoding: dict[Id, Id], cap: int) -> None:
        """Decodes in arrival order, at most one per session, up to ``cap``; ``decoding``
        gains each session taken, with its decode's tid.

        A session's second decode is passed over and goes back to the head in arrival
        order, so it still leads the queue next time.
        """
        items, tally = self._items, self._of_session
        i = self._head
        end = len(items)
        deferred: list[Task] = []
        n = 0
        while n < cap and i < end:
            t = items[i]
            i += 1
            sid = t.sid
            if sid in decoding:
                deferred.append(t)
                continue
            decoding[sid] = t.tid
            taken.append(t)
            n += 1
            tally.remove(sid)
        if i == end and not deferred:
            items.clear()
            self._head = 0
            return
        self._head = end_walk(items, i, deferred)

    def remove_session(self, sid: Id) -> list[Task]:
        """The session's decodes, in arrival order."""
        items = self._items
        if self._head:
            del items[: self._head]
            self._head = 0
        if not self._of_session.of(sid, items):
            return []
        dropped = [t for t in items if t.sid == sid]
        self._items = [t for t in items if t.sid != sid]
        for _ in dropped:
            self._of_session.remove(sid)
        return dropped

    def clear(self) -> None:
        self._items.clear()
        self._head = 0
        self._of_session.clear()


def decode_reasons(queue: DecodeQueue, decoding: dict[Id, Id], cap: int) -> Why:
    """Why each decode still queued was left out: its session's decode went instead, or
    the cap was reached before its turn (the decode pass stops only at the cap)."""
    why: Why = {}
    for t in queue:
        if t.sid in decoding:
            detail = f"decode {show_id(decoding[t.sid])} of its session is in this batch"
            why[id(t)] = ("one_decode_per_session", detail)
        else:
            why[id(t)] = ("decode_cap", decode_cap_text(cap))
    return why


def chunk_reasons(
    why: Why,
    chunks_of: dict[Id, deque[Task]],
    decoding: dict[Id, Id],
    front: Callable[[Id, Task], tuple[str, str]],
) -> None:
    """Reasons for queued prefill chunks: behind its session's front chunk, beside its
    session's decode, or (for the front chunk) what ``front`` says of its turn."""
    for sid, chunks in chunks_of.items():
        for i, t in enumerate(chunks):
            if i:
                ahead = show_id(chunks[0].tid)
                why[id(t)] = ("behind_own_chunk", f"chunk {ahead} of its session is ahead")
            elif sid in decoding:
                detail = f"decode {show_id(decoding[sid])} of its session is in this batch"
                why[id(t)] = ("session_decoding", detail)
            else:
                why[id(t)] = front(sid, t)


class OracleFcfs(QueueScheduler):
    RULE = """One queue in submission order under one token budget and a sequence cap.
    Tasks are taken from the head while they fit. A task that would break the session
    rule waits for the next batch without losing its place; the first task that does
    not fit the budget ends the batch (head-of-line blocking).
    """

    name = "fcfs"
    PARAMS = (
        MAX_BATCH_TOKENS,
        MAX_NUM_SEQS,
        MAX_PREFILL_CHUNK_SIZE,
    )
    max_batch_tokens: int
    max_num_seqs: int
    max_prefill_chunk_size: int

    def __init__(
        self,
        max_batch_tokens: int = 544,
        max_num_seqs: int = 64,
        max_prefill_chunk_size: int = 256,
    ) -> None:
        super().__init__(
            max_batch_tokens=max_batch_tokens,
            max_num_seqs=max_num_seqs,
            max_prefill_chunk_size=max_prefill_chunk_size,
        )
        chunk_fits_budget(max_prefill_chunk_size, max_batch_tokens)
        self._queue = OrderedQueue()

    def _key(self, task: Task) -> int:
        return 0

    def fingerprint(self) -> object | None:
        """Its parameters and its queue in the order a batch takes it, with each task's key
        (what its next batches depend on; the reasons it keeps are not)."""
        return self._state()

    def _state(self) -> tuple[object, ...]:
        return (tuple(self.params().values()), self._queue.state())

    def enqueue(self, task: Task) -> None:
        self._queue.push(task, self._key(task))

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        why: Why | None = {} if self.explaining else None
        take_in_order(
            self._queue,
            taken,
            BatchSessions(),
            budget=self.max_batch_tokens,
            spent=0,
            cap=self.max_num_seqs,
            why=why,
        )
        self._left = why
        return taken

    def remove_session(self, sid: Id) -> list[Task]:
        return self._queue.remove_session(sid)

    def reset(self) -> None:
        self._queue.clear()


class OraclePriority(OracleFcfs):
    RULE = """Like fcfs, but the queue is ordered by (task priority, submission order): lower
    priority values run first, and equal priorities keep arrival order. A session's task
    never overtakes an earlier one of the same session (it inherits the earlier one's
    priority if that is later). Head-of-line blocking and the session rule are fcfs's.
    """

    name = "priority"

    def _key(self, task: Task) -> int:
        return task.priority

    def fingerprint(self) -> object | None:
        """fcfs's, its keys the priorities (declared here: a class's own, engine/stall.py)."""
        return self._state()


class OraclePrefillFirst(QueueScheduler):
    RULE = """While prefill chunks are queued, a batch holds only prefill, first come first
    served within max_batch_tokens (the first chunk that does not fit ends the batch).
    Otherwise the batch holds decodes, first come first served, one per session, up
    to max_decode_sequences.
    """

    name = "prefill-first"
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
        chunk_fits_budget(max_prefill_chunk_size, max_batch_tokens)
        decodes_fit_budget(max_decode_sequences, max_batch_tokens)
        self._prefill = OrderedQueue()
        self._decodes = OrderedQueue()

    def fingerprint(self) -> object | None:
        """Its parameters and both queues in the order a batch takes them."""
        return (tuple(self.params().values()), self._prefill.state(), self._decodes.state())

    def enqueue(self, task: Task) -> None:
        (self._decodes if task.kind is DECODE else self._prefill).push(task)

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        prefilling = len(self._prefill) > 0
        why: Why | None = {} if self.explaining else None
        take_in_order(
            self._prefill if prefilling else self._decodes,
            taken,
            BatchSessions(),
            budget=self.max_batch_tokens,
            spent=0,
            cap=self.max_batch_tokens if prefilling else self.max_decode_sequences,
            why=why,
            cap_code="seq_cap" if prefilling else "decode_cap",
        )
        if why is not None and prefilling:
            for t in self._decodes.tasks():
                why[id(t)] = ("prefill_first", "prefill chunks are queued: decodes wait")
        self._left = why
        return taken

    def remove_session(self, sid: Id) -> list[Task]:
        return self._prefill.remove_session(sid) + self._decodes.remove_session(sid)

    def reset(self) -> None:
        self._prefill.clear()
        self._decodes.clear()


class OracleSjf(QueueScheduler):
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


class OracleFair(QueueScheduler):
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

    def enqueue(self, task: Task) -> None:
        sid = task.sid
        queue = self._backlog.get(sid)
        if queue is None:
            own = self._counter.get(sid, 0.0)
            if self._backlog:
                own = max(own, min(self._counter[s] for s in self._backlog))
            self._counter[sid] = own
            queue = self._backlog[sid] = deque()
        queue.append(task)

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        backlog, counter = self._backlog, self._counter
        heap = [(counter[sid], order, sid) for order, sid in enumerate(backlog)]
        heapq.heapify(heap)
        sessions = BatchSessions()
        budget, cap = self.max_batch_tokens, self.max_num_seqs
        spent = 0
        why: dict[int, tuple[str, str]] | None = {} if self.explaining else None
        while heap and len(taken) < cap and spent < budget:
            _, order, sid = heapq.heappop(heap)
            queue = backlog[sid]
            t = queue[0]
            if not sessions.allows(t) or t.size > budget - spent:
                if why is not None:
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
            weight = self.decode_weight if t.kind is DECODE else self.prefill_weight
            counter[sid] += weight * t.size
            if not queue:
                del backlog[sid]
            elif sid not in sessions.closed:
                heapq.heappush(heap, (counter[sid], order, sid))
        if why is not None:
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
        return list(queue) if queue else []

    def reset(self) -> None:
        self._backlog.clear()
