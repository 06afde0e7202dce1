"""Shrink's candidates: line ranges that slice and add like lists, written from the copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schedcli.engine.shrink.candidates import Ranges
from tests.helpers import run_cli


@st.composite
def ranges_and_list(draw: st.DrawFn) -> tuple[Ranges, list[int]]:
    cuts = sorted(set(draw(st.lists(st.integers(0, 60), max_size=12))))
    spans = [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b]
    return Ranges(spans), [i for a, b in spans for i in range(a, b)]


@given(ranges_and_list(), st.integers(-5, 70), st.integers(-5, 70))
def test_ranges_slice_like_the_list_of_their_lines(
    given_ranges: tuple[Ranges, list[int]], start: int, stop: int
) -> None:
    ranges, items = given_ranges
    assert len(ranges) == len(items)
    assert list(ranges[start:stop]) == items[start:stop]
    assert list(ranges[:start] + ranges[start:]) == items


@given(ranges_and_list(), st.integers(0, 40), st.integers(1, 20))
def test_removing_a_chunk_leaves_the_lines_a_list_would(
    given_ranges: tuple[Ranges, list[int]], start: int, size: int
) -> None:
    ranges, items = given_ranges
    rest = ranges[:start] + ranges[start + size :]
    assert list(rest) == items[:start] + items[start + size :]
    assert all(a < b for a, b in rest.spans)
    assert all(b1 < a2 for (_, b1), (a2, _) in zip(rest.spans, rest.spans[1:], strict=False))


TRACE = (
    b'{"schedcli": 1, "policy": "fcfs",'
    b' "params": {"max_batch_tokens": 8, "max_prefill_chunk_size": 8}}\n'
    b'{"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4}\n'
    b'{"op": "submit", "tid": 2, "sid": 2, "kind": "prefill", "size": 4}\n'
    b'{"op": "get_work", "expect": [1, 2]}\n'
    b'{"op": "submit", "tid": 3, "sid": 3, "kind": "prefill", "size": 4}\n'
    b'{"op": "submit", "tid": 4, "sid": 4, "kind": "prefill", "size": 4}\n'
    b'{"op": "get_work", "expect": [3]}\n'
)


def test_blank_lines_crlf_and_a_partial_marker_shrink_as_the_clean_trace(tmp_path: Path) -> None:
    clean, messy = tmp_path / "clean.jsonl", tmp_path / "messy.jsonl"
    clean.write_bytes(TRACE)
    lines = TRACE.split(b"\n")
    messy.write_bytes(
        b"\r\n".join([lines[0], b"", *lines[1:4], b"   ", *lines[4:7]])
        + b'\r\n{"partial": {"reason": "interrupted"}}\n'
    )
    out_clean, out_messy = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli("shrink", str(clean), "--until", "check", "-o", str(out_clean)).returncode == 0
    r = run_cli("shrink", str(messy), "--until", "check", "-o", str(out_messy))
    assert r.returncode == 0, r.stderr
    assert out_messy.read_bytes() == out_clean.read_bytes()
    assert out_clean.read_bytes().count(b"\n") < TRACE.count(b"\n")


@given(
    st.integers(1, 40),
    st.data(),
    st.sampled_from([1, 7, 64, 1 << 16]),
)
def test_a_candidate_is_written_as_its_lines_with_their_edits(
    count: int, data: st.DataObject, read: int
) -> None:
    """Whatever ranges, dropped expects and cut groups: the written trace is the kept lines
    in order, each as the candidate has it (the reader seeks by marks every few lines, and
    copies runs past marks by their offsets, in reads of ``read`` bytes), and the trace held
    in memory is the same bytes."""
    import io
    import tempfile

    import orjson

    from schedcli.engine.shrink import candidates
    from schedcli.engine.shrink.candidates import Candidate, Lines

    events = [
        {"op": "get_work", "expect": [i]}
        if i % 3 == 2
        else {"op": "submit", "tasks": [{"tid": i, "sid": i, "kind": "prefill", "size": 1}] * 2}
        for i in range(count)
    ]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, count), max_size=8))))
    kept = Ranges([(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b])
    expects = [i for i in range(count) if i % 3 == 2]
    stripped = sorted(data.draw(st.sets(st.sampled_from(expects))) if expects else [])
    groups = [i for i in range(count) if i % 3 != 2]
    cut = data.draw(st.sets(st.sampled_from(groups))) if groups else set()
    tasks: dict[int, list[Any]] = {i: list(events[i]["tasks"])[:1] for i in cut}
    saved = candidates.MARK, candidates._READ
    candidates.MARK, candidates._READ = 4, read
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.jsonl"
            path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
            lines = Lines(str(path))
            try:
                out = io.BytesIO()
                candidate = Candidate(kept, stripped, tasks)
                candidate.write(lines, out)
                # A small candidate is replayed from memory: the same bytes, twice over
                # (the second time from the lines it holds).
                assert candidate.data(lines) == out.getvalue()
                assert candidate.data(lines) == out.getvalue()
            finally:
                lines.close()
    finally:
        candidates.MARK, candidates._READ = saved
    want = []
    for i in kept:
        e = dict(events[i])
        if i in stripped:
            del e["expect"]
        if i in tasks:
            e["tasks"] = tasks[i]
        want.append(e)
    assert [orjson.loads(x) for x in out.getvalue().splitlines()] == want


def test_a_large_trace_is_copied_line_for_line_with_its_marks(tmp_path: Path) -> None:
    """Reads of plain lines are copied whole, the others a line at a time: either way the
    copy holds each event once, stripped, with every MARK-th line's offset and each
    expect's line."""
    from schedcli.engine.shrink.candidates import MARK, Lines

    messy = [b"", b'  {"op": "clear"}\r', b'{"op":"get_work","expect":[]}', b"\t"]
    raw = [b'{"schedcli": 1}']
    for i in range(70_000):
        if (15_000 <= i < 16_000 and i % 7 == 0) or i in (40_002, 55_001):
            raw.append(messy[i % len(messy)])
        else:
            raw.append(b'{"op":"submit","tid":%d,"sid":%d,"kind":"decode","size":1}' % (i, i % 9))
    raw.append(b'{"partial": {"reason": "interrupted"}}')
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(raw) + b"\n")
    events = [line.strip() for line in raw[1:-1] if line.strip()]
    offsets = [0]
    for e in events:
        offsets.append(offsets[-1] + len(e) + 1)
    lines = Lines(str(path))
    try:
        assert lines.header == raw[0]
        assert Path(lines.path).read_bytes() == b"".join(e + b"\n" for e in events)
        assert lines.count == len(events)
        assert list(lines.marks) == offsets[:-1][::MARK]
        assert list(lines.expects) == [k for k, e in enumerate(events) if b"expect" in e]
    finally:
        lines.close()


@given(st.lists(st.integers(0, 300), min_size=1, max_size=50), st.data())
def test_a_candidates_byte_bound_is_never_below_its_lines(
    widths: list[int], data: st.DataObject
) -> None:
    """Whether a candidate is held in memory is decided from the marks alone: the bound is
    at least the bytes its lines take, however long each line is."""
    import tempfile

    import orjson

    from schedcli.engine.shrink import candidates
    from schedcli.engine.shrink.candidates import Lines

    events = [{"op": "clear", "meta": "x" * w} for w in widths]
    raw = [orjson.dumps(e) + b"\n" for e in events]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(events)), max_size=8))))
    kept = Ranges([(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b])
    saved, candidates.MARK = candidates.MARK, 4
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.jsonl"
            path.write_bytes(b"".join(raw))
            lines = Lines(str(path))
            try:
                bound = lines.bound(kept)
            finally:
                lines.close()
    finally:
        candidates.MARK = saved
    assert bound >= sum(len(raw[i]) for i in kept)
    assert bound <= len(b"".join(raw))
