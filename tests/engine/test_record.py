"""RecordingScheduler: a live scheduler's calls become a trace that replays exactly."""

from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli import BUILTIN_POLICIES, DecodeFirstScheduler, Task
from schedcli.catalog.registry import build_policy
from schedcli.engine.flight import Window, _record
from schedcli.engine.recorder import _inline_line, _inline_submit, _task_record
from schedcli.formats.trace.scan import _canonical_task
from schedcli.record import RecordingScheduler
from tests.helpers import ROOT, run_cli


def drive(rec: RecordingScheduler, producers: int = 4, per_producer: int = 200) -> None:
    """Producers submit (and sometimes cancel) while one consumer calls get_work."""
    tids = iter(range(10**9))
    lock = threading.Lock()

    def produce(k: int) -> None:
        rng = random.Random(k)
        for _ in range(per_producer):
            with lock:
                tid = next(tids)
            sid = k * 100 + rng.randrange(6)
            if rng.random() < 0.5:
                rec.submit([Task(tid, sid, "decode", 1)])
            else:
                with lock:
                    second = next(tids)
                rec.submit(
                    [Task(tid, sid, "prefill", rng.randint(1, 16)), Task(second, sid, "prefill", 3)]
                )
            if rng.random() < 0.05:
                rec.cancel(sid)

    def consume() -> None:
        for _ in range(producers * per_producer // 2):
            rec.get_work()

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    threads.append(threading.Thread(target=consume))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while rec.has_work():
        rec.get_work()


@pytest.mark.parametrize("policy", sorted(BUILTIN_POLICIES))
def test_a_recording_under_threads_replays_exactly(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "rec.jsonl.gz"
    inner = build_policy(policy, {"max_batch_tokens": 64, "max_prefill_chunk_size": 16})
    with RecordingScheduler(inner, path) as rec:
        drive(rec)
    assert gzip.decompress(path.read_bytes()).startswith(b'{"schedcli":1')
    r = run_cli("replay", str(path), "--check", "-f", "jsonl")
    assert r.returncode == 0, r.stderr.decode()
    end = orjson.loads(r.stdout.splitlines()[-1])["end"]
    assert end["accepted"] == end["dispatched"] + end["cancelled"] and end["queued"] == 0


def test_flush_puts_every_call_so_far_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    with RecordingScheduler(DecodeFirstScheduler(), path) as rec:
        for tid in range(1, 301):
            rec.submit([Task(tid, tid % 7, "decode", 1)])
        rec.get_work()
        rec.flush()
        lines = path.read_bytes().splitlines()
        assert len(lines) == 1 + 300 + 1  # the header, the submits, the get_work
        assert orjson.loads(lines[-1])["op"] == "get_work"


def test_a_recording_never_closed_still_has_every_call_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    script = (
        "import sys\n"
        "from schedcli import DecodeFirstScheduler, Task\n"
        "from schedcli.record import RecordingScheduler\n"
        "rec = RecordingScheduler(DecodeFirstScheduler(), sys.argv[1])\n"
        "for tid in range(1, 2001):\n"
        "    rec.submit([Task(tid, tid % 7, 'decode', 1)])\n"
        "    if tid % 10 == 0:\n"
        "        rec.get_work()\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT, check=False)
    assert done.returncode == 0
    r = run_cli("replay", str(path), "--check", "-f", "jsonl")
    assert r.returncode == 0, r.stderr.decode()
    assert len(path.read_bytes().splitlines()) == 1 + 2000 + 200


def test_a_rejected_submit_is_recorded_with_its_reason(tmp_path: Path) -> None:
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), out)
    assert not rec.submit([Task(1, 10, "prefill", 9)])
    lines = [orjson.loads(x) for x in out.getvalue().splitlines()]
    assert lines[1]["meta"] == {
        "rejected": "prefill chunk of 9 tokens exceeds max_prefill_chunk_size 4"
    }
    path = tmp_path / "t.jsonl"
    path.write_bytes(out.getvalue())
    replayed = [
        orjson.loads(x) for x in run_cli("replay", str(path), "-f", "jsonl").stdout.splitlines()
    ]
    assert replayed[0]["reason"] == lines[1]["meta"]["rejected"]


def test_a_chunk_that_owes_no_output_is_recorded_so_and_replays(tmp_path: Path) -> None:
    """A one-task submit is written inline, its output left to the default unless the
    task owes none: the replay must not make that chunk produce output."""
    path = tmp_path / "t.jsonl"
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), str(path))
    quiet = Task(1, 10, "prefill", 4, produce_output=False)
    assert rec.submit([quiet]) and rec.submit([Task(2, 10, "prefill", 2)])
    assert rec.submit([Task(3, 11, "decode", 1)])
    rec.get_work()
    rec.close()
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert lines[1] == {
        "op": "submit",
        "tid": 1,
        "sid": 10,
        "kind": "prefill",
        "size": 4,
        "produce_output": False,
    }
    assert lines[2] == {"op": "submit", "tid": 2, "sid": 10, "kind": "prefill", "size": 2}
    assert run_cli("replay", str(path), "--check", "-f", "jsonl").returncode == 0
    # Under the default both chunks would owe output, and decode-first would not put them
    # in one batch: the recorded batch holds both, so the check sees the difference.
    lines[1].pop("produce_output")
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    assert run_cli("replay", str(path), "--check", "-f", "jsonl").returncode == 1


IDS = st.one_of(
    st.integers(min_value=-(1 << 65), max_value=1 << 65),  # orjson: -2**63 .. 2**64 - 1
    st.sampled_from([0, -1, (1 << 53) - 1, 1 << 53, -(1 << 53), -(1 << 63) - 1, 1 << 64, True]),
    st.text(max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(
    tid=IDS,
    sid=IDS,
    kind=st.sampled_from(["prefill", "decode"]),
    size=st.integers(1, 1 << 60),
    output=st.sampled_from([None, True, False]),
)
def test_a_one_task_submit_is_recorded_as_the_same_bytes_whatever_its_ids(
    tid: object, sid: object, kind: str, size: int, output: bool | None
) -> None:
    """Small int ids take a path that writes the line without a dict: its bytes are the
    ones orjson writes for the event, for every id and size either side of its bounds; an
    id past the format's signed 64 bits is refused and leaves no line."""
    if kind == "decode":
        size = 1
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(1 << 62, 4, 1 << 61), out)
    task = Task(tid, sid, kind, size, produce_output=output)  # type: ignore[arg-type]
    event = {"op": "submit", "tid": tid, "sid": sid, "kind": kind, "size": size}
    if output is False:
        event["produce_output"] = False
    writable = all(type(x) is str or (type(x) is int and -(2**63) <= x < 2**63) for x in (tid, sid))
    if not writable:  # an id a trace cannot carry: refused, before the policy sees it
        assert not rec.submit([task]) and not rec.inner.has_work()
        rec.flush()
        assert len(out.getvalue().splitlines()) == 1  # the header alone
        return
    expected = orjson.dumps(event)
    assert rec.submit([task])
    rec.flush()
    assert out.getvalue().splitlines()[1] == expected


def test_clock_stamps_every_call_with_monotonic_seconds() -> None:
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), out, clock=True)
    rec.submit([Task(1, 10, "decode", 1)])
    rec.get_work()
    rec.clear()
    times = [orjson.loads(x)["t"] for x in out.getvalue().splitlines()[1:]]
    assert len(times) == 3 and times == sorted(times) and times[0] >= 0


def test_a_plugin_without_declared_params_is_named_by_its_class(tmp_path: Path) -> None:
    from tests.plugin_policies import OnePerBatch

    class Undeclared(OnePerBatch):
        PARAMS = ()

    out = io.BytesIO()
    RecordingScheduler(Undeclared(), out)
    header = orjson.loads(out.getvalue().splitlines()[0])
    assert header["meta"]["class"].endswith(
        ":test_a_plugin_without_declared_params_is_named_by_its_class.<locals>.Undeclared"
    )
    assert "params" not in header


def test_the_flight_recorder_dump_replays_on_its_own(tmp_path: Path) -> None:
    rec = RecordingScheduler(
        build_policy("fcfs", {"max_batch_tokens": 64, "max_prefill_chunk_size": 16}), ring=50
    )
    drive(rec, producers=2, per_producer=100)
    dump = tmp_path / "window.jsonl"
    rec.dump(dump)
    lines = [orjson.loads(x) for x in dump.read_text().splitlines()]
    before = [x for x in lines if x.get("meta", {}).get("queued_before_window")]
    assert len(lines) - 1 - len(before) == 50  # the header, the queue at the window, 50 calls
    assert lines[0]["meta"]["flight_recorder"] == 50
    r = run_cli("replay", str(dump), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr.decode()


def test_an_exception_in_the_inner_scheduler_dumps_the_window_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Faulty(DecodeFirstScheduler):
        def get_work(self) -> list[Task]:
            raise RuntimeError("boom")

    target = tmp_path / "prod.jsonl"
    rec = RecordingScheduler(Faulty(10, 2, 4), target, ring=10)
    rec.submit([Task(1, 10, "decode", 1)])
    with pytest.raises(RuntimeError, match="boom"):
        rec.get_work()
    crash = tmp_path / "prod.jsonl.crash-1.jsonl"
    lines = [orjson.loads(x) for x in crash.read_text().splitlines()]
    assert lines[1]["tasks"][0]["tid"] == 1
    # It ends with the call that raised and why, and says where it is.
    assert f"the last 1 calls are in {crash}" in capsys.readouterr().err
    assert lines[-2] == {"op": "get_work", "meta": {"raised": "RuntimeError: boom"}}
    assert lines[-1] == {
        "partial": {"reason": "the scheduler raised in get_work: RuntimeError: boom"}
    }
    # The class was local (no reference resolves it); under decode-first, which does not
    # raise, the dump replays to its end.
    r = run_cli(
        "replay", str(crash), "-p", "decode-first", "--allow-incomplete", "-o", str(tmp_path / "d")
    )
    assert r.returncode == 0, r.stderr


def test_a_flight_dump_keeps_the_prepared_input_of_a_task_queued_before_its_window(
    tmp_path: Path,
) -> None:
    rec = RecordingScheduler(DecodeFirstScheduler(), ring=2)
    rec.submit([Task(1, 1, "prefill", 8, position=0, prepared=(20, 0))])
    for sid in range(2, 6):  # the submit leaves the window, its task still queued
        rec.cancel(sid)
    dump = tmp_path / "window.jsonl"
    rec.dump(dump)
    first = orjson.loads(dump.read_text().splitlines()[1])
    assert first["meta"] == {"queued_before_window": True}
    assert first["tasks"][0]["prepared"] == {"size": 20, "offset": 0}
    r = run_cli("replay", str(dump), "--check", "-f", "jsonl")
    assert r.returncode == 0, r.stderr
    assert b'"prepared":{"size":20,"offset":0}' in r.stdout


@pytest.mark.parametrize(
    ("prepared", "tokens"), [((2**63, 0), None), ((4, -1), None), ((4, 0), [1]), ((1, 0), None)]
)
def test_a_prepared_input_a_trace_could_not_read_back_is_refused_by_the_recorder(
    prepared: tuple[int, int], tokens: list[int] | None
) -> None:
    out = io.BytesIO()
    rec = RecordingScheduler(DecodeFirstScheduler(), out)
    t = Task(1, 1, "prefill", 2)  # (1, 0) holds no slice of 2
    t.prepared, t.tokens = prepared, tokens  # set past the constructor's checks
    reason = rec.try_submit([t])
    assert reason is not None and "prepared" in reason and "cannot be recorded" in reason
    assert not rec.has_work() and out.getvalue().count(b"\n") == 1  # the header only


def test_a_recorder_needs_somewhere_to_write() -> None:
    with pytest.raises(ValueError, match="needs a target"):
        RecordingScheduler(DecodeFirstScheduler())


def test_the_recorder_passes_the_policys_limits_and_reasons_through() -> None:
    rec = RecordingScheduler(DecodeFirstScheduler(10, 2, 4), io.BytesIO())
    assert rec.prefill_chunk_limit == 4 and rec.token_budget == 10
    rec.explaining = True
    rec.submit([Task(1, 10, "decode", 1)])
    rec.submit([Task(2, 10, "decode", 1)])
    rec.get_work()
    assert [(t.tid, code) for t, code, _ in rec.left_behind() or []] == [
        (2, "one_decode_per_session")
    ]


# A call: a submit of a group of tids (which may reuse a tid taken earlier), or a call
# that takes some tids out of the queue (get_work, cancel, clear).
_calls = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.lists(st.integers(0, 12), min_size=1, max_size=3)),
        st.tuples(st.just("take"), st.lists(st.integers(0, 12), max_size=4)),
    ),
    max_size=60,
)


@given(_calls, st.integers(1, 12))
@settings(max_examples=300, deadline=None)
def test_the_flight_window_starts_with_the_queue_as_it_was_when_its_oldest_call_was_made(
    calls: list[tuple[str, list[int]]], size: int
) -> None:
    # A submit of one task is kept as its line (as the recorder keeps the common one), its
    # session the call's number; a group as its records.
    window = Window(size)
    queue: dict[int, tuple[int, int, dict[str, object]]] = {}  # the queue, call by call
    at_start: list[list[dict[str, object]]] = []
    for n, (op, tids) in enumerate(calls):
        if n == len(calls) - size:
            at_start = _groups(queue)
        if op == "take":
            for tid in tids:
                queue.pop(tid, None)
            window.add({"op": "get_work", "n": n}, None, tids)
            continue
        group: list[dict[str, object]] = [
            {"tid": tid, "n": n} for tid in dict.fromkeys(tids) if tid not in queue
        ]
        if len(group) == 1:
            tid = group[0]["tid"]
            task = {"tid": tid, "sid": n, "kind": "decode", "size": 1}
            window.add_line(orjson.dumps({"op": "submit", **task}) + b"\n", tid)  # type: ignore[arg-type]
            group = [{**task, "produce_output": True}]
        else:
            window.add({"op": "submit", "n": n}, group, [])
        for i, record in enumerate(group):
            queue[record["tid"]] = (n, i, record)  # type: ignore[index]
    if len(calls) < size:
        at_start = []
    events = list(window.replayable())
    before = [e for e in events if e.get("meta") == {"queued_before_window": True}]
    assert [e["tasks"] for e in before] == at_start
    kept = [e["n"] if "n" in e else e["tasks"][0]["sid"] for e in events[len(before) :]]
    assert kept == list(range(len(calls)))[-size:]


def _groups(queue: dict[int, tuple[int, int, dict[str, object]]]) -> list[list[dict[str, object]]]:
    """The queued tasks by the submit that queued them, in submission order."""
    by_call: dict[int, list[dict[str, object]]] = {}
    for n, _, record in sorted(queue.values(), key=lambda item: item[:2]):
        by_call.setdefault(n, []).append(record)
    return list(by_call.values())


_tasks = st.builds(
    Task,
    st.integers(-(2**60), 2**60) | st.text(max_size=3),
    st.integers(-(2**60), 2**60) | st.text(max_size=3),
    st.sampled_from(["decode", "prefill"]),
    st.integers(1, 2**60),
    produce_output=st.sampled_from([True, False, None]),
    priority=st.sampled_from([0, 0, 3]),
    meta=st.sampled_from([None, None, {"k": 1}]),
)


@given(_tasks)
@settings(max_examples=300, deadline=None)
def test_a_submit_the_flight_window_keeps_as_its_line_dumps_as_the_task_record(t: Task) -> None:
    # The window keeps the common submit as the bytes a file recording writes, and builds
    # the record only in a dump: the same record, key for key, as for any other submit.
    line = _inline_line(t, {})
    if line is not None:
        assert orjson.dumps(_record(line)) == orjson.dumps(_task_record(t))


_decodes = st.builds(
    Task,
    st.integers(0, 50),
    st.integers(0, 5),
    st.just("decode"),
    st.just(1),
    produce_output=st.just(True),
)


@pytest.mark.slow
@given(st.lists(_tasks | _decodes, max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_recorded_line_is_the_submit_as_orjson_writes_it(tasks: list[Task]) -> None:
    # One-token decodes end in their session's kept tail, the others are spelt whole.
    tails: dict[int, str] = {}
    for t in tasks:
        line = _inline_line(t, tails)
        if line is not None:
            assert line == orjson.dumps(_inline_submit(t, None)) + b"\n"


@pytest.mark.slow
@given(st.lists(_tasks | _decodes, max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_recorded_line_with_plain_ids_is_read_without_the_decoder(tasks: list[Task]) -> None:
    # The reader's byte scan (formats/trace.py) serves the recorder's own spelling: were
    # either to change alone, recordings would quietly lose the fast path.
    tails: dict[int, str] = {}
    for t in tasks:
        line = _inline_line(t, tails)
        if line is None or not (type(t.tid) is int and t.tid >= 0 and t.sid >= 0):
            continue
        scanned, end = _canonical_task(line, 0)
        assert scanned is not None and end == len(line)
        assert (scanned.tid, scanned.sid, scanned.kind, scanned.size) == (
            t.tid, t.sid, t.kind, t.size
        )  # fmt: skip


def test_a_recorded_line_is_the_same_after_the_kept_tails_are_dropped() -> None:
    # Past 4,096 sessions the kept tails are dropped and kept again as sessions recur.
    tails: dict[int, str] = {}
    for sid in [*range(5000), *range(10), 4999, -3]:
        t = Task(sid + 7, sid, "decode", 1, produce_output=True)
        assert _inline_line(t, tails) == orjson.dumps(_inline_submit(t, None)) + b"\n"
    assert len(tails) < 5000


def test_a_flight_dump_holds_the_same_calls_as_a_file_recording(tmp_path: Path) -> None:
    rng = random.Random(3)
    file_rec = RecordingScheduler(DecodeFirstScheduler(), tmp_path / "all.jsonl")
    ring_rec = RecordingScheduler(DecodeFirstScheduler(), ring=40)
    for step in range(120):
        cancel = rng.randrange(6) if rng.random() < 0.1 else None
        for rec in (file_rec, ring_rec):
            for sid in range(6):
                rec.submit([Task(step * 10 + sid, sid, "decode", 1, produce_output=sid != 5)])
            if step % 7 == 0:  # a group, and ids the kept line does not spell
                rec.submit(
                    [Task(f"p{step}", 100 + step, "prefill", 50), Task(-step, 9, "decode", 1)]
                )
            if cancel is not None:
                rec.cancel(cancel)
            rec.get_work()
    file_rec.close()
    ring_rec.dump(tmp_path / "ring.jsonl")
    recorded = [orjson.loads(x) for x in (tmp_path / "all.jsonl").read_bytes().splitlines()[1:]]
    dumped = [orjson.loads(x) for x in (tmp_path / "ring.jsonl").read_bytes().splitlines()[1:]]
    window = [e for e in dumped if "queued_before_window" not in e.get("meta", {})]
    assert len(window) == 40
    assert window == [_as_group(e) for e in recorded[-40:]]


def _as_group(event: dict[str, object]) -> dict[str, object]:
    """A file recording's one-task submit written inline, as a group of one."""
    if event["op"] != "submit" or "tasks" in event:
        return event
    task = {k: v for k, v in event.items() if k != "op"}
    task["produce_output"] = task.get("produce_output", True)
    return {"op": "submit", "tasks": [task]}


RAISES_AT_30 = """
import sys
from schedcli import DecodeFirstScheduler, Task
from schedcli.record import RecordingScheduler


class Flaky(DecodeFirstScheduler):
    calls = 0

    def get_work(self):
        Flaky.calls += 1
        if Flaky.calls == 30:
            raise RuntimeError("boom")
        return super().get_work()


ring = sys.argv[1] == "ring"
rec = RecordingScheduler(Flaky(544, 8, 256), sys.argv[2], **({"ring": 1000} if ring else {}))
try:
    for i in range(40):
        rec.submit([Task(i, i % 5, "decode", 1)])
        rec.get_work()
except RuntimeError:
    pass
rec.close()
"""


@pytest.mark.parametrize(
    ("tid", "sid"),
    [(1, 2**64), (True, 1), (2**63, 1), (1, -(2**63) - 1)],
    ids=["sid-2^64", "tid-true", "tid-2^63", "sid-below"],
)
def test_the_recorder_refuses_an_id_the_format_cannot_hold(tid: object, sid: object) -> None:
    out = io.BytesIO()
    inner = DecodeFirstScheduler(544, 8, 256)
    with RecordingScheduler(inner, out) as rec:
        reason = rec.try_submit([Task(tid, sid, "decode", 1)])  # type: ignore[arg-type]
        assert reason is not None and "cannot be recorded" in reason
        assert not inner.has_work()  # the policy never saw it
        assert rec.try_submit([Task(7, 7, "decode", 1)]) is None
        rec.get_work()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # the header, the good submit, its get_work


@pytest.mark.parametrize(
    "task",
    [
        Task(1, "\ud800", "decode", 1),
        Task(1, 1, "decode", 1, meta={"handle": object()}),
        Task(1, 1, "decode", 1, meta={1: "a key that is not a string"}),
    ],
    ids=["lone-surrogate-sid", "meta-object", "meta-int-key"],
)
def test_the_recorder_refuses_what_json_cannot_hold_before_the_policy(task: Task) -> None:
    out = io.BytesIO()
    inner = DecodeFirstScheduler(544, 8, 256)
    with RecordingScheduler(inner, out) as rec:
        reason = rec.try_submit([task])
        assert reason is not None and "cannot be recorded" in reason
        assert not inner.has_work()
        rec.get_work()
    assert len(out.getvalue().splitlines()) == 2  # the header and the get_work


@pytest.mark.parametrize("plugin", ["Greedy", "Nameless"])
def test_a_recording_of_a_plugin_replays_under_that_plugin(tmp_path: Path, plugin: str) -> None:
    import tests.plugin_policies as plugins

    cls = getattr(plugins, plugin)
    out = io.BytesIO()
    rec = RecordingScheduler(cls(), out)
    rec.submit([Task(1, 10, "decode", 1)])
    rec.submit([Task(2, 11, "decode", 1)])
    rec.get_work()
    rec.get_work()
    path = tmp_path / "rec.jsonl"
    path.write_bytes(out.getvalue())
    header = orjson.loads(out.getvalue().splitlines()[0])
    assert header["policy"] == f"tests.plugin_policies:{plugin}"
    # A trace names code, never supplies it: an import string in a header is refused,
    # saying how to run it; given on the command line, the recording replays under it.
    r = run_cli("replay", str(path), "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "an import string (module:Class)" in r.stderr.decode()
    assert "give it with -p on the command line" in r.stderr.decode()
    r = run_cli("replay", str(path), "-p", header["policy"], "--check", "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr


def test_a_file_recording_records_the_call_that_raised() -> None:
    class Faulty(DecodeFirstScheduler):
        def cancel(self, sid: object) -> list[Task]:  # type: ignore[override]
            raise ValueError("no")

    out = io.BytesIO()
    rec = RecordingScheduler(Faulty(10, 2, 4), out)
    with pytest.raises(ValueError):
        rec.cancel(7)
    last = orjson.loads(out.getvalue().splitlines()[-1])
    assert last == {"op": "cancel", "sid": 7, "meta": {"raised": "ValueError: no"}}


@pytest.mark.parametrize("mode", ["file", "ring"])
def test_a_recording_whose_scheduler_raised_fails_check_unless_allowed_incomplete(
    tmp_path: Path, mode: str
) -> None:
    target = tmp_path / "rec.jsonl"
    subprocess.run(
        [sys.executable, "-c", RAISES_AT_30, mode, str(target)], check=True, capture_output=True
    )
    trace = target if mode == "file" else tmp_path / "rec.jsonl.crash-1.jsonl"
    r = run_cli("replay", str(trace), "-p", "decode-first", "--check", "-o", os.devnull)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert f"{trace}:" in err and "raised in get_work (RuntimeError: boom)" in err
    r = run_cli(
        "replay", str(trace), "-p", "decode-first", "--check", "--allow-incomplete",
        "-o", os.devnull,
    )  # fmt: skip
    assert r.returncode == 0 and b"checked 29 of 30 batches" in r.stderr
