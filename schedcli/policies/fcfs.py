"""fcfs: one queue, one token budget, head-of-line blocking (vLLM V1's unified budget)."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ..model.scheduler import QueueScheduler
from ..model.task import Id, Task
from ._limits import MAX_BATCH_TOKENS, MAX_NUM_SEQS, MAX_PREFILL_CHUNK_SIZE, chunk_fits_budget
from ._queues import BatchSessions, OrderedQueue, Why, take_in_order


@mypyc_attr(allow_interpreted_subclasses=True)
class FcfsScheduler(QueueScheduler):
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

    def snapshot_queues(self) -> dict[str, object]:
        """Nothing of its own: its queue is the queued tasks in submit order."""
        return {}

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        for t in queued:
            self._queue.push(t)

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
