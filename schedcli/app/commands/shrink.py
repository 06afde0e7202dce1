"""``schedcli shrink``: shrink (engine/shrink/), write the result atomically, and say
what was done."""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.console import Console

from ...engine.shrink import shrink
from ...streams.output import atomic_output
from ...streams.source import display_name
from ..views.progress import ProgressBar


def shrink_to_file(
    path: str,
    until: str,
    policy: str | None,
    params: Mapping[str, object],
    output: str,
    max_time: float | None,
    keep_expects: bool,
    err: Console,
    drain: bool = False,
    b_params: Mapping[str, object] | None = None,
) -> None:
    """``schedcli shrink``: shrink, write the result atomically, say what was done. Stopped
    early, the smallest failing trace found so far is written, and a signal then ends the
    run with its exit code."""
    start = time.monotonic()
    detail = "{task.fields[tried]} tried, {task.fields[size]} events"
    bar = ProgressBar(err, "shrinking", None, detail)
    ticker = _Ticker(err, bar.shown)

    def progress(tried: int, size: int) -> None:
        bar.update(None, tried=tried, size=size)
        ticker.tick(tried, size)

    try:
        shrunk = shrink(
            path,
            until,
            policy,
            params,
            max_time=max_time,
            keep_expects=keep_expects,
            progress=progress,
            drain=drain,
            b_params=b_params or {},
        )
    finally:
        bar.stop()
    try:
        with atomic_output(output) as out:
            shrunk.write(out)
    finally:
        shrunk.lines.close()
    took = time.monotonic() - start
    err.print(
        f"shrunk {display_name(path)} from {shrunk.before} lines to {shrunk.count} "
        f"in {took:.1f} s ({shrunk.tests} replays)",
        highlight=False,
        soft_wrap=True,
    )
    if shrunk.abandoned is not None:
        err.print(
            f"note: --max-time ran out while a candidate was being replayed: it was abandoned "
            f"(stopped after {shrunk.abandoned:.1f} s)",
            highlight=False,
        )
    if shrunk.unchecked:
        err.print(
            "note: the final check of the shrunk trace was abandoned at the time limit: it "
            "failed the same way when it was tried, and was not replayed again",
            highlight=False,
        )
    if shrunk.out_of_time or shrunk.interrupted is not None:
        why = "--max-time ran out" if shrunk.out_of_time else "interrupted"
        err.print(
            f"note: {why}: this is the smallest failing trace found so far, not a minimal one",
            highlight=False,
        )
    if shrunk.interrupted is not None:
        raise shrunk.interrupted


class _Ticker:
    """Progress as a line every few seconds where no bar can be shown (a pipe, CI)."""

    def __init__(self, err: Console, bar_shown: bool, every: float = 5.0) -> None:
        self.err = err
        self.on = not bar_shown
        self.every = every
        self.next = time.monotonic()  # the first candidate is said at once

    def tick(self, tried: int, size: int) -> None:
        if self.on and time.monotonic() >= self.next:
            self.next = time.monotonic() + self.every
            self.err.print(f"shrinking: {tried} tried, {size} events", highlight=False)
