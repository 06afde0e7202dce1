"""Public request traces to workloads (request level; see the workload format in trace-format.md).

Each reader turns one source format into rows (line, arrival, prompt, output, meta);
one pipeline then rebases time, applies the window, scale and limit, and writes.
Everything streams: memory does not grow with the file.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from ..model.errors import InputError, UsageError
from ..model.limits import INT_MAX, MAX_REQUEST_TOKENS, BoundError, depth_within
from .source import display_name, numbered_lines, open_binary
from .writer import JsonlWriter


class RowError(Exception):
    """A bad row; the pipeline adds the file and line."""


@dataclass
class Row:
    line: int
    arrival: float | None  # seconds, source clock; None for length-only sources
    prompt: int
    output: int
    meta: dict[str, Any] | None = None


@dataclass
class ConvertOptions:
    limit: int | None = None
    start: float = 0.0
    duration: float | None = None
    time_scale: float = 1.0
    seed: int = 0
    rate: float | None = None
    cv: float | None = None
    skip_bad: bool = False
    keep_failed: bool = False


@dataclass
class ConvertReport:
    format: str
    written: int = 0
    skipped_bad: int = 0
    dropped_failed: int = 0
    before_window: int = 0  # requests that arrived before --start
    window_end_line: int | None = None  # where reading stopped: the first row past the window
    limit_line: int | None = None  # where reading stopped: --limit reached
    prompt_tokens: int = 0
    output_tokens: int = 0
    first_bad: list[str] = field(default_factory=list)


def _int_field(value: str, name: str, minimum: int = 0) -> int:
    text = value.strip()
    try:
        n = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise RowError(f"{name} is not a number: {text!r}") from None
        if not f.is_integer():
            raise RowError(f"{name} is not a whole number: {text!r}") from None
        n = int(f)
    if n < minimum:
        raise RowError(f"{name} must be >= {minimum}, not {n}")
    if n > MAX_REQUEST_TOKENS:
        raise RowError(f"{name} must be at most {MAX_REQUEST_TOKENS:,} tokens, not {n}")
    return n


def _float_field(value: str, name: str) -> float:
    try:
        f = float(value.strip())
    except ValueError:
        raise RowError(f"{name} is not a number: {value.strip()!r}") from None
    if not math.isfinite(f) or f < 0:
        raise RowError(f"{name} must be a finite number >= 0, not {value.strip()}")
    return f


def _csv_rows(
    lines: Iterator[tuple[int, bytes, bool]], name: str
) -> Iterator[tuple[int, list[str]]]:
    for lineno, raw, _ in lines:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(name, lineno, f"invalid UTF-8 at byte {e.start}") from None
        yield lineno, text.split(",")


def _columns(header: list[str], wanted: dict[str, str], name: str, lineno: int) -> dict[str, int]:
    index = {h.strip(): i for i, h in enumerate(header)}
    found = {}
    for key, column in wanted.items():
        if column not in index:
            raise InputError(name, lineno, f"no {column!r} column in the header")
        found[key] = index[column]
    return found


def _azure_ticks(stamp: str) -> int:
    """'2023-11-16 18:15:46.6805900' as 100 ns ticks since an arbitrary epoch (exact)."""
    try:
        date, clock = stamp.strip().split(" ")
        y, mo, d = (int(x) for x in date.split("-"))
        hms, _, frac = clock.partition(".")
        h, mi, s = (int(x) for x in hms.split(":"))
    except ValueError:
        raise RowError(
            f"TIMESTAMP is not 'YYYY-MM-DD HH:MM:SS.fffffff': {stamp.strip()!r}"
        ) from None
    if not frac.isdigit() and frac:
        raise RowError(f"TIMESTAMP fraction is not digits: {stamp.strip()!r}")
    if not (1 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        raise RowError(f"TIMESTAMP is not a real date and time: {stamp.strip()!r}")
    days = _days_from_civil(y, mo, d)
    ticks = int((frac + "0000000")[:7]) if frac else 0
    return ((days * 24 + h) * 60 + mi) * 60 * 10_000_000 + s * 10_000_000 + ticks


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _read_csv(
    lines: Iterator[tuple[int, bytes, bool]],
    name: str,
    columns: dict[str, str],
    make: Callable[[dict[str, str]], tuple[float | None, int, int, dict[str, Any] | None]],
) -> Iterator[Row]:
    """Rows of a CSV source whose header names ``columns``; ``make`` reads one row."""
    rows = _csv_rows(lines, name)
    first = next(rows, None)
    if first is None:
        return
    cols = _columns(first[1], columns, name, first[0])
    for lineno, fields in rows:
        try:
            yield Row(lineno, *make({key: fields[i] for key, i in cols.items()}))
        except IndexError:
            yield _bad(lineno, f"expected {len(first[1])} columns, got {len(fields)}")
        except RowError as e:
            yield _bad(lineno, str(e))


def _bad(lineno: int, message: str) -> Row:
    return Row(lineno, None, 0, 0, {"__error__": message})


def _read_azure(lines: Iterator[tuple[int, bytes, bool]], name: str) -> Iterator[Row]:
    origin: list[int] = []  # the first request's ticks: rebasing in integers stays exact

    def make(f: dict[str, str]) -> tuple[float, int, int, dict[str, Any]]:
        ticks = _azure_ticks(f["t"])
        if not origin:
            origin.append(ticks)
        return (
            (ticks - origin[0]) / 10_000_000,
            _int_field(f["p"], "ContextTokens", 1),
            _int_field(f["o"], "GeneratedTokens", 1),
            {"timestamp": f["t"].strip()},
        )

    columns = {"t": "TIMESTAMP", "p": "ContextTokens", "o": "GeneratedTokens"}
    return _read_csv(lines, name, columns, make)


def _read_vidur(lines: Iterator[tuple[int, bytes, bool]], name: str) -> Iterator[Row]:
    def make(f: dict[str, str]) -> tuple[float, int, int, None]:
        return (
            _float_field(f["t"], "arrived_at"),
            _int_field(f["p"], "num_prefill_tokens", 1),
            _int_field(f["o"], "num_decode_tokens", 1),
            None,
        )

    columns = {"t": "arrived_at", "p": "num_prefill_tokens", "o": "num_decode_tokens"}
    return _read_csv(lines, name, columns, make)


def _read_lengths(lines: Iterator[tuple[int, bytes, bool]], name: str) -> Iterator[Row]:
    def make(f: dict[str, str]) -> tuple[None, int, int, None]:
        return (
            None,
            _int_field(f["p"], "num_prefill_tokens", 1),
            _int_field(f["o"], "num_decode_tokens", 1),
            None,
        )

    columns = {"p": "num_prefill_tokens", "o": "num_decode_tokens"}
    return _read_csv(lines, name, columns, make)


def _read_burstgpt(lines: Iterator[tuple[int, bytes, bool]], name: str) -> Iterator[Row]:
    def make(f: dict[str, str]) -> tuple[float, int, int, dict[str, Any]]:
        return (
            _float_field(f["t"], "Timestamp"),
            _int_field(f["p"], "Request tokens", 1),
            _int_field(f["o"], "Response tokens", 0),  # 0: a failed request
            {"model": f["m"].strip(), "log_type": f["k"].strip()},
        )

    columns = {
        "t": "Timestamp",
        "m": "Model",
        "p": "Request tokens",
        "o": "Response tokens",
        "k": "Log Type",
    }
    return _read_csv(lines, name, columns, make)


def _read_mooncake(lines: Iterator[tuple[int, bytes, bool]], name: str) -> Iterator[Row]:
    for lineno, raw, _ in lines:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            yield _bad(lineno, f"not valid JSON: {e}")
            continue
        if type(obj) is not dict:
            yield _bad(lineno, "each line must be a JSON object")
            continue
        try:
            ts = obj.get("timestamp")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts <= INT_MAX:
                raise RowError(f"timestamp must be a number of milliseconds >= 0, not {ts!r}")
            p = obj.get("input_length")
            o = obj.get("output_length")
            if type(p) is not int or not 1 <= p <= MAX_REQUEST_TOKENS:
                raise RowError(
                    f"input_length must be an integer from 1 to {MAX_REQUEST_TOKENS:,}, not {p!r}"
                )
            if type(o) is not int or not 1 <= o <= MAX_REQUEST_TOKENS:
                raise RowError(
                    f"output_length must be an integer from 1 to {MAX_REQUEST_TOKENS:,}, not {o!r}"
                )
            meta = {"hash_ids": obj["hash_ids"]} if "hash_ids" in obj else None
            if meta is not None:
                try:
                    depth_within(meta, "hash_ids")
                except BoundError as e:
                    raise RowError(str(e)) from None
            yield Row(lineno, ts / 1000.0, p, o, meta)
        except RowError as e:
            yield _bad(lineno, str(e))


READERS: dict[str, Callable[[Iterator[tuple[int, bytes, bool]], str], Iterator[Row]]] = {
    "azure": _read_azure,
    "mooncake": _read_mooncake,
    "vidur": _read_vidur,
    "lengths": _read_lengths,
    "burstgpt": _read_burstgpt,
}


def detect_format(first_line: bytes) -> str | None:
    """The source format from its first line (the CSV header, or a JSON object)."""
    text = first_line.decode("utf-8", errors="replace").strip()
    if text.startswith("{"):
        try:
            obj = orjson.loads(first_line)
        except orjson.JSONDecodeError:
            return None
        if isinstance(obj, dict) and {"timestamp", "input_length", "output_length"} <= obj.keys():
            return "mooncake"
        return None
    columns = {c.strip() for c in text.split(",")}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= columns:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens", "Log Type"} <= columns:
        return "burstgpt"
    if {"arrived_at", "num_prefill_tokens", "num_decode_tokens"} <= columns:
        return "vidur"
    if {"num_prefill_tokens", "num_decode_tokens"} <= columns:
        return "lengths"
    return None


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


def convert(
    fmt: str, src: str, out: IO[bytes], options: ConvertOptions, warn: Callable[[str], None]
) -> ConvertReport:
    """Convert ``src`` (format ``fmt`` or ``auto``) into workload lines on ``out``."""
    name = display_name(src)
    if fmt != "auto" and fmt not in READERS:
        raise UsageError(f"unknown format {fmt!r}; expected auto or one of {', '.join(READERS)}")
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
        arrivals: _Arrivals | None = None
        _options_apply(fmt, options)
        if fmt == "lengths":
            if options.rate is None or options.rate <= 0:
                raise UsageError("format 'lengths' has no arrival times: give --rate REQ_PER_S")
            if options.cv is not None and options.cv <= 0:
                raise UsageError("--cv must be positive")
            arrivals = _Arrivals(options.rate, options.cv, options.seed)
        _write_rows(READERS[fmt](chained(), name), out, options, report, arrivals, name, warn)
    if report.written == 0:
        raise InputError(
            name, None, f"no requests selected ({_selection(options)}): nothing to write"
        )
    return report


def _options_apply(fmt: str, options: ConvertOptions) -> None:
    """An option that does not apply to the format is a usage error, never ignored."""
    if fmt != "lengths":
        given = [o for o, v in (("--rate", options.rate), ("--cv", options.cv)) if v is not None]
        if given:
            raise UsageError(
                f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to 'lengths' "
                "(no arrival times); "
                f"{fmt} has its own arrivals: shape them with --time-scale"
            )
    if fmt != "burstgpt" and options.keep_failed:
        raise UsageError(f"--keep-failed applies to burstgpt (failed requests); not to {fmt}")


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
    last = 0.0
    sid = 0
    for row in rows:
        meta = row.meta
        if meta is not None and "__error__" in meta:
            if not options.skip_bad:
                raise InputError(name, row.line, meta["__error__"])
            report.skipped_bad += 1
            if len(report.first_bad) < 3:
                report.first_bad.append(f"{name}:{row.line}: {meta['__error__']}")
            continue
        if row.output == 0:  # a failed BurstGPT request
            if not options.keep_failed:
                report.dropped_failed += 1
                continue
            row.output = 1
            meta = {**(meta or {}), "failed": True}
        t = arrivals.next() if arrivals is not None else row.arrival
        assert t is not None
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
        if arrival < last:
            if not options.skip_bad:
                raise InputError(name, row.line, "arrivals go backwards (the file is not sorted)")
            report.skipped_bad += 1
            continue
        last = arrival
        record: dict[str, Any] = {
            "sid": sid,
            "arrival": arrival,
            "prompt_tokens": row.prompt,
            "output_tokens": row.output,
        }
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
