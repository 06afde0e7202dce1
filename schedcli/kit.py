"""What policy authors build with: the shared bookkeeping, parameter declarations, queue
helpers and the output rule the built-in policies use (docs/plugins.md).

    from schedcli.kit import QueueScheduler, MAX_BATCH_TOKENS, DecodeQueue
"""

from __future__ import annotations

from .model.scheduler import Param, QueueScheduler, Scheduler, check_params
from .model.task import DECODE, PREFILL, Id, Task, TaskKind, settle_outputs
from .policies._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_NUM_SEQS,
    MAX_PREFILL_CHUNK_SIZE,
    chunk_fits_budget,
    decodes_fit_budget,
    decodes_leave_room,
)
from .policies._queues import (
    BatchSessions,
    DecodeQueue,
    OrderedQueue,
    Why,
    decode_reasons,
    take_in_order,
)

__all__ = [
    "DECODE",
    "MAX_BATCH_TOKENS",
    "MAX_DECODE_SEQUENCES",
    "MAX_NUM_SEQS",
    "MAX_PREFILL_CHUNK_SIZE",
    "PREFILL",
    "BatchSessions",
    "DecodeQueue",
    "Id",
    "OrderedQueue",
    "Param",
    "QueueScheduler",
    "Scheduler",
    "Task",
    "TaskKind",
    "Why",
    "check_params",
    "chunk_fits_budget",
    "decode_reasons",
    "decodes_fit_budget",
    "decodes_leave_room",
    "settle_outputs",
    "take_in_order",
]
