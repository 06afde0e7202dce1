"""Queue structures and batch-building steps that several built-in policies share."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

from ..model.records import Reasons
from ..model.tally import SessionTally
from ..model.task import DECODE, Id, Task, show_id

# An entry is one int, key * 2**64 + arrival: it orders as the pair (key, arrival) for any
# int64 key, and compares far faster than a tuple.
_ARRIVAL_BITS: Final = 64
_ARRIVAL_MASK: Final = (1 << _ARRIVAL_BITS) - 1

# A queue walked from the front is a list read from a head index: compiled, a list is
# indexed in place, where each deque call is a call by name. Slots before the head are
# spent; they are dropped once there are this many and they are most of the list, so
# memory follows what is queued.
_COMPACT_AFTER: Final = 1024
_T = TypeVar("_T")


def decode_cap_text(cap: int) -> str:
    """decode_cap's detail: the cap of decodes reached."""
    return f"{cap} decode was already taken" if cap == 1 else f"{cap} decodes were already taken"


def seq_cap_text(cap: int) -> str:
    """seq_cap's detail: the cap of tasks in a batch reached."""
    return f"{cap} task was already taken" if cap == 1 else f"{cap} tasks were already taken"


def task_state(t: Task) -> tuple[object, ...]:
    """What a built-in decides from in a queued task (for its fingerprint): its ids, kind,
    size and whether it produces output."""
    return (t.tid, t.sid, t.kind, t.size, t.produce_output)


def _arrival(entry: int) -> int:
    # Below 2**62 the key is 0 and the entry is the arrival: no big-int arithmetic.
    return entry & _ARRIVAL_MASK if entry >> 62 else entry


class OrderedQueue:
    """Queued tasks in (key, arrival) order, removable by session in O(session).

    While every key is 0 the order is arrival order: ``_order`` holds the arrivals, walked
    from ``_head``; a pass walks it, nothing taken out is put back, and after the pass the
    tasks it passed over take the last walked slots (``end_walk``), so a pass never walks
    what an earlier one took, and an arrival a cancel removed is walked at most once. The
    first nonzero key builds a heap of entries, and from then on entries taken out of the
    heap but not dispatched are put back with their original (key, arrival), so a task
    that waits never loses its place. A task's key is raised to that of its session's
    previous queued task, so keys never reorder a session.

    A pass is ``pop`` until None or enough, ``taken`` for each task dispatched, and
    ``put_back`` of the rest, which ends it; nothing is pushed during a pass. So a pass
    costs O(log n) (O(1) unkeyed) for each task it takes or passes over.
    """

    def __init__(self) -> None:
        self._live: dict[int, Task] = {}
        # sid -> its queued (arrival, key), in arrival order: a session's tasks leave in
        # that order, so the oldest is the first.
        self._of_session: dict[Id, deque[tuple[int, int]]] = {}
        self._arrivals = 0
        # None until a key is nonzero (fcfs never sets one): raising a key to its
        # session's last one changes nothing until then, and arrival order needs no heap.
        self._heap: list[int] | None = None
        # Unkeyed: the arrivals from _head on, in order; one not in _live is spent. _at is
        # where the pass has got to (-1 between passes).
        self._order: list[int] = []
        self._head = 0
        self._at = -1

    def __len__(self) -> int:
        return len(self._live)

    def count(self, sid: Id) -> int:
        return len(self._of_session.get(sid, ()))

    def tasks(self) -> Iterator[Task]:
        """The queued tasks, in arrival order."""
        return iter(self._live.values())

    def ordered(self) -> list[Task]:
        """The queued tasks in the order a pass meets them (between passes)."""
        live = self._live
        if self._heap is None:
            return list(live.values())
        keyed = sorted([(k, a) for mine in self._of_session.values() for a, k in mine])
        return [live[a] for _, a in keyed]

    def state(self) -> tuple[object, ...]:
        """The queued tasks in the order a pass meets them, (key, arrival), each with its
        key: what a pass decides from. Arrival numbers themselves, the heap's layout and its
        stale entries decide nothing, and are left out. (Between passes only.)"""
        live = self._live
        if self._heap is None:  # every key is 0, and _live is in arrival order
            return tuple([(0, task_state(t)) for t in live.values()])
        keyed = sorted([(k, a) for mine in self._of_session.values() for a, k in mine])
        return tuple([(key, task_state(live[arrival])) for key, arrival in keyed])

    def keyed(self) -> list[tuple[int, Task]]:
        """The queued tasks in the order a pass meets them, each with its key (a session's
        task's key raised to its earlier one's): a snapshot's order. Pushing them in this
        order, each with its key, into an empty queue gives the same queue."""
        live = self._live
        if self._heap is None:
            return [(0, t) for t in live.values()]
        keyed = sorted([(k, a) for mine in self._of_session.values() for a, k in mine])
        return [(key, live[arrival]) for key, arrival in keyed]

    def push(self, task: Task, key: int = 0) -> None:
        arrival = self._arrivals
        self._arrivals += 1
        heap = self._heap
        mine = self._of_session.get(task.sid)
        if mine is None:
            mine = self._of_session[task.sid] = deque()
        elif heap is not None:
            key = max(key, mine[-1][1])
        elif key < 0:
            key = 0  # the last key of the session, like every key so far
        if heap is None and key:
            heap = self._heap = list(self._live)  # arrivals in order: already a heap
            self._order = []
            self._head = 0
        if heap is not None:
            heapq.heappush(heap, (key << _ARRIVAL_BITS) + arrival)
        else:
            self._order.append(arrival)
        self._live[arrival] = task
        mine.append((arrival, key))

    def pop(self) -> tuple[int, Task] | None:
        """The next live entry of the pass (put it back or ``taken`` it)."""
        heap, live = self._heap, self._live
        if heap is None:
            order = self._order
            i = self._at
            if i < 0:
                i = self._head
            end = len(order)
            while i < end:
                arrival = order[i]
                i += 1
                t = live.get(arrival)
                if t is not None:
                    self._at = i
                    return arrival, t
            self._at = i
            return None
        while heap:
            entry = heapq.heappop(heap)
            t = live.get(_arrival(entry))
            if t is not None:
                return entry, t
        return None

    def is_oldest(self, entry: int, task: Task) -> bool:
        """Whether no earlier task of the same session is still queued."""
        return self._of_session[task.sid][0][0] == _arrival(entry)

    def put_back(self, entries: list[int]) -> None:
        """End the pass: ``entries``, popped and not taken, keep their places."""
        heap = self._heap
        if heap is None:
            at = self._at
            self._at = -1
            if at < 0:
                return
            order = self._order
            if at == len(order) and not entries:
                order.clear()
                self._head = 0
            else:
                self._head = end_walk(order, at, entries)
            return
        for entry in entries:
            heapq.heappush(heap, entry)

    def taken(self, entry: int, task: Task) -> None:
        arrival = _arrival(entry)
        del self._live[arrival]
        mine = self._of_session[task.sid]
        if mine[0][0] == arrival:
            mine.popleft()
        else:  # a policy of the kit may take a later one
            for i, (a, _) in enumerate(mine):
                if a == arrival:
                    del mine[i]
                    break
        if not mine:
            del self._of_session[task.sid]

    def remove_session(self, sid: Id) -> list[Task]:
        """The session's queued tasks in arrival order; their entries go stale."""
        arrivals = self._of_session.pop(sid, None)
        if not arrivals:
            return []
        live = self._live
        dropped = [live.pop(a) for a, _ in arrivals]
        # Stale entries are dropped where a pass meets them; past twice what is live, the
        # order (or the heap) is rebuilt, so memory follows what is queued.
        heap = self._heap
        if heap is None:
            order = self._order
            if len(order) - self._head > 2 * len(live) + _COMPACT_AFTER:
                self._order = [a for a in order[self._head :] if a in live]
                self._head = 0
        elif len(heap) > 2 * len(live) + _COMPACT_AFTER:
            rebuilt = [
                (k << _ARRIVAL_BITS) + a for mine in self._of_session.values() for a, k in mine
            ]
            heapq.heapify(rebuilt)
            self._heap = rebuilt
        return dropped

    def clear(self) -> None:
        if self._heap is not None:
            self._heap.clear()
        self._live.clear()
        self._of_session.clear()
        self._order.clear()
        self._head = 0


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


# An entry of a FitIndex: (key, sid, size).
FitEntry = tuple[int, Id, int]


class FitIndex:
    """Sessions, each with an int key and a size: ``first(room)`` is the entry of least key
    among those of size at most ``room``, in O(log S) for sizes up to S, whatever the number
    of sessions.

    fair and sjf keep here each waiting session by its turn (its key) and its front task's
    size: the walk of a batch in turn order, passing over every session whose task does not
    fit the room left, meets first exactly ``first(room)``; the room only shrinks, so those
    it passed over it would pass over again, and need never be walked.

    Per size, a heap of entries (key, sid, size); a min-tree over the sizes (a dict, so a
    large S costs only the sizes used) holds each heap's least entry. An entry is live while
    it equals ``live[sid]`` (equal, not the same object: compiled, a tuple is unboxed and
    boxed anew); a replaced or dropped one is stale and leaves its heap when it reaches the
    top. An entry equal to the live one stands for it wherever it is. Every heap's top is
    live, so the tree's entries are. Keys are unique among live entries, and a stale
    entry's key equals a live one's only if both are its session's, so entries never compare
    by sid across sessions.
    """

    def __init__(self, max_size: int) -> None:
        self.live: dict[Id, FitEntry] = {}
        self._heaps: dict[int, list[FitEntry]] = {}
        self._top = max(max_size, 1)
        self._leaves = 1 << self._top.bit_length()  # a leaf for each size 0..max_size
        self._tree: dict[int, FitEntry] = {}
        self._held = 0  # entries in the heaps, stale ones included

    def __len__(self) -> int:
        return len(self.live)

    def put(self, sid: Id, key: int, size: int) -> None:
        """``sid``'s entry is now (key, size)."""
        entry = (key, sid, size)
        old = self.live.get(sid)
        self.live[sid] = entry
        heap = self._heaps.get(size)
        if heap is None:
            heap = self._heaps[size] = []
        heapq.heappush(heap, entry)
        self._held += 1
        if old is not None and old[2] != size:
            self._settle(old[2])
        self._settle(size)
        if self._held > 2 * len(self.live) + _COMPACT_AFTER:
            self._rebuild()

    def drop(self, sid: Id) -> None:
        """``sid`` has no entry from now on."""
        old = self.live.pop(sid, None)
        if old is not None:
            self._settle(old[2])

    def first(self, room: int) -> FitEntry | None:
        """The live entry of least key whose size is at most ``room``."""
        tree = self._tree
        if room >= self._top:
            return tree.get(1)
        if room < 0:
            return None
        best: FitEntry | None = None
        lo = self._leaves
        hi = lo + room + 1
        while lo < hi:  # the tree's nodes covering sizes 0..room, bottom up
            if lo & 1:
                e = tree.get(lo)
                if e is not None and (best is None or e < best):
                    best = e
                lo += 1
            if hi & 1:
                hi -= 1
                e = tree.get(hi)
                if e is not None and (best is None or e < best):
                    best = e
            lo >>= 1
            hi >>= 1
        return best

    def ordered(self) -> list[Id]:
        """The sessions in key order (for a person to read)."""
        return [e[1] for e in sorted(self.live.values())]

    def _settle(self, size: int) -> None:
        """Drop the stale entries at the top of ``size``'s heap; the tree takes its top."""
        heaps = self._heaps
        heap = heaps.get(size)
        top: FitEntry | None = None
        if heap is not None:
            live = self.live
            while heap:
                e = heap[0]
                if live.get(e[1]) == e:
                    top = e
                    break
                heapq.heappop(heap)
                self._held -= 1
            if top is None:
                del heaps[size]
        tree = self._tree
        p = size + self._leaves
        if tree.get(p) == top:
            return
        if top is None:
            del tree[p]
        else:
            tree[p] = top
        p >>= 1
        while p:
            left = tree.get(2 * p)
            right = tree.get(2 * p + 1)
            low = right if left is None or (right is not None and right < left) else left
            if tree.get(p) == low:
                break  # every node above holds the same already
            if low is None:
                del tree[p]
            else:
                tree[p] = low
            p >>= 1

    def _rebuild(self) -> None:
        """The heaps and the tree again from the live entries alone."""
        heaps: dict[int, list[FitEntry]] = {}
        for e in self.live.values():
            heap = heaps.get(e[2])
            if heap is None:
                heap = heaps[e[2]] = []
            heap.append(e)
        self._heaps = heaps
        self._tree = {}
        self._held = len(self.live)
        for size, heap in heaps.items():
            heapq.heapify(heap)
            self._settle(size)

    def clear(self) -> None:
        self.live.clear()
        self._heaps.clear()
        self._tree.clear()
        self._held = 0


def decode_reasons(queue: Iterable[Task], decoding: dict[Id, Id], cap: int) -> Why:
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
