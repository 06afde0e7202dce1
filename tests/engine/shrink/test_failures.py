"""engine/shrink/failures.py: how a shrink candidate fails (--until), as a signature that a
smaller trace failing the same way shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedcli.engine.shrink.failures import failure_test
from schedcli.model.errors import UsageError

TRACE = Path(__file__).resolve().parents[3] / "traces" / "rotation-fairness.jsonl"


def test_an_unknown_until_or_a_stray_b_param_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="one of check, contract, diff:POLICY"):
        failure_test("nope", None, {})
    with pytest.raises(UsageError, match="--b-param is for --until diff:POLICY"):
        failure_test("check", None, {}, b_params={"x": 1})


def test_a_passing_trace_does_not_fail() -> None:
    data = TRACE.read_bytes()
    assert failure_test("check", None, {})(str(TRACE), data) is None
    assert failure_test("contract", None, {})(str(TRACE), data) is None


def test_check_failures_at_one_step_share_a_signature_whatever_came_after() -> None:
    lines = TRACE.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b"[2, 6]", b"[6]")  # step 1's expect, wrong
    test = failure_test("check", None, {})
    whole = test(str(TRACE), b"".join(lines))
    cut = test(str(TRACE), b"".join(lines[:6]))  # the same failure, the trace cut after it
    assert whole is not None and cut is not None
    assert (whole.line, whole.step) == (5, 1)
    assert whole.signature == cut.signature


def test_diff_fails_where_two_policies_part_ways_at_their_first_step(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    failing = failure_test("diff:fcfs", None, {})(str(path), TRACE.read_bytes())
    assert failing is not None and failing.signature[0] == "diff" and failing.step >= 0
    same = failure_test("diff:decode-first", None, {}, b_params=_params())
    assert same(str(path), TRACE.read_bytes()) is None


def _params() -> dict[str, object]:
    import orjson

    return orjson.loads(TRACE.read_bytes().splitlines()[0])["params"]  # type: ignore[no-any-return]
