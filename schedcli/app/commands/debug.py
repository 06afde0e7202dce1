"""``schedcli debug``: the step debugger. The trace is opened by the time machine's server
(``engine/travel``) and checked before the screen opens; then the app (``app/debug``)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...engine.travel import Compare, Travel
from ...engine.travel.verdict import verdict as judged
from ...model.errors import SchedcliError, UsageError
from ...streams.interrupt import Stopped
from ..usage import worded

if TYPE_CHECKING:
    from textual.app import App

# How long the first screen waits for the whole trace to be indexed, so that a bad trace
# is the same exit 2 as replay's before the screen opens. A longer trace opens at once and
# goes on indexing behind it (its problems are said on the screen and at the exit).
SETTLE_SECONDS = 1.5


@dataclass
class DebugRequest:
    trace: str
    policy: str | None = None
    params: Mapping[str, object] = field(default_factory=dict)
    compare: Compare = field(default_factory=Compare)
    allow_incomplete: bool = False
    no_color: bool = False
    every: int = 1000


class Said(SchedcliError):
    """A stop the replay's process reported, said as it was (its exit code kept)."""

    located = True

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


def open_debug(req: DebugRequest) -> Travel:
    """The server started, the trace opened and its first second indexed; bad input is
    raised here, before any screen."""
    if req.trace == "-":
        raise UsageError("debug reads a file, not stdin: it goes back by replaying parts again")
    chosen = [req.compare.check, req.compare.golden is not None, req.compare.against is not None]
    if sum(chosen) > 1:
        raise UsageError("compare with one thing: --check, --golden or --against")
    for path in (req.trace, req.compare.golden):
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"{path}: no such file")
    travel = Travel(
        req.trace,
        policy=req.policy,
        params=req.params,
        compare=req.compare,
        every=req.every,
        allow_incomplete=req.allow_incomplete,
    )
    try:
        travel.wait("hello")
        if travel.failed is not None:
            raise Said(travel.failed["message"], travel.failed["exit"])
        if travel.hello is None:
            raise Said(f"the replay's process ended: {travel.messages().strip()}", 4)
        travel.wait("indexed", SETTLE_SECONDS)
        ending = (travel.indexed or {}).get("ending")
        if ending is not None and ending["exit"] not in (3,):
            raise Said(ending["message"], ending["exit"])
    except BaseException:
        travel.close()
        raise
    return travel


def debug_command(req: DebugRequest) -> int:
    """``schedcli debug``: the app until the user quits; then what the replay found, in one
    line on stderr, and its exit code (0 as replay's, 1 a divergence, 2 bad input, 3 a
    broken contract); no verdict if it was not indexed to its end."""
    travel = open_debug(req)
    try:
        if req.no_color:
            os.environ["NO_COLOR"] = "1"
        try:
            from ..debug.screen import DebugApp
        except ModuleNotFoundError as e:
            if e.name != "textual":
                raise
            raise UsageError(
                "schedcli debug draws with Textual, an extra: pip install 'schedcli[debug]'"
            ) from None

        app = DebugApp(
            travel, req.trace, req.policy, req.params, allow_incomplete=req.allow_incomplete
        )
        stopped = _run_until_stopped(app)
        if stopped is not None:
            raise Stopped(stopped)
        return verdict(travel, req.compare)
    finally:
        travel.close()


def _run_until_stopped(app: App[None]) -> int | None:
    """The app run; SIGINT or SIGTERM make it exit as ``q`` does (the terminal restored),
    and the signal is returned, for the caller's exit code (130, 143)."""
    stopped: list[int] = []

    def on_signal(signum: int, _: object) -> None:
        stopped.append(signum)
        app.exit()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        app.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return stopped[0] if stopped else None


def verdict(travel: Travel, compare: Compare) -> int:
    """What the replay found, said on stderr, and its exit code: ``engine.travel.verdict``
    of the index's end (the comparison of every record, as replay --golden and diff)."""
    notes = travel.messages().strip()
    if notes:
        print(notes, file=sys.stderr)
    found = judged(travel.indexed, compare.label, travel.steps)
    if found.said is not None:
        print(worded(found.said), file=sys.stderr)
    return found.exit
