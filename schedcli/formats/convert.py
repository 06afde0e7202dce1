"""Public request traces to workloads (request level; see the workload format in trace-format.md).

Each format's converter (``converters/``, one record each) turns its source into rows
(line, arrival, prompt, output, meta); one pipeline then rebases time, applies the window,
scale and limit, and writes. Everything streams: memory does not grow with the file.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable, Iterator
from typing import IO, Any

from ..model.errors import InputError, UsageError
from ..streams.source import display_name, numbered_lines, open_binary
from .converters import converters
from .converters._common import ConvertOptions, ConvertReport, Row
from .writer import JsonlWriter


class _Arrivals:
    """Seeded arrival times for length-only sources: Poisson, or gamma for burstiness."""

    def __init__(self, rate: float, cv: float | None, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rate = rate
        self.cv = cv
        self.t = 0.0
        self.first = True

    def next(self) -> float:
        if self.first:
            self.first = False
            return 0.0
        if self.cv is None or self.cv == 1.0:
            gap = self.rng.expovariate(self.rate)
        else:
            shape = 1.0 / (self.cv * self.cv)
            gap = self.rng.gammavariate(shape, 1.0 / (self.rate * shape))
        self.t += gap
        return self.t


def detect_format(first_line: bytes) -> str | None:
    """The source format its first line (the CSV header, or a JSON object) says it is:
    the first converter whose detector recognises it."""
    for name, converter in converters().items():
        if converter.detect(first_line):
            return name
    return None


def convert(
    fmt: str, src: str, out: IO[bytes], options: ConvertOptions, warn: Callable[[str], None]
) -> ConvertReport:
    """Convert ``src`` (format ``fmt`` or ``auto``) into workload lines on ``out``."""
    name = display_name(src)
    if fmt != "auto" and fmt not in converters():
        known = ", ".join(converters())
        raise UsageError(f"unknown format {fmt!r}; expected auto or one of {known}")
    if options.time_scale <= 0 or not math.isfinite(options.time_scale):
        raise UsageError("--time-scale must be a positive number")
    if options.duration is not None and options.duration <= 0:
        raise UsageError("--duration must be positive")
    if options.start < 0:
        raise UsageError("--start must be >= 0")
    with open_binary(src, name) as stream:
        lines = numbered_lines(stream, name)
        first = next(lines, None)
        if first is None:
            raise InputError(name, None, "the file is empty")
        if fmt == "auto":
            detected = detect_format(first[1])
            if detected is None:
                raise InputError(
                    name, first[0], "cannot tell the format from this first line; name it instead"
                )
            fmt = detected

        def chained() -> Iterator[tuple[int, bytes, bool]]:
            yield first
            yield from lines

        report = ConvertReport(fmt)
        converter = converters()[fmt]
        _options_apply(fmt, converter.options, options)
        arrivals: _Arrivals | None = None
        if "rate" in converter.options:  # a format with no arrival times of its own
            if options.rate is None or options.rate <= 0:
                raise UsageError(f"format {fmt!r} has no arrival times: give --rate REQ_PER_S")
            if options.cv is not None and options.cv <= 0:
                raise UsageError("--cv must be positive")
            arrivals = _Arrivals(options.rate, options.cv, options.seed)
        rows = converter.read(chained(), name, options, report)
        _write_rows(rows, out, options, report, arrivals, name, warn)
    if report.written == 0:
        raise InputError(
            name, None, f"no requests selected ({_selection(options)}): nothing to write"
        )
    return report


def _options_apply(fmt: str, accepted: frozenset[str], options: ConvertOptions) -> None:
    """A format-specific option the format does not accept is a usage error, never ignored."""
    if "rate" not in accepted:
        given = [o for o, v in (("--rate", options.rate), ("--cv", options.cv)) if v is not None]
        if given:
            takers = [c.name for c in converters().values() if "rate" in c.options]
            raise UsageError(
                f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to "
                f"{', '.join(repr(t) for t in takers)} (no arrival times); "
                f"{fmt} has its own arrivals: shape them with --time-scale"
            )
    if "keep_failed" not in accepted and options.keep_failed:
        takers = [c.name for c in converters().values() if "keep_failed" in c.options]
        raise UsageError(
            f"--keep-failed applies to {', '.join(takers)} (failed requests); not to {fmt}"
        )


def _selection(options: ConvertOptions) -> str:
    parts = [f"--start {options.start}"] if options.start else []
    if options.duration is not None:
        parts.append(f"--duration {options.duration}")
    if options.limit is not None:
        parts.append(f"--limit {options.limit}")
    return ", ".join(parts) or "the whole file"


def _write_rows(
    rows: Iterator[Row],
    out: IO[bytes],
    options: ConvertOptions,
    report: ConvertReport,
    arrivals: _Arrivals | None,
    name: str,
    warn: Callable[[str], None],
) -> None:
    write = JsonlWriter(out)  # whole lines only, even if interrupted
    origin: float | None = None
    window_end = options.start + options.duration if options.duration is not None else None
    last: float | None = None  # the latest arrival read, on the source's clock
    sid = 0
    for row in rows:
        meta = row.meta
        if meta is not None and "__error__" in meta:
            _bad_row(name, row.line, meta["__error__"], options, report)
            continue
        t = arrivals.next() if arrivals is not None else row.arrival
        assert t is not None
        # Sorted input only: a row earlier than one before it is never taken for one
        # outside the window (the window is the one asked for, on the source's clock).
        if last is not None and t < last:
            _bad_row(name, row.line, UNSORTED, options, report)
            continue
        last = t
        if origin is None:
            origin = t
        rel = t - origin
        if window_end is not None and rel >= window_end:
            report.window_end_line = row.line  # sorted: every later row is past it too
            break
        if rel < options.start:
            report.before_window += 1
            continue
        arrival = round((rel - options.start) * options.time_scale, 9)
        record: dict[str, Any] = {
            "sid": sid,
            "arrival": arrival,
            "prompt_tokens": row.prompt,
            "output_tokens": row.output,
        }
        if row.cancel_after is not None:
            record["cancel_after"] = round(row.cancel_after * options.time_scale, 9)
        if row.priority:
            record["priority"] = row.priority
        if meta:
            record["meta"] = meta
        write(record)
        sid += 1
        report.written += 1
        report.prompt_tokens += row.prompt
        report.output_tokens += row.output
        if options.limit is not None and report.written >= options.limit:
            report.limit_line = row.line
            break
    if report.skipped_bad:
        warn(f"skipped {report.skipped_bad} bad row(s); first: {'; '.join(report.first_bad)}")
    if report.dropped_failed:
        warn(f"dropped {report.dropped_failed} failed request(s) (0 response tokens)")


UNSORTED = "arrivals go backwards (the file is not sorted)"


def _bad_row(
    name: str, line: int, message: str, options: ConvertOptions, report: ConvertReport
) -> None:
    """A row that cannot be taken: bad input at its line, or skipped and counted."""
    if not options.skip_bad:
        raise InputError(name, line, message)
    report.skipped_bad += 1
    if len(report.first_bad) < 3:
        report.first_bad.append(f"{name}:{line}: {message}")


def to_text(report: ConvertReport) -> str:
    buf = io.StringIO()
    buf.write(
        f"{report.written} requests ({report.format}): {report.prompt_tokens} prompt tokens, "
        f"{report.output_tokens} output tokens"
    )
    if report.before_window:
        buf.write(f"; {report.before_window} before the window (--start)")
    if report.window_end_line is not None:
        buf.write(f"; stopped at the window's end (line {report.window_end_line}), rest not read")
    elif report.limit_line is not None:
        buf.write(f"; stopped at --limit (line {report.limit_line}), rest not read")
    return buf.getvalue()


__all__ = ["ConvertOptions", "ConvertReport", "convert", "detect_format", "to_text"]
