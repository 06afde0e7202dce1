"""The parameters the built-in policies share, and their cross-parameter rules.

Each rule's message names the rule, so a bad ``--param`` says what to change.
"""

from __future__ import annotations

from ..model.scheduler import Param

MAX_BATCH_TOKENS = Param("max_batch_tokens", int, 544, "tokens one batch may hold", minimum=1)
# Two different caps, so two names: decode-first's family counts only decodes (prefill
# chunks are bounded by the budget alone); fcfs's family counts every task.
MAX_DECODE_SEQUENCES = Param(
    "max_decode_sequences",
    int,
    32,
    "decodes one batch may hold (prefill chunks not counted)",
    minimum=1,
)
MAX_NUM_SEQS = Param(
    "max_num_seqs", int, 64, "tasks one batch may hold, decodes and chunks alike", minimum=1
)
MAX_PREFILL_CHUNK_SIZE = Param(
    "max_prefill_chunk_size", int, 256, "largest prefill chunk accepted", minimum=1
)


def decodes_leave_room(max_decode_sequences: int, max_batch_tokens: int) -> None:
    if max_decode_sequences >= max_batch_tokens:
        raise ValueError(
            f"max_decode_sequences ({max_decode_sequences}) must be less than max_batch_tokens "
            f"({max_batch_tokens}): a full decode batch would leave no room for prefill"
        )


def chunk_fits_budget(max_prefill_chunk_size: int, max_batch_tokens: int) -> None:
    # A chunk larger than the whole budget would be admitted and never dispatched.
    if max_prefill_chunk_size > max_batch_tokens:
        raise ValueError(
            f"max_prefill_chunk_size ({max_prefill_chunk_size}) must be <= max_batch_tokens "
            f"({max_batch_tokens}): a larger chunk could never be dispatched"
        )


def decodes_fit_budget(max_decode_sequences: int, max_batch_tokens: int) -> None:
    if max_decode_sequences > max_batch_tokens:
        raise ValueError(
            f"max_decode_sequences ({max_decode_sequences}) must be <= max_batch_tokens "
            f"({max_batch_tokens}): a full decode batch would overspend the budget"
        )
