"""decode-first's two queues, at a cost per batch that does not grow with what is queued.

Both modes of decode-first (``compat=fixed`` and ``compat=reference``) keep their
decodes in a ``Decodes`` and their prefill chunks in a ``Rotation``. Each gives the batches
of a walk over the whole queue (ExecuTorch's ``take_prefill_pass_`` and decode loop) while
touching only the tasks it takes, the sessions it retires and O(log n) of an index besides.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from typing import Final

from ..model.tally import SessionTally
from ..model.task import Id, Task

_LEAVES: Final = 16  # the smallest index
_SPARE: Final = 64  # holes allowed beyond one per session before the slots are renumbered
_COMPACT_AFTER: Final = 1024  # spent entries at the head of the decode list before dropping


class Rotation:
    """The sessions with prefill chunks queued, in rotation order, and their chunks.

    A session is in the rotation exactly when it has an entry in ``chunks``; an entry a
    cancel emptied keeps its place until a walk reaches it, and then retires.

    Each session holds a *slot*, and slots run in rotation order. A pass walks from the head:
    a session passed over keeps its slot; one served leaves its slot (a hole) and, with chunks
    left, takes a new slot at the end after the pass; one retired leaves a hole. So after a
    pass the order is the passed-over sessions, the unwalked rest, then the served: the
    reference's order, without moving the sessions that did not move.

    A min-tree over the slots holds each slot's key: its session's front chunk size; 0 for
    an emptied session (it stops the walk, to retire); above any room (``_inf``) for a hole.
    The next session a walk must look at, from slot i with r tokens left, is the first slot
    at or after i with key <= r: one descent of the tree. Every session on the way is a hole
    or has a chunk that does not fit, and is passed over, as in the reference. Of those it
    looks at, it serves or retires some, and passes over a decoding session or (fixed) one
    already owed an output in the batch, each at most once a batch (see ``take``). So a
    batch costs O(log n) per session it serves, retires or passes over so, and a pass that
    can place nothing ends in one lookup.
    """

    def __init__(self, budget: int) -> None:
        self.chunks: dict[Id, deque[Task]] = {}
        self._inf = budget + 1  # above any room and any admitted chunk
        self._leaves = _LEAVES
        self._tree: list[int] = [self._inf] * (2 * _LEAVES)
        # slot -> the session that took it; a hole keeps its last session's id, and is a hole
        # because that session's slot (in _slot) is another or none.
        self._sids: list[Id] = []
        self._slot: dict[Id, int] = {}
        self._head = 0  # every slot before it is a hole
        # Slot numbers change only when the slots are renumbered (between batches); a
        # record of a batch's walks (for its reasons) is read only within the same epoch.
        self.epoch = 0

    # --- the index ----------------------------------------------------------------------

    def _key(self, slot: int, key: int) -> None:
        tree = self._tree
        p = slot + self._leaves
        tree[p] = key
        p >>= 1
        while p:
            left = tree[2 * p]
            right = tree[2 * p + 1]
            low = left if left < right else right
            if tree[p] == low:
                break  # every node above holds the same minimum already
            tree[p] = low
            p >>= 1

    def _find(self, start: int, room: int) -> int:
        """The first slot at or after ``start`` whose key is at most ``room``, or -1."""
        if start >= len(self._sids):
            return -1
        tree = self._tree
        leaves = self._leaves
        p = start + leaves
        if tree[p] <= room:
            return start
        while p > 1:
            # Up from the leaf: each right sibling covers the next slots in order.
            if not p & 1 and tree[p + 1] <= room:
                p += 1
                while p < leaves:
                    p <<= 1
                    if tree[p] > room:
                        p += 1
                return p - leaves
            p >>= 1
        return -1

    def _build(self, leaves: int, keys: list[int]) -> None:
        """A tree of ``leaves`` leaves, the first ``len(keys)`` of them ``keys``."""
        inf = self._inf
        tree = [inf] * (2 * leaves)
        for i, key in enumerate(keys):
            tree[leaves + i] = key
        for p in range(leaves - 1, 0, -1):
            left = tree[2 * p]
            right = tree[2 * p + 1]
            tree[p] = left if left < right else right
        self._tree = tree
        self._leaves = leaves

    def _append(self, sid: Id, key: int) -> None:
        """``sid`` takes a new slot at the end. Slot numbers are kept."""
        slot = len(self._sids)
        if slot == self._leaves:
            leaves = self._leaves
            self._build(2 * leaves, self._tree[leaves : 2 * leaves])
        self._sids.append(sid)
        self._slot[sid] = slot
        self._key(slot, key)

    def _renumber(self) -> None:
        """Slots 0.. for the sessions in order, the holes gone (between batches only)."""
        order = self.order()
        slot_of = self._slot
        tree = self._tree
        leaves = self._leaves
        keys = [tree[leaves + slot_of[sid]] for sid in order]
        size = _LEAVES
        while size < 2 * len(order):
            size *= 2
        self._build(size, keys)
        self._sids = order
        self._slot = {sid: i for i, sid in enumerate(order)}
        self._head = 0
        self.epoch += 1

    def order(self) -> list[Id]:
        """The sessions in rotation order, from its head."""
        slot_of = self._slot
        sids = self._sids
        out: list[Id] = []
        for slot in range(self._head, len(sids)):
            sid = sids[slot]
            if slot_of.get(sid, -1) == slot:
                out.append(sid)
        return out

    # --- the queue's calls ----------------------------------------------------------------

    def add(self, t: Task) -> None:
        """Queue a chunk: a session without an entry joins at the back; one with an entry
        (even one a cancel emptied) keeps its place."""
        sid = t.sid
        chunks = self.chunks.get(sid)
        if chunks is None:
            chunks = self.chunks[sid] = deque()
            chunks.append(t)
            self._append(sid, t.size)
            return
        if not chunks:
            self._key(self._slot[sid], t.size)
        chunks.append(t)

    def restore(self, sessions: list[tuple[Id, deque[Task]]]) -> None:
        """Into an empty rotation: the sessions in rotation order, each with its chunks (none:
        an entry a cancel emptied, which holds its place until a walk reaches it)."""
        for sid, chunks in sessions:
            self.chunks[sid] = chunks
            self._append(sid, chunks[0].size if chunks else 0)

    def emptied(self, sid: Id) -> None:
        """The session's chunks were all dropped: it holds its place until a walk reaches it."""
        slot = self._slot.get(sid, -1)
        if slot >= 0:
            self._key(slot, 0)

    def clear(self) -> None:
        self.chunks.clear()
        self._leaves = _LEAVES
        self._tree = [self._inf] * (2 * _LEAVES)
        self._sids = []
        self._slot = {}
        self._head = 0
        self.epoch += 1

    def take(
        self,
        taken: list[Task],
        spent: int,
        budget: int,
        decoding: dict[Id, Id],
        outputs: dict[Id, Id] | None,
        pending: dict[Id, Task] | None,
        walks: list[int] | None,
    ) -> int:
        """Prefill passes until one takes nothing or the budget is spent; returns the tokens
        spent. A session in ``decoding`` is passed over. With ``outputs`` (fix 2), a chunk
        that produces output is passed over when its session is in it, and each output chunk
        taken is added. ``pending`` (compat=reference) loses each taken task's tid. With
        ``walks``, each stretch of slots a walk passed over is added as (first, end, room).
        """
        live = len(self._slot)
        if len(self._sids) - live > live + _SPARE:
            self._renumber()  # a hole per slot in use at most, and memory follows the queue
        inf = self._inf
        chunks_of = self.chunks
        slot_of = self._slot
        sids = self._sids
        head = self._head
        while head < len(sids) and slot_of.get(sids[head], -1) != head:
            head += 1
        self._head = head
        start = head
        while spent < budget:
            # The pass walks the slots up to here; the served take new ones after it.
            end = len(sids)
            if walks is not None and start > head:
                walks.extend((head, start, budget - spent))
            i = walked = start  # walked: where the stretch passed over since the last stop starts
            progress = False
            served: list[Id] = []
            tree = self._tree  # slots are taken only after the pass: the tree stays this one
            leaves = self._leaves
            while spent < budget:
                room = budget - spent
                # The next slot, if it fits, without a descent (the common case of a short
                # rotation).
                j = i if i < end and tree[leaves + i] <= room else self._find(i, room)
                if j < 0:
                    if walks is not None:
                        walks.extend((walked, end, room))
                    break
                i = j + 1
                sid = sids[j]
                chunks = chunks_of[sid]
                if chunks:
                    if sid in decoding:
                        continue  # no chunk beside the session's own decode
                    t = chunks[0]
                    if outputs is not None and t.produce_output and sid in outputs:
                        continue  # fix 2: the batch already owes the session an output
                if walks is not None:
                    walks.extend((walked, j, room))
                walked = i
                self._key(j, inf)
                del slot_of[sid]
                if not chunks:
                    del chunks_of[sid]  # retired where the walk reached it
                    continue
                t = chunks.popleft()
                taken.append(t)
                spent += t.size
                progress = True
                if pending is not None:
                    pending.pop(t.tid, None)
                if outputs is not None and t.produce_output:
                    outputs[sid] = t.tid
                if chunks:
                    served.append(sid)
                else:
                    del chunks_of[sid]
            for sid in served:
                self._append(sid, chunks_of[sid][0].size)
            if not progress:
                break
            # If there is a next pass, this one walked the whole rotation (it ended short of
            # the budget), and whatever it passed over the next passes pass over too: the
            # room only shrinks, a decoding session stays so, a session owed an output stays
            # owed. So the next pass meets only the sessions this one served, at their new
            # slots; it passes over the rest with the room it starts with.
            start = end
        return spent

    def walked(self, walks: list[int]) -> dict[Id, int]:
        """For each session still in the rotation that a walk of the batch recorded in
        ``walks`` passed over: the room that walk had when it passed it (its last walk's).

        A session passed over keeps its slot for the rest of the batch, and a slot is never
        another session's within an epoch, so the last stretch holding its slot is its last
        turn. Sessions are painted from the last stretch back, each once."""
        slots: list[int] = []
        ids: list[Id] = []
        slot_of = self._slot
        sids = self._sids
        for slot in range(self._head, len(sids)):
            if slot_of.get(sids[slot], -1) == slot:
                slots.append(slot)
                ids.append(sids[slot])
        n = len(slots)
        unpainted = list(range(n + 1))  # each position -> the first unpainted at or after it
        rooms: dict[Id, int] = {}
        k = len(walks)
        while k:
            k -= 3
            p = _first_unpainted(unpainted, bisect_left(slots, walks[k]))
            end = bisect_left(slots, walks[k + 1])
            while p < end:
                rooms[ids[p]] = walks[k + 2]
                unpainted[p] = p + 1
                p = _first_unpainted(unpainted, p + 1)
        return rooms


def _first_unpainted(unpainted: list[int], p: int) -> int:
    root = p
    while unpainted[root] != root:
        root = unpainted[root]
    while unpainted[p] != root:
        unpainted[p], p = root, unpainted[p]
    return root


def _arrival(entry: tuple[int, Task]) -> int:
    return entry[0]


class Decodes:
    """Queued decodes. A batch takes, in arrival order, the first decode of each session, up
    to a cap; the session's later decodes wait, in order, for later batches.

    New decodes join ``_main``, walked from its head in arrival order. A decode the walk
    meets whose session already has one in the batch is *deferred*: it leaves ``_main`` for
    its session's ``_behind``, keyed by its place in ``_main``, and is never walked again;
    after the batch, the first decode behind each session served leads it from ``_fronts``
    (a heap by key). Every decode that left ``_main`` arrived before every one still in it,
    so a batch takes from ``_fronts`` in key order, then walks ``_main``: each decode is
    walked once, and a batch costs O(log n) for each decode it takes.

    ``keep_stale`` (compat=reference): a decode the reference's cancel marked stays queued,
    stale, until a batch's walk passes it, as in the reference's deque. One still in
    ``_main`` is dropped where the walk meets it (its mark read then, as the reference reads
    it); one that had left it is kept per session by key, and in one heap by key for the
    walk to drop.
    """

    def __init__(self, keep_stale: bool = False) -> None:
        self._main: list[Task] = []
        self._head = 0
        self._base = 0  # the place of _main[0] since the first decode
        self._in_main = SessionTally()
        self._fronts: list[int] = []  # heap of keys; a key not in _front_task is spent
        self._front_task: dict[int, Task] = {}
        self._front_of: dict[Id, int] = {}  # sid -> its front's key
        self._behind: dict[Id, deque[tuple[int, Task]]] = {}
        self._keep_stale = keep_stale
        self._stale: dict[Id, deque[tuple[int, Task]]] = {}
        self._stale_heap: list[int] = []  # one left in _stale_sid is still queued
        self._stale_sid: dict[int, Id] = {}

    def push(self, t: Task) -> None:
        self._main.append(t)
        self._in_main.add(t.sid)

    def take(
        self, taken: list[Task], decoding: dict[Id, Id], cap: int, pending: dict[Id, Task] | None
    ) -> None:
        """Up to ``cap`` decodes, the first of each session in arrival order; ``decoding``
        gains each session taken, with its decode's tid; ``pending`` loses the tids."""
        n = 0
        reach = -1  # the key of the last front taken, while the walk has not reached _main
        fronts = self._fronts
        front_task = self._front_task
        front_of = self._front_of
        while n < cap and fronts:
            key = heapq.heappop(fronts)
            t = front_task.pop(key, None)
            if t is None:
                continue  # its session was cancelled
            sid = t.sid
            del front_of[sid]
            decoding[sid] = t.tid
            taken.append(t)
            n += 1
            reach = key
            if pending is not None:
                pending.pop(t.tid, None)
        if n < cap:
            reach = -1  # the walk goes on into _main, past everything that left it
            main = self._main
            tally = self._in_main
            behind = self._behind
            stale = self._keep_stale
            i = self._head
            end = len(main)
            while n < cap and i < end:
                t = main[i]
                i += 1
                sid = t.sid
                tally.remove(sid)
                if stale and t.cancelled:
                    continue  # a stale entry, dropped where the walk meets it
                if sid in decoding:
                    queue = behind.get(sid)
                    if queue is None:
                        queue = behind[sid] = deque()
                    queue.append((self._base + i - 1, t))
                    continue
                decoding[sid] = t.tid
                taken.append(t)
                n += 1
                if pending is not None:
                    pending.pop(t.tid, None)
            if i == end:
                self._base += end
                main.clear()
                i = 0
            elif i > _COMPACT_AFTER and 2 * i > end:
                self._base += i
                del main[:i]
                i = 0
            self._head = i
        if self._behind:
            behind = self._behind
            for sid in decoding:
                queue = behind.get(sid)
                if queue is not None:
                    key, t = queue.popleft()
                    if not queue:
                        del behind[sid]
                    self._lead(sid, key, t)
        if self._stale_sid:
            self._drop_stale(reach)

    def _lead(self, sid: Id, key: int, t: Task) -> None:
        """``t`` (at ``key``) leads its session from now on."""
        self._front_of[sid] = key
        self._front_task[key] = t
        heapq.heappush(self._fronts, key)

    def _drop_stale(self, reach: int) -> None:
        """The stale entries a walk that ended at key ``reach`` passed (all, if -1)."""
        heap = self._stale_heap
        owner = self._stale_sid
        stale = self._stale
        while heap and (reach < 0 or heap[0] < reach):
            sid = owner.pop(heapq.heappop(heap), None)
            if sid is None:
                continue
            queue = stale[sid]
            queue.popleft()  # each session's stale entries leave in key order
            if not queue:
                del stale[sid]

    def moved(self, sid: Id) -> list[tuple[int, Task]]:
        """The session's decodes that left ``_main`` (stale ones too), with their keys, in
        order: each arrived before any of its decodes still in ``_main``."""
        out: list[tuple[int, Task]] = []
        key = self._front_of.get(sid, -1)
        if key >= 0:
            out.append((key, self._front_task[key]))
        behind = self._behind.get(sid)
        if behind is not None:
            out.extend(behind)
        stale = self._stale.get(sid)
        if stale is not None:
            out.extend(stale)
            out.sort(key=_arrival)
        return out

    def in_main(self, sid: Id) -> list[Task]:
        """The session's decodes still in ``_main``, in order: a walk of it, unless the
        session has none there."""
        main = self._main
        if self._head:
            self._base += self._head
            del main[: self._head]
            self._head = 0
        if not self._in_main.of(sid, main):
            return []
        return [t for t in main if t.sid == sid]

    def _forget(self, sid: Id) -> None:
        """Drop the session's decodes that left ``_main``."""
        key = self._front_of.pop(sid, -1)
        if key >= 0:
            del self._front_task[key]
        self._behind.pop(sid, None)
        stale = self._stale.pop(sid, None)
        if stale is not None:
            for k, _ in stale:
                del self._stale_sid[k]
        if len(self._fronts) > 2 * len(self._front_task) + _SPARE:
            self._fronts = list(self._front_task)
            heapq.heapify(self._fronts)
        if len(self._stale_heap) > 2 * len(self._stale_sid) + _SPARE:
            self._stale_heap = list(self._stale_sid)
            heapq.heapify(self._stale_heap)

    def remove_session(self, sid: Id) -> list[Task]:
        """Drop the session's decodes and return them, in arrival order (compat=fixed)."""
        dropped = [t for _, t in self.moved(sid)]
        self._forget(sid)
        mine = self.in_main(sid)
        if mine:
            self._main = [t for t in self._main if t.sid != sid]
            for _ in mine:
                self._in_main.remove(sid)
            dropped.extend(mine)
        return dropped

    def settle(self, sid: Id, moved: list[tuple[int, Task]]) -> None:
        """The session's decodes that left ``_main`` are ``moved`` (in key order): those
        marked cancelled stale, the rest queued (compat=reference, after a cancel marked
        some, or a stale task was submitted again and is live once more)."""
        self._forget(sid)
        live = [e for e in moved if not e[1].cancelled]
        if live:
            key, t = live[0]
            self._lead(sid, key, t)
            if len(live) > 1:
                self._behind[sid] = deque(live[1:])
        stale = [e for e in moved if e[1].cancelled]
        if stale:
            self._stale[sid] = deque(stale)
            for key, _ in stale:
                self._stale_sid[key] = sid
                heapq.heappush(self._stale_heap, key)

    def ordered(self) -> list[Task]:
        """Every queued decode (stale ones too), in arrival order."""
        entries: list[tuple[int, Task]] = list(self._front_task.items())
        for behind in self._behind.values():
            entries.extend(behind)
        for stale in self._stale.values():
            entries.extend(stale)
        entries.sort(key=_arrival)
        out = [t for _, t in entries]
        out.extend(self._main[self._head :])
        return out

    def clear(self) -> None:
        self._main.clear()
        self._head = 0
        self._in_main.clear()
        self._fronts.clear()
        self._front_task.clear()
        self._front_of.clear()
        self._behind.clear()
        self._stale.clear()
        self._stale_heap.clear()
        self._stale_sid.clear()
