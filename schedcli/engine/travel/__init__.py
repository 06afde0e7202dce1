"""Time travel over a replay for ``schedcli debug``: a server process that replays once and
keeps forked checkpoints (``server.py``), the questions its workers answer (``worker.py``),
and the client that asks them (``client.py``)."""

from .client import END, ServerGone, Travel, Unanswered
from .session import Compare

__all__ = ["END", "Compare", "ServerGone", "Travel", "Unanswered"]
