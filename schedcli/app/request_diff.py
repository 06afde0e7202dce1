"""``diff`` of a request-level trace: replayed under two configurations in lockstep."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from ..engine.metrics import StepMetrics
from ..engine.request_replay import RequestReplayer, policy_for_request_trace, refuse_partial
from ..formats.dump import batch_tasks
from ..formats.requests import RequestReader
from ..formats.trace import open_trace
from ..model.records import Record
from ..policies.registry import config_label
from .diff import Aligner, Config, DiffResult


def diff_request_trace(
    path: str, a: Config, b: Config, *, drain: bool = False, allow_incomplete: bool = False
) -> DiffResult:
    """Both sides fed each event in turn, their dumps compared step by step (the same
    ``Aligner`` as every diff), each side's reasons kept at the first difference."""
    with ExitStack() as stack:
        reader = stack.enter_context(open_trace(path))
        assert reader.header is not None
        sides = []
        for config in (a, b):
            params = {k: str(v) for k, v in config.params.items()}
            built, label = policy_for_request_trace(
                reader.header, reader.name, config.policy, params
            )
            stack.callback(built.close)
            sides.append((built, label))
        (pa, la), (pb, lb) = sides
        result = DiffResult(
            (config_label(la, pa.params()), config_label(lb, pb.params())),
            (pa.params(), pb.params()),
        )
        aligner = Aligner(result)
        metrics = (
            StepMetrics(pa.token_budget, waits_known=False),
            StepMetrics(pb.token_budget, waits_known=False),
        )

        def sink(side: str, measure: StepMetrics) -> Any:
            emit = aligner.sink(side)

            def record(r: Record) -> None:
                if "batch" in r:
                    measure.dispatched(batch_tasks(r), r["step"])
                emit(r)

            return record

        one = RequestReplayer(pa, sink("a", metrics[0]), policy_name=la, drain=drain)
        two = RequestReplayer(pb, sink("b", metrics[1]), policy_name=lb, drain=drain)

        def reasons_now(step: int) -> None:
            first = result.first
            if first is not None and one.last_batch_step == step == two.last_batch_step:
                first.left = (pa.left_behind(), pb.left_behind())

        aligner.on_first = reasons_now
        events = RequestReader(reader)
        for line, event in events:
            one.feed(line, event)
            two.feed(line, event)
            aligner.settle()
        refuse_partial(events, allow_incomplete)
        for side in (one, two):
            if side.drain or side.step_events == 0:
                side.drain_all()
            side.finish()
        aligner.settle(final=True)
        result.summaries = (metrics[0].summary(), metrics[1].summary())
        return result
