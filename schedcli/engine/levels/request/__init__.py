"""The request level: a trace of arrivals, aborts and steps, replayed through a
``RequestScheduler`` (vLLM's) by ``engine/requests/replay.py``'s ``RequestReplayer``
(``opened.OpenRequestTrace``). Its modules load when a request-level trace is opened."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, cast

from ....formats.trace import Header, TraceReader
from ....model.errors import InputError, StepMismatch, UsageError
from ....model.task import Id
from .. import CheckEvent, Collect, Difference, Failure, OpenReplay, Partial, choose_policy

if TYPE_CHECKING:
    from ....model.requests import RequestScheduler


class RequestLevel:
    name: Final = "request"
    preempts = True  # a step may preempt what runs
    reasons_replayable = False  # kept as a difference is found, or not derived

    @contextmanager
    def open(
        self,
        reader: TraceReader,
        header: Header | None,
        name: str,
        policy: str | None,
        params: Mapping[str, object],
        note: Callable[[str], None],
        follow: bool,
        allow_incomplete: bool,
    ) -> Iterator[OpenReplay]:
        if follow:
            raise UsageError(
                f"{name}: --follow reads task-level traces as they grow; a request-level "
                "trace is replayed once it is written (drop --follow)"
            )
        from .opened import OpenRequestTrace

        built, label, _ = choose_policy(header, name, policy, params, note, self.name)
        try:
            policy_built = cast("RequestScheduler", built)
            yield OpenRequestTrace(reader, policy_built, label, name, allow_incomplete, self)
        finally:
            built.close()

    def read_all(self, reader: TraceReader) -> None:
        from ....formats.requests import RequestReader

        for _ in RequestReader(reader):
            pass

    def events(
        self, reader: TraceReader, collect: Collect, unfit: CheckEvent | None
    ) -> tuple[int, Partial]:
        """The valid events; and the partial marker."""
        from ....formats.requests import RequestReader

        events = RequestReader(reader, collect)
        return sum(1 for _ in events), events.partial

    def interface_check(
        self,
        header: Header | None,
        trace_name: str,
        policy: str | None,
        params: Mapping[str, object],
    ) -> CheckEvent | None:
        return None  # a request-level policy takes whatever a trace can say

    def no_life(self, path: str, tid: Id | None, sid: Id | None) -> InputError:
        return InputError(path, None, f"no arrive in this trace holds request {sid!r}")

    def difference(self, error: StepMismatch) -> Difference:
        from .check import difference

        return difference(error.mismatch)

    def failure(self, error: StepMismatch) -> Failure | None:
        from .check import failure

        return failure(error.mismatch)


LEVEL = RequestLevel()

__all__ = ["LEVEL", "RequestLevel"]
