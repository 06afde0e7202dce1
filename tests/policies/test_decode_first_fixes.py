"""decode-first is the reference plus exactly two fixes; compat=reference is the reference.

The differential tests run random traffic through the policy and through ``RuleModel``,
an independent statement of the rule in docs/policies.md written with plain lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli import DecodeFirstScheduler, Task
from schedcli.model.task import Id, settle_outputs
from tests.helpers import dc, ids, pf


def out(tid: Id, sid: Id, size: int, produce: bool) -> Task:
    return Task(tid, sid, "prefill", size, produce_output=produce)


def both_modes(b: int, d: int, c: int) -> list[DecodeFirstScheduler]:
    return [
        DecodeFirstScheduler(b, d, c),
        DecodeFirstScheduler.create(
            max_batch_tokens=b, max_decode_sequences=d, max_prefill_chunk_size=c, compat="reference"
        ),
    ]


# --- the reproducers --------------------------------------------------------


def test_a_chunk_that_does_not_fit_keeps_its_place_even_if_its_session_owes_an_output() -> None:
    for s in both_modes(6, 1, 4):
        s.submit([pf(1, 10, 1)])
        s.submit([pf(2, 10, 4)])
        s.submit([pf(3, 20, 4), pf(4, 20, 4)])
        assert [ids(s.get_work()) for _ in range(3)] == [[1, 3], [2], [4]], s.compat


def test_an_output_chunk_then_a_silent_chunk_share_a_batch() -> None:
    for s in both_modes(2, 1, 1):
        s.submit([out(1, 10, 1, True), out(2, 10, 1, False)])
        assert ids(s.get_work()) == [1, 2], s.compat


def test_a_prompt_then_the_silent_first_chunk_of_the_next_share_a_batch() -> None:
    for s in both_modes(2, 1, 1):
        s.submit([pf(1, 10, 1)])
        s.submit([pf(2, 10, 1), pf(3, 10, 1)])
        assert [ids(s.get_work()) for _ in range(2)] == [[1, 2], [3]], s.compat


def test_a_second_output_chunk_is_deferred_in_fixed_mode_and_taken_in_reference_mode() -> None:
    fixed, reference = both_modes(8, 1, 2)
    for s in (fixed, reference):
        s.submit([pf(1, 10, 2)])
        s.submit([pf(2, 10, 2)])
    assert [ids(fixed.get_work()) for _ in range(2)] == [[1], [2]]
    assert ids(reference.get_work()) == [1, 2]


def test_a_deferred_second_output_keeps_its_place_at_the_front_of_the_rotation() -> None:
    s = DecodeFirstScheduler(5, 1, 3)
    s.submit([pf(1, 10, 1)])
    s.submit([pf(2, 10, 3)])
    s.submit([pf(3, 20, 2), pf(4, 20, 3)])
    # Pass 2: s10 is passed over for its second output, then s20 for room; both stay in
    # front in that order, so s10 leads the next batch (sent to the back, it would trail).
    assert [ids(s.get_work()) for _ in range(3)] == [[1, 3], [2], [4]]


def test_a_reused_tid_in_another_session_is_never_confused_with_a_cancelled_decode() -> None:
    s = DecodeFirstScheduler(8, 2, 3)
    s.submit([dc(1, 10)])
    assert ids(s.cancel(10)) == [1]
    fresh = dc(1, 20)
    s.submit([fresh])
    assert s.cancel(10) == []
    assert s.get_work() == [fresh]
    assert not s.has_work()


def test_reference_mode_releases_by_tid_like_the_reference() -> None:
    s = DecodeFirstScheduler.create(
        max_batch_tokens=8, max_decode_sequences=2, max_prefill_chunk_size=3, compat="reference"
    )
    stale = dc(1, 10)
    s.submit([stale])
    assert s.cancel(10) == [stale]
    fresh = dc(1, 20)
    s.submit([fresh])
    # The stale entry releases tid 1 again: the reference reports it cancelled twice,
    # forgets the fresh task, and still dispatches it.
    assert s.cancel(10) == [stale]
    assert not s.has_work()
    assert s.get_work() == [fresh]


def test_reference_mode_dispatches_a_resubmitted_tid_after_a_second_cancel() -> None:
    """The spec's Fix 1 sequence: the reference returns the stale entry, then the new task."""
    s = DecodeFirstScheduler.create(
        max_batch_tokens=8, max_decode_sequences=2, max_prefill_chunk_size=3, compat="reference"
    )
    s.submit([dc(7, 10)])
    s.cancel(10)
    again = dc(7, 10)
    s.submit([again])
    assert ids(s.cancel(10)) == [7]
    assert s.get_work() == [again]


def test_reference_mode_clear_returns_queued_tasks_in_submission_order() -> None:
    s = DecodeFirstScheduler.create(
        max_batch_tokens=8, max_decode_sequences=2, max_prefill_chunk_size=3, compat="reference"
    )
    s.submit([pf(3, 30, 2)])
    s.submit([dc(1, 10)])
    s.submit([pf(2, 20, 2)])
    assert ids(s.clear()) == [3, 1, 2]
    assert not s.has_work() and s.get_work() == []


def test_compat_is_a_declared_parameter_with_two_values() -> None:
    assert DecodeFirstScheduler().params()["compat"] == "fixed"
    assert DecodeFirstScheduler.create(compat="reference").one_output_per_session is False
    assert DecodeFirstScheduler().one_output_per_session is True
    try:
        DecodeFirstScheduler(compat="exact")
    except ValueError as e:
        assert "compat must be one of fixed, reference" in str(e)
    else:
        raise AssertionError("compat=exact was accepted")


# --- an independent model of the rule -----------------------------------------------


@dataclass
class RuleModel:
    """decode-first stated with plain lists: the rule in docs/policies.md, not the code.

    ``fixed`` turns on fix 2 (one output per session). Identity is tracked by object,
    which is fix 1; traffic for the reference mode never reuses a tid.
    """

    budget: int
    decode_cap: int
    chunk_limit: int
    fixed: bool
    queued: list[Task] = field(default_factory=list)  # live tasks, in submission order
    rotation: list[Id] = field(default_factory=list)  # sessions holding a rotation slot

    def submit(self, group: list[Task]) -> bool:
        tids = [t.tid for t in group]
        if len(set(tids)) != len(tids) or any(t.tid == q.tid for t in group for q in self.queued):
            return False
        for t in group:
            if t.size == 0 or (t.is_decode and t.size != 1):
                return False
            if not t.is_decode and t.size > self.chunk_limit:
                return False
        settle_outputs(group)
        for t in group:
            self.queued.append(t)
            if not t.is_decode and t.sid not in self.rotation:
                self.rotation.append(t.sid)
        return True

    def cancel(self, sid: Id) -> list[Id]:
        mine = [t for t in self.queued if t.sid == sid]
        self.queued = [t for t in self.queued if t.sid != sid]
        # Prefill first, then decodes, as the policy reports them.
        return [t.tid for t in mine if not t.is_decode] + [t.tid for t in mine if t.is_decode]

    def clear(self) -> list[Id]:
        dropped = [t.tid for t in self.queued]
        self.queued, self.rotation = [], []
        return dropped

    def chunks(self, sid: Id) -> list[Task]:
        return [t for t in self.queued if t.sid == sid and not t.is_decode]

    def get_work(self) -> list[Id]:
        batch: list[Task] = []
        decoding: set[Id] = set()
        for t in [t for t in self.queued if t.is_decode]:
            if len(batch) < self.decode_cap and t.sid not in decoding:
                batch.append(t)
                decoding.add(t.sid)
        spent = len(batch)
        with_output: set[Id] = set()
        progress = True
        while progress and spent < self.budget:
            progress = False
            passed_over: list[Id] = []
            served: list[Id] = []
            visited = 0
            for sid in list(self.rotation):
                if spent >= self.budget:
                    break
                visited += 1
                queue = [t for t in self.chunks(sid) if t not in batch]
                if not queue:
                    continue  # retired: its slot is dropped
                head = queue[0]
                second_output = self.fixed and head.produce_output and sid in with_output
                if sid in decoding or head.size > self.budget - spent or second_output:
                    passed_over.append(sid)
                    continue
                batch.append(head)
                spent += head.size
                progress = True
                if head.produce_output:
                    with_output.add(sid)
                if len(queue) > 1:
                    served.append(sid)
            self.rotation = passed_over + self.rotation[visited:] + served
        self.queued = [t for t in self.queued if t not in batch]
        return [t.tid for t in batch]


@st.composite
def traffic(draw: st.DrawFn, *, reuse_tids: bool) -> tuple[tuple[int, int, int], list[tuple]]:
    d = draw(st.integers(1, 3))
    c = draw(st.integers(1, 4))
    b = d + c + draw(st.integers(0, 4))
    next_tid = 0
    ops: list[tuple] = []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["submit"] * 5 + ["get_work"] * 4 + ["cancel", "clear"]))
        if kind == "submit":
            sid = draw(st.integers(0, 3))
            group = []
            for _ in range(draw(st.integers(1, 3))):
                decode = draw(st.booleans()) and draw(st.booleans())
                if reuse_tids:
                    tid = draw(st.integers(0, 6))
                else:
                    next_tid += 1
                    tid = next_tid
                size = 1 if decode else draw(st.integers(1, c))
                if draw(st.integers(0, 30)) == 0:
                    size = draw(st.sampled_from([0, 2, c + 1]))
                produce = None if decode else draw(st.sampled_from([None, None, True, False]))
                group.append((tid, sid, "decode" if decode else "prefill", size, produce))
            ops.append(("submit", group))
        elif kind == "cancel":
            ops.append(("cancel", draw(st.integers(0, 3))))
        else:
            ops.append((kind, None))
    return (b, d, c), ops


def play_both(policy: DecodeFirstScheduler, model: RuleModel, ops: list[tuple]) -> None:
    for step, (op, arg) in enumerate(ops):
        if op == "submit":
            group = [Task(tid, sid, k, n, produce_output=o) for tid, sid, k, n, o in arg]
            twin = [Task(tid, sid, k, n, produce_output=o) for tid, sid, k, n, o in arg]
            assert policy.submit(group) == model.submit(twin), step
        elif op == "get_work":
            assert ids(policy.get_work()) == model.get_work(), step
        elif op == "cancel":
            assert ids(policy.cancel(arg)) == model.cancel(arg), step
        else:
            assert ids(policy.clear()) == model.clear(), step
        assert policy.has_work() == bool(model.queued), step
    while model.queued:
        assert ids(policy.get_work()) == model.get_work()


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(traffic(reuse_tids=True))
def test_fixed_mode_matches_the_rule_on_random_traffic(case: tuple) -> None:
    (b, d, c), ops = case
    play_both(DecodeFirstScheduler(b, d, c), RuleModel(b, d, c, fixed=True), ops)


@SETTINGS
@given(traffic(reuse_tids=False))
def test_reference_mode_matches_the_rule_without_fix_2_on_random_traffic(case: tuple) -> None:
    (b, d, c), ops = case
    policy = DecodeFirstScheduler.create(
        max_batch_tokens=b, max_decode_sequences=d, max_prefill_chunk_size=c, compat="reference"
    )
    play_both(policy, RuleModel(b, d, c, fixed=False), ops)


@SETTINGS
@given(traffic(reuse_tids=False))
def test_fixed_batches_equal_the_references_until_it_owes_a_session_two_outputs(
    case: tuple,
) -> None:
    (b, d, c), ops = case
    fixed = DecodeFirstScheduler(b, d, c)
    reference = DecodeFirstScheduler.create(
        max_batch_tokens=b, max_decode_sequences=d, max_prefill_chunk_size=c, compat="reference"
    )
    for op, arg in ops:
        if op == "submit":
            for s in (fixed, reference):
                s.submit([Task(tid, sid, k, n, produce_output=o) for tid, sid, k, n, o in arg])
            continue
        if op == "cancel":
            assert ids(fixed.cancel(arg)) == ids(reference.cancel(arg))
            continue
        if op == "clear":
            assert ids(fixed.clear()) == ids(reference.clear())
            continue
        got = reference.get_work()
        outputs = [t.sid for t in got if t.produce_output]
        if len(outputs) != len(set(outputs)):
            return  # the reference broke the promise here; the fix must differ from now on
        assert ids(fixed.get_work()) == ids(got)


def test_compat_reference_is_a_factory_choice_and_records_as_decode_first(tmp_path: Path) -> None:
    import io

    import orjson

    from schedcli import build_policy
    from schedcli.policies._decode_first_reference import ReferenceDecodeFirst
    from schedcli.record import RecordingScheduler
    from tests.helpers import run_cli

    built = build_policy(
        "decode-first",
        {
            "compat": "reference",
            "max_batch_tokens": 8,
            "max_decode_sequences": 2,
            "max_prefill_chunk_size": 3,
        },
    )
    assert type(built) is ReferenceDecodeFirst
    assert type(build_policy("decode-first", {})) is DecodeFirstScheduler
    with pytest.raises(ValueError, match=r"build it with DecodeFirstScheduler\.create"):
        DecodeFirstScheduler(compat="reference")
    out = io.BytesIO()
    rec = RecordingScheduler(built, out)
    rec.submit([pf(1, 10, 2), pf(2, 10, 2)])
    rec.get_work()
    header = orjson.loads(out.getvalue().splitlines()[0])
    assert header["policy"] == "decode-first" and header["params"]["compat"] == "reference"
    path = tmp_path / "rec.jsonl"
    path.write_bytes(out.getvalue())
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
