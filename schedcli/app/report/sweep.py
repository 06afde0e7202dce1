"""``schedcli report`` on sweep results: a Pareto plot and capacity per configuration."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson

from ...formats.sweep_schema import SweepRecord, refusal
from ...model.errors import InputError
from ...streams.source import display_name, numbered_lines, open_binary


def read_sweep(path: str) -> list[dict[str, Any]]:
    name = display_name(path)
    records = []
    with open_binary(path, name) as stream:
        for lineno, raw, _ in numbered_lines(stream, name):
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise InputError(name, lineno, f"not valid JSON: {e}") from None
            if type(record) is not dict:
                raise InputError(name, lineno, "a sweep record is a JSON object")
            try:
                msgspec.convert(record, SweepRecord)  # the declared shape the report reads
            except msgspec.ValidationError as e:
                raise InputError(
                    name, lineno, refusal(e, SweepRecord, "field", json=True)
                ) from None
            records.append(record)
    if not records:
        raise InputError(name, None, "no sweep records: nothing to draw")
    return records


def grid_values(record: dict[str, Any]) -> dict[str, Any]:
    """What a sweep can vary for a point: its parameters and the runner's settings."""
    values = dict(record["params"])
    values["time_scale"] = record.get("time_scale", 1.0)
    chunk = (record.get("metrics") or {}).get("chunk_size")
    if chunk is not None:
        values["chunk_size"] = chunk
    for term, value in (record.get("cost_model") or {}).items():
        values[f"cost_{term}"] = value
    return values


def _varied(records: Sequence[dict[str, Any]]) -> list[str]:
    """The grid keys that take more than one value across the sweep."""
    values: dict[str, set[str]] = {}
    for r in records:
        for k, v in grid_values(r).items():
            values.setdefault(k, set()).add(repr(v))
    return [k for k, seen in values.items() if len(seen) > 1]


def label(record: dict[str, Any], varied: Sequence[str]) -> str:
    """The point as its policy and its grid values (those that vary across the sweep)."""
    values = grid_values(record)
    params = " ".join(f"{k}={values[k]}" for k in varied if k in values)
    return f"{record['policy']} {params}".strip()


def rejected(record: dict[str, Any]) -> int:
    """Requests (or groups, for a trace) the point's policy rejected."""
    value = (record.get("metrics") or {}).get("rejected")
    return value if isinstance(value, int) else 0


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other beats on both: more throughput and a lower TTFT p99."""
    front = []
    best_ttft = float("inf")
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
        if y < best_ttft:
            front.append((x, y))
            best_ttft = y
    return sorted(front)


def sweep_figures(plt: Any, records: list[dict[str, Any]], svg: Any, figure: Any) -> list[str]:
    colors = ("#3b6ea5", "#d9822b", "#3a9e6e", "#b8475a", "#7b5ea7", "#8c7a3c")
    varied = _varied(records)
    by_policy: dict[str, list[tuple[float, float, dict[str, Any]]]] = {}
    for r in records:
        m = r["metrics"]
        x = m.get("throughput_output_tokens_per_s")
        y = (m.get("ttft") or {}).get("p99")
        if x is not None and y is not None:
            by_policy.setdefault(r["policy"], []).append((x, y * 1000, r))
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, (policy, pts) in enumerate(by_policy.items()):
        color = colors[i % len(colors)]
        served = [(x, y) for x, y, r in pts if not rejected(r)]
        short = [(x, y) for x, y, r in pts if rejected(r)]
        ax.scatter([p[0] for p in served], [p[1] for p in served], color=color, label=policy, s=18)
        if short:  # their latencies cover only the requests they did not turn away
            ax.scatter([p[0] for p in short], [p[1] for p in short], color=color, marker="x", s=30)
        front = _pareto(served)
        ax.plot([p[0] for p in front], [p[1] for p in front], color=color, linewidth=1)
        for x, y, r in pts:
            text = label(r, varied).removeprefix(policy).strip()
            if rejected(r):
                text = f"{text} ({rejected(r)} rejected)".strip()
            if text:
                ax.annotate(text, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("TTFT p99 (ms)")
    if by_policy:
        ax.legend(loc="upper left", frameon=False)
    else:
        ax.text(
            0.5,
            0.5,
            "no point has both a throughput and a TTFT p99",
            ha="center",
            transform=ax.transAxes,
        )
    figures = [
        figure(
            "pareto",
            "Throughput against TTFT p99, a point per configuration, labelled with its grid "
            "values; the lines join each policy's Pareto front (nothing of it has both more "
            "throughput and a lower tail). A cross is a point that rejected requests: its "
            "latencies are of the requests it finished, and it is left off the front.",
            svg(plt, fig),
        )
    ]
    capacity = [(r, r.get("capacity") or {}) for r in records]
    if any(c.get("rate_multiplier") is not None for _, c in capacity):
        varied = _varied(records)
        labels = [f"{display_name(r['workload'])}: {label(r, varied)}" for r, _ in capacity]
        values = [c.get("rate_multiplier") or 0.0 for _, c in capacity]
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1))
        ax.barh(range(len(labels)), values, color=colors[0])
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.set_xlabel("highest arrival rate meeting the goodput target (x the workload's)")
        figures.append(
            figure(
                "capacity",
                "Capacity per configuration: how far the arrivals compress before fewer than "
                "the goodput target of requests meet both SLOs.",
                svg(plt, fig),
            )
        )
    return figures


def sweep_summary(records: list[dict[str, Any]]) -> str:
    varied = _varied(records)
    rows = []
    for r in records:
        m = r["metrics"]
        cap = (r.get("capacity") or {}).get("rate_multiplier")
        finished = m.get("finished")
        of = f" (of {finished} finished)" if rejected(r) and finished is not None else ""
        cells = [
            display_name(r["workload"]),
            label(r, varied),
            "n/a" if finished is None else f"{finished} of {m.get('requests')}",
            f"{rejected(r)} !" if rejected(r) else "0",
            number(m.get("throughput_output_tokens_per_s")),
            number((m.get("ttft") or {}).get("p99"), 1000) + of,
            number((m.get("tpot") or {}).get("p99"), 1000) + of,
            number(cap, digits=2),
        ]
        mark = ' class="rejected"' if rejected(r) else ""
        rows.append(f"<tr{mark}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "workload",
            "configuration",
            "finished",
            "rejected",
            "tok/s",
            "TTFT p99 ms",
            "TPOT p99 ms",
            "capacity",
        )
    )
    return (
        f'<table id="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


_NUMBER = re.compile(r"\d+")


def group_reasons(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Rejection reasons that differ only in numbers, as one line each: a number that is the
    same in every reason of the group is kept, one that varies (a chunk's size) is ``N``.
    So a note says "prefill chunk of N tokens exceeds max_prefill_chunk_size 256" once, not
    once per chunk size."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for reason, n in counts.items():
        groups.setdefault(_NUMBER.sub("N", reason), []).append((reason, n))
    lines = []
    for template, members in groups.items():
        numbers = [_NUMBER.findall(reason) for reason, _ in members]
        parts = template.split("N")
        out = [parts[0]]
        for i, part in enumerate(parts[1:]):
            values = {found[i] for found in numbers}
            out.append(values.pop() if len(values) == 1 else "N")
            out.append(part)
        lines.append(("".join(out), sum(n for _, n in members)))
    return lines


def number(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    """A metric for a table cell: scaled (seconds to ms, say), or n/a when missing."""
    return "n/a" if value is None else f"{value * scale:.{digits}f}"
