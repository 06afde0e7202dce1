"""``schedcli stats``: the step-based metrics a recorded trace, or a dump, allows."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

import orjson

from .errors import InputError
from .metrics import StepMetrics
from .run import open_replay
from .source import display_name, numbered_lines, open_binary
from .task import Task


def _looks_like_dump(path: str) -> bool:
    name = display_name(path)
    with open_binary(path, name) as stream:
        for _, raw, _ in numbered_lines(stream, name):
            try:
                first = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return False  # let the trace reader report it
            return type(first) is dict and (
                "batch" in first or "end" in first or ("op" in first and "line" in first)
            )
    return False


def _dump_stats(path: str) -> dict[str, Any]:
    name = display_name(path)
    metrics = StepMetrics(waits_known=False)
    rejected = 0
    queued: int | None = None
    with ExitStack() as stack:
        stream = stack.enter_context(open_binary(path, name))
        for lineno, raw, _ in numbered_lines(stream, name):
            try:
                record = orjson.loads(raw)
                if type(record) is not dict:
                    raise ValueError("each dump line must be a JSON object")
                if "batch" in record:
                    batch = [
                        Task(e["tid"], e["sid"], e["kind"], int(e["size"])) for e in record["batch"]
                    ]
                    metrics.dispatched(batch, int(record["step"]))
                elif record.get("op") == "submit" and record.get("accepted") is False:
                    rejected += 1
                elif record.get("op") in ("cancel", "clear"):
                    metrics.dropped_count += len(record["dropped"])
                elif "end" in record:
                    queued = int(record["end"]["queued"])
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
                raise InputError(name, lineno, f"not a dump record: {e}") from None
    summary = metrics.summary()
    summary["rejected"] = rejected
    summary["queued"] = queued
    return summary


def stats_of(
    path: str, policy: str | None, params: Mapping[str, object], *, drain: bool = False
) -> tuple[dict[str, Any], str]:
    """Metrics of ``path`` and a title saying what they are of."""
    if path != "-" and _looks_like_dump(path):
        return _dump_stats(path), f"{display_name(path)} (dump)"
    with open_replay(path, policy=policy, params=params) as opened:
        metrics = StepMetrics(opened.policy.token_budget)
        totals = opened.run(lambda _: None, drain=drain, observer=metrics)
        summary = metrics.summary()
        summary["rejected"] = totals.rejected
        summary["queued"] = totals.queued
        return summary, f"{opened.name} under {opened.policy_name}"
