"""Shrinking: a failing trace reduced to a small one that fails the same way.

Delta debugging (ddmin) over the trace's events, then over the tasks of each group. A
candidate counts only if it fails with the original's *signature*: the same tids missing
from and extra in the first mismatching batch (and every tid it expects was queued), the
same contract message, the same first divergence of two policies, or the same exit code
of a command. Events are only ever dropped, never edited: an ``expect`` stays as recorded,
so a cut cannot fail merely because it lost what its recording said. A failure that names
its line (a check or a contract break) first cuts everything after that line.
"""

from .failures import Failure, Test, failure_test
from .reduce import Shrunk, shrink

__all__ = ["Failure", "Shrunk", "Test", "failure_test", "shrink"]
