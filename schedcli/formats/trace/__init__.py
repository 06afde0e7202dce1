"""Trace format v1: a streaming, validating reader (docs/trace-format.md).

A read's worth of lines is decoded at once, straight into the structs of schema.py (the
recorder's spelling of a plain submit, the commonest line, is read here directly). A read
with any problem in it is decoded again line by line, and a line the structs refuse is
parsed once more only to explain why, in the schema's own terms: the errors and their line
numbers are the same whichever way a trace arrives.

The package's seams: ``events`` (what a line becomes), ``lines`` (one line decoded or
explained), ``scan`` (a read decoded at once), ``reader`` (the streaming reader).
"""

from __future__ import annotations

from .events import (
    FORMAT_VERSION,
    Event,
    Header,
    Line,
    LineError,
    Run,
    StateLine,
    as_event,
    to_event,
)
from .lines import (
    check_duplicate_keys,
    decode_event,
    decode_object,
    explain_event,
    incomplete_trace,
    parse_header,
    parse_state,
    partial_marker,
    partial_reason,
)
from .reader import TraceReader, open_trace
from .scan import decode_chunk

__all__ = [
    "FORMAT_VERSION",
    "Event",
    "Header",
    "Line",
    "LineError",
    "Run",
    "StateLine",
    "TraceReader",
    "as_event",
    "check_duplicate_keys",
    "decode_chunk",
    "decode_event",
    "decode_object",
    "explain_event",
    "incomplete_trace",
    "open_trace",
    "parse_header",
    "parse_state",
    "partial_marker",
    "partial_reason",
    "to_event",
]
