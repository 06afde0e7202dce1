"""Stand-ins the tests drive the engine with: a request-level policy
(``tests.doubles:ToyRequests``)."""

from tests.doubles.requests import Preempts, Thrashes, ToyRequests

__all__ = ["Preempts", "Thrashes", "ToyRequests"]
