"""Shrinking: a failing trace reduced to a small one that fails the same way.

A candidate counts only if it fails with the original's *signature*: the same tids
missing from and extra in the first mismatching batch (and every tid it expects was
queued), the same contract message, the same first divergence of two policies, or the
same exit code of a command. Passes (docs/shrink.md): what follows the failing line goes;
windows from the failing step back (``focus``); the other checks; sessions, whole steps,
get_works and clears (``units``); then lines and the tasks of groups by delta debugging.
Events are only ever dropped (a group may lose tasks), never edited: an ``expect`` stays
as recorded, so a cut cannot fail merely because it lost what its recording said.
"""

from .failures import Failure, Test, failure_test
from .reduce import Shrunk, shrink

__all__ = ["Failure", "Shrunk", "Test", "failure_test", "shrink"]
