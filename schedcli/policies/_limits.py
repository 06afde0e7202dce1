"""Cross-parameter rules the built-in policies share, with messages naming the rule."""

from __future__ import annotations


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
