"""The sides of a debugging session, at either level: the replay being debugged (side 0)
and, with ``--against``, the same trace under a second policy (side 1). A side is fed the
trace one input at a time and hands each record to the session; at the step a worker asks
about (``want``) it keeps the queue its policy saw and the policy's reasons there. Each
level makes its own (``OpenReplay.side``: ``levels/task/side.py``,
``levels/request/side.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..levels import Entry, Follow, OpenReplay, Side, Sink


def inputs(opened: OpenReplay) -> Iterator[tuple[int, Any]]:
    """Each input of the trace with its line, in order, at either level."""
    return opened.inputs()


def side_for(opened: OpenReplay, index: int, sink: Sink, check: bool) -> Side:
    return opened.side(index, sink, check)


__all__ = ["Entry", "Follow", "Side", "Sink", "inputs", "side_for"]
