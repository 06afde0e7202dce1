"""engine/requests/simulate.py in this process: a request-level policy run on a workload
under the cost model, as ``simulate`` runs one (tests/commands/test_simulate.py: the
command)."""

from __future__ import annotations

import pytest

from schedcli.engine.cost import CostModel
from schedcli.engine.requests.preemption import PreemptionTally
from schedcli.engine.requests.simulate import simulate_requests
from schedcli.engine.results import SimResult
from schedcli.formats.workload import Request
from schedcli.model.errors import SchedcliError
from tests.doubles.requests import ToyRequests

WORKLOAD = [
    Request("a", 0.0, 40, 3),
    Request("b", 0.001, 10, 2),
    Request("c", 0.5, 8, 1, cancel_after=0.0),  # its client gives up as it arrives
]


def _run(**given: object) -> SimResult:
    policy = ToyRequests(max_num_batched_tokens=16, max_num_seqs=2)
    return simulate_requests(
        WORKLOAD, policy, policy_name="toy-requests", params={}, cost=CostModel(), **given
    )  # type: ignore[arg-type]


def test_every_request_is_served_or_given_up_and_counted_once() -> None:
    summary = _run().summary()
    assert summary["finished"] + summary["cancelled"] == len(WORKLOAD)
    assert summary["finished"] >= 2


def test_the_same_workload_and_policy_give_the_same_result() -> None:
    assert _run().summary() == _run().summary()


def test_each_step_is_heard_with_its_time_and_batch() -> None:
    heard: list[tuple[int, float, float]] = []
    _run(on_batch=lambda step, start, end, batch, tokens: heard.append((step, start, end)))
    steps = [s for s, _, _ in heard]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert all(start < end for _, start, end in heard)


def test_preemption_costs_are_tallied_when_asked() -> None:
    tally = PreemptionTally()
    _run(preemption=tally)
    assert tally.summary()["preemptions"] == 0  # the toy never preempts
    assert tally.summary()["computed_tokens"] > 0


def test_a_policy_that_raises_is_reported_at_the_call_it_raised_in() -> None:
    class Raises(ToyRequests):
        def add(self, arrival: object) -> str | None:
            raise RuntimeError("boom")

    with pytest.raises(SchedcliError, match=r"raised in add at step 0 .*RuntimeError: boom"):
        simulate_requests(WORKLOAD, Raises(), policy_name="raises", params={}, cost=CostModel())
