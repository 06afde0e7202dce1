"""The building blocks of the built-in policies, for policy authors (docs/plugins.md): the
shared parameter declarations, the limits' cross-checks and the queues.

The interface itself (Scheduler, QueueScheduler, Param, Task, Id, TaskKind,
settle_outputs) is imported from ``schedcli``, the one front door; this module adds what
is built on it, and names nothing ``schedcli`` names.

    from schedcli import QueueScheduler
    from schedcli.kit import MAX_BATCH_TOKENS, DecodeQueue
"""

from __future__ import annotations

from .model.scheduler import check_params
from .model.task import DECODE, PREFILL
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
    "OrderedQueue",
    "Why",
    "check_params",
    "chunk_fits_budget",
    "decode_reasons",
    "decodes_fit_budget",
    "decodes_leave_room",
    "take_in_order",
]
