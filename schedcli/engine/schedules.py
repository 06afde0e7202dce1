"""A sweep's schedules compared: each point's schedule digested (``ScheduleDigest``), and
the grid keys whose every value gave one schedule (``changed_nothing``; docs/sweeps.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson


class ScheduleDigest:
    """A schedule's digest: each batch's step and its tasks' ids and sizes, in order (not
    its times: a cost model that moves them and nothing else leaves it alone). Two points
    with one digest dispatched the same batches. An observer of a replay, or a
    simulation's ``on_batch``."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def batch(self, step: int, batch: Sequence[Any]) -> None:
        # orjson tells an id 1 from "1", as the dump does.
        self._sha.update(orjson.dumps([step, [[t.tid, t.size] for t in batch]]) + b"\n")

    def on_batch(self, step: int, start: float, end: float, batch: list[Any], queued: int) -> None:
        self.batch(step, batch)

    def dispatched(self, batch: list[Any], step: int) -> None:
        self.batch(step, batch)

    def accepted(self, tasks: list[Any], step: int) -> None:
        pass

    def dropped(self, tasks: list[Any], step: int) -> None:
        pass

    def rejected(self, tasks: list[Any], step: int, reason: str) -> None:
        pass

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def changed_nothing(
    outcomes: Sequence[Any], keys: Sequence[str]
) -> dict[tuple[str, str], list[str]]:
    """For each (workload, policy) swept (``outcomes``: ``engine.sweep.Outcome``s), the
    grid ``keys`` that changed nothing: the key took at least two values, and with the other
    keys fixed at any of their values, every value of it gave one schedule
    (``schedule_sha256``). It cannot be said, so a key is not
    listed, where the key took one value for that policy (or it lacks the parameter), where
    some value was not tried with the others fixed, or where a point failed or has no digest
    (a record cached before digests were kept)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for o in outcomes:
        groups.setdefault((o.point.workload, o.point.policy), []).append(o)
    found: dict[tuple[str, str], list[str]] = {}
    for group_key, group in groups.items():
        digests = [(o.record or {}).get("schedule_sha256") for o in group]
        if any(d is None for d in digests):
            continue
        settings = [_settings(o.point) for o in group]
        inert = []
        for key in keys:
            if any(key not in s for s in settings):
                continue
            values = {s[key] for s in settings}
            if len(values) < 2:
                continue
            # The other keys' values -> this key's value -> the digest it gave.
            slices: dict[tuple[bytes, ...], dict[bytes, str]] = {}
            for s, digest in zip(settings, digests, strict=True):
                fixed = tuple(s.get(k, b"") for k in keys if k != key)
                slices.setdefault(fixed, {})[s[key]] = str(digest)
            if all(set(by) == values and len(set(by.values())) == 1 for by in slices.values()):
                inert.append(key)
        found[group_key] = inert
    return found


def _settings(point: Any) -> dict[str, bytes]:
    """A point's parameters and run settings, each value as comparable bytes."""
    given: dict[str, Any] = {
        **point.params,
        "time_scale": point.time_scale,
        "chunk_size": point.chunk_size,
        **{f"cost_{k}": v for k, v in point.cost.items()},
    }
    return {k: orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for k, v in given.items()}
