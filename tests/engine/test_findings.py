"""engine/findings.py: each kind at the step its example names, none on a calm trace, and
every finding's step and ids as ``explain --step`` sees that step (the engine service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.engine.explain import explain_step
from schedcli.engine.findings import (
    KINDS,
    CountingFindings,
    Detectors,
    Item,
    StepFacts,
    Thresholds,
    counts,
    find,
)
from schedcli.engine.run import replay_metrics
from schedcli.model.task import PREFILL, Task, id_key
from tests.helpers import REQUEST_HEADER, ROOT, write_lines

EXAMPLES = ROOT / "docs" / "examples" / "findings"


def test_each_kind_is_found_on_its_example_at_the_step_it_names() -> None:
    expected = {
        "priority_inversion": (0, ("c",), ("a",)),
        "hol_blocking": (0, ("b", "c"), ("a",)),
        "starvation": (16, ("L0",), ("s16a", "s16b")),
        "decode_gap": (11, (), ("a1",)),
    }
    for kind, (step, waiting, ran) in expected.items():
        found, _ = find(str(EXAMPLES / f"{kind}.jsonl"))
        assert [(f.kind, f.step, f.waiting, f.ran) for f in found] == [
            (kind, step, waiting, ran)
        ], kind


def test_thresholds_move_what_is_a_finding() -> None:
    found, _ = find(str(EXAMPLES / "starvation.jsonl"), thresholds=Thresholds(starve_after=3))
    assert [(f.kind, f.step) for f in found] == [("starvation", 3)]
    found, _ = find(str(EXAMPLES / "hol_blocking.jsonl"), thresholds=Thresholds(hol_unused=80))
    assert found == []
    found, _ = find(str(EXAMPLES / "decode_gap.jsonl"), thresholds=Thresholds(gap_after=11))
    assert found == []


def _item(rid: str, order: int) -> Item:
    return Item(Task(rid, rid, PREFILL, 8), 0, order, 1)


def test_a_request_preempted_n_times_is_thrash_with_the_tokens_it_had_computed() -> None:
    detectors = Detectors(Thresholds(thrash_after=2))
    r, other = _item("r", 1), _item("o", 2)
    for step, computed in ((3, 40), (7, 16)):
        r.computed = computed
        detectors.step(StepFacts(step, 64, 1, [r, other], [(other, 1)], {}, [r], []))
        r.preemptions.append(r.computed)  # as the adapter does after the step
    r.computed = 8
    detectors.step(StepFacts(9, 64, 1, [r, other], [(other, 1)], {}, [r], []))
    (f,) = detectors.finish()
    assert (f.kind, f.step, f.waiting) == ("preemption_thrash", 7, ("r",))
    assert f.numbers["preemptions"] == 3 and f.numbers["computed"] == [40, 16, 8]


def test_a_running_request_skipped_with_budget_and_blocks_free_is_found_once_a_run() -> None:
    detectors = Detectors(Thresholds())
    r, other = _item("r", 1), _item("o", 2)
    r.running = other.running = True
    r.computed = 8
    r.known = 9  # a token to compute
    for step in (4, 5):
        detectors.step(StepFacts(step, 64, 1, [r, other], [(other, 1)], {}, [], []))
    # Blocks short (a preemption): not a skip.
    detectors.step(StepFacts(6, 64, 1, [r, other], [(other, 1)], {}, [other], []))
    (f,) = detectors.finish()
    assert (f.kind, f.step, f.waiting, f.ran) == ("skipped_running", 4, ("r",), ("o",))
    assert f.numbers["steps"] == 2


# --- generated traces: calm ones have none; every finding agrees with explain --step ---


@st.composite
def task_traces(draw: st.DrawFn, calm: bool) -> list[dict[str, Any]]:
    budget = 1000 if calm else draw(st.integers(5, 12))
    header = {
        "schedcli": 1,
        "policy": "fcfs" if calm else draw(st.sampled_from(["fcfs", "priority", "sjf"])),
        "params": {"max_batch_tokens": budget, "max_prefill_chunk_size": 4},
    }
    if header["policy"] == "sjf":
        header["params"] = {"max_batch_tokens": budget, "max_decode_sequences": budget - 4,
                            "max_prefill_chunk_size": 4}  # fmt: skip
    lines: list[dict[str, Any]] = [header]
    tid = 0
    for _ in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(0, 3))):
            tid += 1
            sid = draw(st.integers(0, 3)) if not calm else tid
            task = {"op": "submit", "tid": tid, "sid": sid, "kind": "prefill",
                    "size": draw(st.integers(1, 4))}  # fmt: skip
            if not calm:
                task["priority"] = draw(st.integers(0, 3))
            lines.append(task)
        lines.append({"op": "get_work"})
    lines += [{"op": "get_work"}] * (0 if not calm else 2)
    return lines


@st.composite
def request_traces(draw: st.DrawFn, calm: bool) -> list[dict[str, Any]]:
    tokens, seqs = (10_000, 1000) if calm else (draw(st.integers(2, 16)), draw(st.integers(1, 3)))
    params = {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}
    lines: list[dict[str, Any]] = [{**REQUEST_HEADER, "params": params}]
    rid = 0
    for _ in range(draw(st.integers(1, 10))):
        for _ in range(draw(st.integers(0, 2))):
            rid += 1
            arrive = {"op": "arrive", "rid": f"r{rid}", "prompt_tokens": draw(st.integers(1, 8)),
                      "max_tokens": draw(st.integers(1, 4))}  # fmt: skip
            if not calm:
                arrive["priority"] = draw(st.integers(0, 3))
            lines.append(arrive)
        lines.append({"op": "step"})
    return lines


def _write(tmp: Path, lines: list[dict[str, Any]], name: str) -> Path:
    return write_lines(tmp / name, lines)


SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(st.data())
def test_a_calm_trace_has_no_findings_at_either_level(tmp_path: Path, data: st.DataObject) -> None:
    for name, strategy in (("t.jsonl", task_traces(True)), ("r.jsonl", request_traces(True))):
        path = _write(tmp_path, data.draw(strategy), name)
        found, _ = find(str(path), thresholds=Thresholds(gap_after=1))
        assert found == [], (name, found)


@SETTINGS
@given(st.data())
def test_every_finding_agrees_with_explain_step(tmp_path: Path, data: st.DataObject) -> None:
    """The waiting ones were queued at the step and left out of its batch; the others ran."""
    loose = Thresholds(starve_after=1, hol_unused=1, thrash_after=1, gap_after=1)
    for name, strategy in (("t.jsonl", task_traces(False)), ("r.jsonl", request_traces(False))):
        path = _write(tmp_path, data.draw(strategy), name)
        found, _ = find(str(path), thresholds=loose)
        for f in found:
            assert f.kind in KINDS
            view = explain_step(str(path), f.step)
            queued = {id_key(q.task.tid) for q in view.queue}
            batch = {id_key(t.tid) for t in view.batch}
            for who in f.waiting:
                assert id_key(who) in queued and id_key(who) not in batch, (name, f)
            for who in f.ran:
                assert id_key(who) in batch, (name, f)


@SETTINGS
@given(st.data())
def test_findings_counted_alongside_the_metrics_are_those_of_their_own_replay(
    tmp_path: Path, data: st.DataObject
) -> None:
    """``stats`` counts findings in the replay that measures it (``replay_metrics``); the
    count is the one ``find`` gives replaying for findings alone, and the metrics are
    those of a replay without findings, at both levels."""
    for name, strategy in (("t.jsonl", task_traces(False)), ("r.jsonl", request_traces(False))):
        path = _write(tmp_path, data.draw(strategy), name)
        found, _ = find(str(path))
        summary, _ = replay_metrics(
            str(path), None, {}, measure_preemption=True, watch=CountingFindings()
        )
        alone, _ = replay_metrics(str(path), None, {}, measure_preemption=True)
        assert summary.pop("findings") == counts(found), name
        assert summary == alone, name
