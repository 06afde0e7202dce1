"""prefill-first: vLLM V0's default; a batch is all prefill while any prompt waits."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ..model.scheduler import QueueScheduler
from ..model.task import DECODE, Id, Task
from ._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_PREFILL_CHUNK_SIZE,
    chunk_fits_budget,
    decodes_fit_budget,
)
from ._queues import BatchSessions, OrderedQueue, Why, take_in_order


@mypyc_attr(allow_interpreted_subclasses=True)
class PrefillFirstScheduler(QueueScheduler):
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

    def snapshot_queues(self) -> dict[str, object]:
        """Nothing of its own: each queue is its kind's queued tasks in submit order."""
        return {}

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        for t in queued:
            self.enqueue(t)

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
