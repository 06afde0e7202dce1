"""engine/findings.py: each kind at the step its example names, none on a calm trace, and
every finding's step and ids as ``explain --step`` sees that step (the engine service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.engine.explain import StepView, explain_step, lives
from schedcli.engine.findings import (
    HOL_BLOCKING,
    KINDS,
    ORDER_CODES,
    RESOURCE_CODES,
    STARVATION,
    CountingFindings,
    Detectors,
    Finding,
    Item,
    StepFacts,
    Thresholds,
    counts,
    find,
)
from schedcli.engine.run import open_replay, replay_metrics
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
    found, _ = find(str(EXAMPLES / "decode_gap.jsonl"), thresholds=Thresholds(gap_after=10))
    assert found == []


def _task(tid: str, sid: str, kind: str, size: int, **more: Any) -> dict[str, Any]:
    return {"op": "submit", "tid": tid, "sid": sid, "kind": kind, "size": size, **more}


GET: dict[str, Any] = {"op": "get_work"}


def _header(policy: str, **params: int) -> dict[str, Any]:
    return {"schedcli": 1, "policy": policy, "params": params}


def test_a_task_waiting_only_for_its_own_session_is_not_the_head_of_line(
    tmp_path: Path,
) -> None:
    """a2 is the oldest left out, but only behind a1 (its session's, in the batch): the head
    is b, whose 9 tokens did not fit in the 8 left, and c (2 tokens) waited behind it."""
    header = _header("fcfs", max_batch_tokens=12, max_prefill_chunk_size=9)
    tasks = [_task("a1", "a", "decode", 1), _task("a2", "a", "decode", 1)]
    tasks += [_task("x", "x", "prefill", 3), _task("b", "b", "prefill", 9)]
    path = write_lines(tmp_path / "t.jsonl", [header, *tasks, _task("c", "c", "prefill", 2), GET])
    found, _ = find(str(path))
    assert [(f.kind, f.step, f.waiting, f.ran) for f in found] == [
        ("hol_blocking", 0, ("b", "c"), ("a1", "x"))
    ]
    assert found[0].numbers["head_reason"] == "no_room"


@pytest.mark.parametrize(
    ("policy", "params"),
    [
        ("fcfs", {"max_num_seqs": 1}),
        ("priority", {"max_num_seqs": 1}),
        ("fair", {"max_num_seqs": 1}),
        ("prefill-first", {"max_decode_sequences": 1}),
    ],
)
def test_a_batch_full_at_a_cap_is_not_head_of_line_blocking(
    tmp_path: Path, policy: str, params: dict[str, int]
) -> None:
    """The one task (decode) a batch may take ran; the rest were left for the cap, not
    behind a head that did not fit, however large the head."""
    kind = "decode" if policy == "prefill-first" else "prefill"
    header = _header(policy, max_batch_tokens=8, max_prefill_chunk_size=8, **params)
    sizes = (1, 1, 1) if kind == "decode" else (2, 8, 2)
    tasks = [_task(t, t, kind, n) for t, n in zip("abc", sizes, strict=True)]
    path = write_lines(tmp_path / "t.jsonl", [header, *tasks, GET, GET, GET])
    found, _ = find(str(path), thresholds=Thresholds(hol_unused=1))
    assert [f for f in found if f.kind == "hol_blocking"] == []


def test_starvation_counts_the_wait_from_the_step_it_became_first_of_its_session(
    tmp_path: Path,
) -> None:
    """s2 waits behind s1 (its own session) until s1 runs at step 3 (beside m); its own
    wait begins at step 4, so at step 7 it has waited 4 steps since step 4: the steps
    explain --session lists as passed over from 4 on."""
    header = _header("priority", max_batch_tokens=8, max_prefill_chunk_size=8)
    mine = [_task(t, "s", "prefill", 4, priority=9) for t in ("s1", "s2")]
    lines: list[dict[str, Any]] = [header, *mine]
    for tid, size in (("h0", 8), ("h1", 8), ("h2", 8), ("m", 4), ("h3", 8), ("h4", 8)):
        lines += [_task(tid, tid, "prefill", size, priority=0), GET]  # m leaves room for s1
    lines += [_task("h5", "h5", "prefill", 8, priority=0), GET]
    lines += [_task("h6", "h6", "prefill", 8, priority=0), GET, GET, GET]
    path = write_lines(tmp_path / "t.jsonl", lines)
    found, _ = find(str(path), thresholds=Thresholds(starve_after=3))
    assert [(f.step, f.waiting, f.numbers["waited"], f.numbers["since"]) for f in found] == [
        (7, ("s2",), 4, 4)
    ]
    with open_replay(str(path)) as opened:
        (life,) = lives(opened, tid="s2", sid=None)
    assert [step for step, _, _ in life.passed_over if step >= 4] == [4, 5, 6, 7]
    found, _ = find(str(path), thresholds=Thresholds(starve_after=0))
    assert [(f.step, f.waiting, f.numbers["since"]) for f in found][-1] == (4, ("s2",), 4)


def test_a_decode_gap_counts_from_the_later_tasks_submission_as_explain_shows_it(
    tmp_path: Path,
) -> None:
    """a's first token at step 0; the client sends a1 at step 5 and prefill-first serves
    ten prompts first: the gap is from step 5 to 15, a1's age in explain."""
    header = _header(
        "prefill-first", max_batch_tokens=8, max_decode_sequences=4, max_prefill_chunk_size=4
    )
    lines: list[dict[str, Any]] = [header, _task("a0", "a", "prefill", 2), GET]
    for n in range(4):
        lines += [_task(f"z{n}", "z", "decode", 1), GET]
    lines.append(_task("a1", "a", "decode", 1))
    for n in range(10):
        lines += [_task(f"p{n}", f"p{n}", "prefill", 2), GET]
    lines.append(GET)
    path = write_lines(tmp_path / "t.jsonl", lines)
    (f,) = find(str(path))[0]
    with open_replay(str(path), allow_incomplete=True) as opened:
        (life,) = lives(opened, tid="a1", sid=None)
    assert (
        (f.kind, f.step, f.ran)
        == ("decode_gap", 15, ("a1",))
        == ("decode_gap", life.outcome_step, ("a1",))
    )
    assert (f.numbers["from_step"], f.numbers["gap"]) == (life.step, f.step - life.step)
    assert (f.numbers["from_step"], f.numbers["gap"]) == (5, 10)


def test_tokens_at_steps_in_a_row_are_no_gap(tmp_path: Path) -> None:
    """A decode loop served every step: no step without a token, even with --gap-after 0."""
    header = _header("fcfs", max_batch_tokens=8, max_num_seqs=4, max_prefill_chunk_size=4)
    lines: list[dict[str, Any]] = [header, _task("a0", "a", "prefill", 2), GET]
    for n in range(1, 4):
        lines += [_task(f"a{n}", "a", "decode", 1), GET]
    path = write_lines(tmp_path / "t.jsonl", lines)
    assert find(str(path), thresholds=Thresholds(gap_after=0))[0] == []


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
        found, _ = find(str(path), thresholds=Thresholds(gap_after=0))
        assert found == [], (name, found)


@SETTINGS
@given(st.data())
def test_every_finding_agrees_with_explain_step(tmp_path: Path, data: st.DataObject) -> None:
    """The waiting ones were queued at the step and left out of its batch; the others ran."""
    loose = Thresholds(starve_after=0, hol_unused=1, thrash_after=1, gap_after=0)
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
            if f.kind == STARVATION:
                assert f.numbers["since"] == f.step - f.numbers["waited"] + 1, f
            if f.kind == HOL_BLOCKING and name == "t.jsonl":
                _hol_agrees(view, f)


def _hol_agrees(view: StepView, f: Finding) -> None:
    """The head is the oldest task left out with no earlier task of its session queued,
    left for want of room; the blocked ones were left behind it (an order reason)."""
    batch = {id_key(t.tid) for t in view.batch}
    seen: set[object] = set()
    firsts = []
    for q in view.queue:
        if id_key(q.task.sid) not in seen and id_key(q.task.tid) not in batch:
            firsts.append(q.task.tid)
        seen.add(id_key(q.task.sid))
    assert view.left is not None  # our policies give reasons
    codes = {id_key(t.tid): code for t, code, _ in view.left}
    assert f.waiting[0] == firsts[0], f
    assert codes[id_key(f.waiting[0])] in RESOURCE_CODES, f
    assert all(codes[id_key(w)] in ORDER_CODES for w in f.waiting[1:]), f


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
