"""What a file is, from its first line, in one place: which of schedcli's own formats
(trace, dump, workload, sweep results), or which public request trace ``convert`` reads
(the converter table's detectors), and the message that says so when a command is given
the wrong kind."""

from __future__ import annotations

import orjson

from ..model.errors import InputError
from .source import display_name, numbered_lines, open_binary

# What a file is, from its first line, and the command that takes it.
TAKEN_BY = {
    "trace": "an event trace (replay, validate, stats, diff, report take it)",
    "dump": "a replay dump (stats, diff, report take it; a golden is one too)",
    "workload": "a workload of requests (simulate and report take it)",
    "csv": "a CSV request trace (convert turns it into a workload)",
    "sweep": "sweep results (report draws them)",
}


def _csv_like(line: bytes) -> bool:
    """A header or row of comma-separated text: not JSON (an array, a number), not binary."""
    if b"," not in line or line[:1] in (b"[", b"{", b'"'):
        return False
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.isprintable() or all(c.isprintable() or c == "\t" for c in text)


def kind_of_line(raw: bytes) -> str | None:
    """``trace``, ``dump``, ``workload``, ``sweep`` or ``csv`` by the look of a first line;
    None if unsure."""
    stripped = raw.strip()
    if not stripped.startswith(b"{"):
        return "csv" if _csv_like(stripped) else None
    try:
        first = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    if type(first) is not dict:
        return None
    if "metrics" in first and "policy" in first and "params" in first:
        return "sweep"
    if "arrival" in first or "prompt_tokens" in first:
        return "workload"
    if "batch" in first or "end" in first or ("line" in first and "op" in first):
        return "dump"
    if "schedcli" in first or "op" in first:
        return "trace"
    return None


def not_a(expected: str, raw: bytes) -> str | None:
    """A one-line message when the first line shows the file is not ``expected``."""
    kind = kind_of_line(raw)
    if kind is None or kind == expected:
        return None
    article = "an" if expected[0] in "aeiou" else "a"
    return f"this is {TAKEN_BY[kind]}, not {article} {expected}"


def sniff_kind(path: str) -> str:
    """``workload``, ``dump``, ``sweep`` or ``trace``: what the file's first line looks like.

    A CSV is an error naming ``convert``; an empty file is an empty trace.
    """
    name = display_name(path)
    with open_binary(path, name) as stream:
        for lineno, raw, _ in numbered_lines(stream, name):
            kind = kind_of_line(raw)
            if kind == "csv":
                raise InputError(name, lineno, f"this is {TAKEN_BY['csv']}")
            return kind or "trace"
    return "trace"


def detect_format(first_line: bytes) -> str | None:
    """The source format its first line (the CSV header, or a JSON object) says it is."""
    from .converters import CONVERTERS  # only convert needs the table: not at start-up

    for name, converter in CONVERTERS.items():
        if converter.detect(first_line):
            return name
    return None
