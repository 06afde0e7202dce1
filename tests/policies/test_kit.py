"""The kit for policy authors: five methods are a policy, the conformance helper, exports."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedcli import Id, QueueScheduler, Scheduler, Task, settle_outputs
from schedcli.catalog.registry import _check_class
from schedcli.kit import MAX_BATCH_TOKENS, DecodeQueue
from schedcli.testing import check_policy
from tests.helpers import TRACES, run_cli


class FiveMethods(Scheduler):
    """Exactly the interface's five calls: submit (a bool), has_work, get_work, cancel, clear."""

    name = "five-methods"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Task] = []

    def submit(self, tasks: Iterable[Task]) -> bool:
        group = list(tasks)
        with self._lock:
            tids = {t.tid for t in self._queue}
            if len({t.tid for t in group}) < len(group) or any(t.tid in tids for t in group):
                return False
            if any(t.size == 0 or (t.is_decode and t.size != 1) for t in group):
                return False
            settle_outputs(group)
            self._queue.extend(group)
            return True

    def has_work(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def get_work(self) -> list[Task]:
        with self._lock:
            return [self._queue.pop(0)] if self._queue else []

    def cancel(self, sid: object) -> list[Task]:
        with self._lock:
            gone = [t for t in self._queue if t.sid == sid]
            self._queue = [t for t in self._queue if t.sid != sid]
            for t in gone:
                t.cancelled = True
            return gone

    def clear(self) -> list[Task]:
        with self._lock:
            gone, self._queue = self._queue, []
            for t in gone:
                t.cancelled = True
            return gone


def test_a_plugin_with_only_the_five_methods_replays() -> None:
    r = run_cli("replay", str(TRACES / "rejections.jsonl"), "-p", f"{__name__}:FiveMethods")
    assert r.returncode == 0, r.stderr.decode()
    assert b"the policy refused the group" in r.stdout  # try_submit's default reason


def test_a_class_with_neither_submit_nor_try_submit_is_refused_naming_it() -> None:
    class NoSubmit(FiveMethods):
        submit = Scheduler.submit  # type: ignore[assignment]

    with pytest.raises(Exception, match=r"missing submit"):
        _check_class(NoSubmit, "policy plugin 'NoSubmit'")


def test_check_policy_passes_a_correct_policy_and_catches_a_broken_one() -> None:
    check_policy(FiveMethods, operations=500)

    class Forgets(FiveMethods):
        def cancel(self, sid: object) -> list[Task]:
            return []

    with pytest.raises(AssertionError, match="cancel returned the wrong set"):
        check_policy(Forgets, operations=500)


def test_the_kit_exports_what_built_in_policies_are_made_of() -> None:
    assert MAX_BATCH_TOKENS.name == "max_batch_tokens" and MAX_BATCH_TOKENS.default == 544
    assert issubclass(QueueScheduler, Scheduler)
    assert list(DecodeQueue()) == []


class _DecodeDeque:
    """DecodeQueue's rule written plainly over a deque: the model it must match."""

    def __init__(self) -> None:
        self.queue: deque[Task] = deque()

    def take(self, taken: list[Task], decoding: dict[Id, Id], cap: int) -> None:
        deferred: list[Task] = []
        n = 0
        while n < cap and self.queue:
            t = self.queue.popleft()
            if t.sid in decoding:
                deferred.append(t)
                continue
            decoding[t.sid] = t.tid
            taken.append(t)
            n += 1
        self.queue.extendleft(reversed(deferred))


_decode_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 6), st.integers(1, 1500)),
        st.tuples(st.just("take"), st.integers(0, 800), st.integers(0, 6)),
        st.tuples(st.just("cancel"), st.integers(0, 96), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_decode_ops)
@example([("push", 0, 3000), ("take", 700, 2), ("take", 700, 0), ("take", 700, 5), ("take", 9, 0)])
def test_the_decode_queue_keeps_arrival_order_through_any_takes_and_cancels(
    ops: list[tuple[str, int, int]],
) -> None:
    queue, model = DecodeQueue(), _DecodeDeque()
    tid = 0
    for op, a, b in ops:
        if op == "push":
            for _ in range(b):  # many at once: long runs reach the queue's compaction
                tid += 1
                t = Task(tid, (a + tid) % 2003, "decode", 1)  # sessions recur now and then
                queue.push(t)
                model.queue.append(t)
        elif op == "take":
            decoding: dict[Id, Id] = {s: -s for s in range(b)}  # sessions already taken
            expected_decoding = dict(decoding)
            got: list[Task] = []
            expected: list[Task] = []
            queue.take(got, decoding, a)
            model.take(expected, expected_decoding, a)
            assert got == expected and decoding == expected_decoding
        else:
            assert queue.remove_session(a) == [t for t in model.queue if t.sid == a]
            model.queue = deque(t for t in model.queue if t.sid != a)
        assert list(queue) == list(model.queue) and len(queue) == len(model.queue)


def test_policies_expose_their_chunk_limit_as_a_property() -> None:
    from schedcli.catalog.registry import build_policy

    assert build_policy("decode-first", {"max_prefill_chunk_size": 128}).prefill_chunk_limit == 128
    assert FiveMethods().prefill_chunk_limit is None


def test_kit_and_schedcli_are_two_doors_to_different_rooms() -> None:
    import schedcli
    import schedcli.kit
    import schedcli.testing

    assert not set(schedcli.__all__) & set(schedcli.kit.__all__)
    assert all(hasattr(schedcli.kit, name) for name in schedcli.kit.__all__)
    assert "check_policy" in schedcli.testing.__all__
    assert "run_cli_in_process" not in dir(schedcli.testing)


@pytest.mark.parametrize("left_out", ["get_work", "cancel", "clear", "has_work"])
def test_a_class_missing_an_interface_call_is_refused_by_both_cores(left_out: str) -> None:
    # A compiled Scheduler keeps no abstract methods, so the check cannot ask Python's ABC
    # machinery: the compiled core accepted such a class while pure Python refused it.
    calls = ("submit", "has_work", "get_work", "cancel", "clear")
    methods = {name: vars(FiveMethods)[name] for name in calls if name != left_out}
    missing = type("Missing", (Scheduler,), methods)
    with pytest.raises(Exception, match=rf"missing {left_out}"):
        _check_class(missing, "policy plugin 'Missing'")


def test_a_request_level_class_missing_a_call_is_refused() -> None:
    from schedcli import RequestScheduler

    class Half(RequestScheduler):
        def has_work(self) -> bool:
            return False

    with pytest.raises(Exception, match=r"RequestScheduler interface \(missing abort, add"):
        _check_class(Half, "policy plugin 'Half'")
