"""engine/metrics.py: a simulation's per-request figures in memory that does not grow with
the run, exact where they can be and within their stated bound where not."""

from __future__ import annotations

import math
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.engine.cost import CostModel
from schedcli.engine.metrics import BUCKET_BITS, Distribution, percentile
from schedcli.engine.results import Live, SimResult
from schedcli.formats.workload import Request

latency = st.one_of(
    st.floats(0, 1e4, allow_nan=False, allow_infinity=False),
    st.integers(0, 20_000).map(float),  # steps: many ties
    st.sampled_from([0.0, 0.005, 0.25, 1.0]),
)


def _exact(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    return {name: percentile(ordered, q) for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}


@settings(max_examples=200, deadline=None)
@given(st.lists(latency, max_size=60))
def test_figures_are_those_of_the_sorted_values_while_the_count_is_small(
    values: list[float],
) -> None:
    d = Distribution()
    for x in values:
        d.add(x)
    s = d.summary()
    ordered = sorted(values)
    assert {k: s[k] for k in ("p50", "p90", "p99")} == _exact(values)
    assert s["mean"] == (sum(ordered) / len(ordered) if ordered else None)
    assert s["count"] == len(values) and "approximate" not in s


@settings(max_examples=200, deadline=None)
@given(st.lists(latency, min_size=1, max_size=300), st.integers(0, 40))
def test_past_the_exact_count_a_figure_is_exact_or_said_to_be_an_estimate_within_its_bound(
    values: list[float], limit: int
) -> None:
    d = Distribution(exact_values=limit)
    for x in values:
        d.add(x)
    s = d.summary()
    assert s["count"] == len(values)
    if len(values) > limit:  # bucketed: the sum correctly rounded
        assert s["mean"] == math.fsum(values) / len(values)
    exact = _exact(values)
    approximate = s.get("approximate", [])
    for name, want in exact.items():
        assert want is not None
        if name in approximate:
            assert abs(s[name] - want) <= want * 2.0**-BUCKET_BITS * (1 + 1e-9)
        else:
            assert s[name] == want, name
    if approximate:
        assert s["relative_error_below"] == 2.0**-BUCKET_BITS


def _finish(result: SimResult, i: int) -> None:
    live = Live(Request(i, i * 0.001, 10, 5), i)
    live.produced = 5
    live.first_token, live.first_token_step = i * 0.001 + 0.01 + (i % 977) * 1e-6, i + 3
    live.last_token, live.last_token_step = live.first_token + 0.04 + (i % 613) * 1e-7, i + 9
    result.finish(live)


def test_a_simulation_result_holds_no_more_memory_for_twice_the_requests() -> None:
    result = SimResult("p", {}, CostModel(), 256)
    for i in range(100_000):  # past the exact count, every octave already seen
        _finish(result, i)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000, 200_000):
            _finish(result, i)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, grown  # a list of every latency grows by some 16 MB
    assert result.summary()["e2e"]["count"] == 200_000
