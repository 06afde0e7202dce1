"""The reader decodes a read's worth of lines at once and falls back to one line at a time
for any read with a problem in it: both ways must give the same events and the same errors.

Small reads (as from a pipe) send every read after the first through the chunk path,
which reads the recorder's spelling of a plain submit itself and the other lines with the
decoder.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli import InputError
from schedcli.formats.schema import Submit, event_decoder
from schedcli.formats.trace import Event, TraceReader, as_event
from schedcli.formats.trace.scan import _canonical_task


class Trickle(io.RawIOBase):
    """A stream that hands out at most ``size`` bytes a read, as a slow pipe does."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data = data
        self._at = 0
        self._size = size

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        piece = self._data[self._at : self._at + min(n, self._size)]
        self._at += len(piece)
        return piece

    read = read1


def shape(e: Event) -> tuple[Any, ...]:
    tasks = [
        (t.tid, t.sid, t.kind, t.size, t.position, t.prepared, t.produce_output, t.priority, t.meta)
        for t in e.tasks or []
    ]
    return (e.op, e.line, e.step, e.t, e.sid, e.expect, e.meta, tasks)


def read_all(data: bytes, size: int) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Events and the problems ``validate`` would list, reading ``size`` bytes at a time.

    Read as the replay reads them, in runs of lines in a row, whose events must carry
    the line numbers their places in the run give them.
    """
    errors: list[str] = []
    reader = TraceReader(Trickle(data, size), "t.jsonl", on_error=lambda e: errors.append(str(e)))
    events = []
    for first, items in reader.runs():
        for i, item in enumerate(items):
            assert isinstance(item, list) or item.line == first + i
            events.append(as_event(item, first + i))
    return [shape(e) for e in events], errors


def read_strictly(data: bytes, size: int) -> tuple[list[tuple[Any, ...]], str | None]:
    """Events up to the first problem, and the problem, as replay reads them."""
    got: list[tuple[Any, ...]] = []
    try:
        for e in TraceReader(Trickle(data, size), "t.jsonl"):
            got.append(shape(e))
    except InputError as e:
        return got, str(e)
    return got, None


SUBMIT = b'{"op":"submit","tid":%d,"sid":%d,"kind":"decode","size":1}\n'
BODY = b"".join(SUBMIT % (i, i % 5) for i in range(1, 400)) + b'{"op":"get_work"}\n'


def test_small_reads_give_the_same_events_as_one_read() -> None:
    assert read_all(BODY, 97) == read_all(BODY, 1 << 20)
    assert len(read_all(BODY, 97)[0]) == 400


def test_a_repeated_key_deep_in_the_file_is_found_at_its_line() -> None:
    bad = b'{"op":"submit","tid":9999,"sid":1,"sid":2,"kind":"decode","size":1}\n'
    data = BODY + bad + BODY
    events, error = read_strictly(data, 500)
    assert error == "t.jsonl:401: duplicate key 'sid' in one object"
    assert len(events) == 400  # every event before it was read first


def test_a_colon_inside_a_string_deep_in_the_file_is_not_a_repeated_key() -> None:
    line = b'{"op":"submit","tid":9999,"sid":"a:b","kind":"decode","size":1}\n'
    events, error = read_strictly(BODY + line + BODY, 500)
    assert error is None and events[400][7][0][1] == "a:b"


def test_blank_lines_deep_in_the_file_keep_the_line_numbers() -> None:
    data = BODY + b"\n  \r\n" + BODY
    events, error = read_strictly(data, 300)
    assert error is None
    assert events[400][1] == 403 and events[-1][1] == 802


def test_a_step_going_backwards_deep_in_the_file_is_found_at_its_line() -> None:
    stepped = b"".join(
        b'{"op":"submit","tid":%d,"sid":1,"kind":"decode","size":1,"step":%d}\n' % (i, i)
        for i in range(1, 300)
    )
    data = stepped + b'{"op":"cancel","sid":1,"step":3}\n'
    events, error = read_strictly(data, 256)
    assert error == "t.jsonl:300: step 3 goes backwards (line 299 had step 299)"
    assert len(events) == 299


def test_steps_going_backwards_twice_in_one_read_keep_every_later_line_number() -> None:
    line = b'{"op":"submit","tid":%d,"sid":1,"kind":"decode","size":1,"step":%d}\n'
    plain = b'{"op":"submit","tid":%d,"sid":1,"kind":"decode","size":1}\n'
    data = (
        b'{"op":"clear"}\n'
        + b"".join(line % (i, 10 + i) for i in range(1, 6))
        + line % (90, 1)
        + plain % 91
        + line % (92, 2)
        + b"".join(plain % i for i in range(100, 105))
    )
    events, errors = read_all(data, 1 << 20)  # the first read goes line by line
    later, later_errors = read_all(BODY + data, len(BODY))  # the second read is one chunk
    assert later[400:] == [(e[0], e[1] + 400, *e[2:]) for e in events]
    assert later_errors == [
        "t.jsonl:407: step 1 goes backwards (line 406 had step 15)",
        "t.jsonl:409: step 2 goes backwards (line 406 had step 15)",
    ]
    assert errors == [
        "t.jsonl:7: step 1 goes backwards (line 6 had step 15)",
        "t.jsonl:9: step 2 goes backwards (line 6 had step 15)",
    ]
    assert [e[1] for e in events][-6:] == [8, 10, 11, 12, 13, 14]


@pytest.mark.parametrize("size", [1, 7, 64, 4096])
def test_every_read_size_gives_the_same_answer(size: int) -> None:
    data = b"\xef\xbb\xbf" + BODY + b'{"op":"cancel","sid":3}'  # a BOM, no final newline
    assert read_all(data, size) == read_all(data, 1 << 20)


LINES = st.sampled_from(
    [
        b'{"op":"submit","tid":1,"sid":1,"kind":"decode","size":1}',
        b'{"op":"submit","tid":2,"sid":"s","kind":"prefill","size":8,"position":0}',
        b'{"op":"submit","tasks":[{"tid":3,"sid":1,"kind":"prefill","size":4}],"meta":{"a":1}}',
        b'{"op":"submit","tid":4,"sid":1,"kind":"decode","size":1,"meta":{"k":[1,{"x":2}]}}',
        b'{"op":"submit","tid":5,"sid":1,"kind":"decode","tokens":[7]}',
        b'{"op":"submit","tid":12,"sid":1,"kind":"prefill","size":2,"prepared":{"size":9,"offset":7}}',
        b'{"op":"submit","tasks":[{"tid":13,"sid":1,"kind":"decode","size":1,"prepared":{"size":1,"offset":0}}]}',
        b'{"op":"submit","tid":14,"sid":1,"kind":"decode","size":1,"prepared":{"size":1,"size":1,"offset":0}}',
        b'{"op":"submit","tid":15,"sid":1,"kind":"prefill","size":3,"prepared":{"size":2,"offset":0}}',
        b'{"op":"submit","tid":6,"sid":1,"kind":"decode","size":1,"priority":0}',
        b'{"op":"submit","tid":7,"sid":1,"sid":1,"kind":"decode","size":1}',
        b'{"op":"submit","tid":8,"sid":"x:y","kind":"decode","size":1}',
        b'{"op":"submit","tid":9,"sid":1,"kind":"decode","size":2,"tokens":[1]}',
        b'{"op":"submit","tid":10,"kind":"decode","size":1}',
        b'{"op":"get_work","expect":[1,"2"]}',
        b'{"op":"get_work","step":null}',
        b'{"op":"cancel","sid":1,"t":0.5}',
        b'{"op":"cancel","sid":2,"step":5}',
        b'{"op":"submit","tid":11,"sid":2,"kind":"decode","size":1,"step":2}',
        b'{"op":"clear"}',
        b'{"op":"nope"}',
        b"not json",
        b"",
        b"   ",
        b'{"op":"get_work"}\r',
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(LINES, min_size=1, max_size=60), st.integers(1, 300))
def test_any_trace_reads_the_same_in_small_reads_as_in_one(lines: list[bytes], size: int) -> None:
    data = b'{"op":"clear"}\n' + b"\n".join(lines) + b"\n"
    assert read_all(data, size) == read_all(data, 1 << 20)
    assert read_strictly(data, size) == read_strictly(data, 1 << 20)


NUMBERS = st.one_of(
    st.integers(0, 10**20).map(lambda n: str(n).encode()),
    st.sampled_from(
        [b"0", b"00", b"01", b"-1", b"-0", b"+1", b"1.0", b"1e2", b"1_0", b" 1", b"", b'"7"']
    ),
    st.sampled_from([b"999999999999999999", b"1000000000000000000", b"9223372036854775808"]),
)
KIND = st.sampled_from([b"decode", b"prefill", b"Decode", b"prefil", b"decodes"])
END = st.sampled_from(
    [b"}", b"} ", b"}\r", b"}}", b'}}{"op":"clear"}', b',"step":1}', b',"tid":1}', b""]
)


@st.composite
def near_canonical(draw: st.DrawFn) -> bytes:
    """The recorder's spelling of a plain submit, and lines a byte or a number away."""
    tid, sid, size = draw(NUMBERS), draw(NUMBERS), draw(NUMBERS)
    sep = draw(st.sampled_from([b"", b"", b"", b" "]))
    return (
        b'{"op":"submit","tid":' + tid + b',"sid":' + sid + b',' + sep + b'"kind":"'
        + draw(KIND) + b'","size":' + size + draw(END)
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(near_canonical(), LINES), min_size=1, max_size=40), st.integers(1, 300))
def test_the_recorders_spelling_reads_as_the_decoder_reads_it(
    lines: list[bytes], size: int
) -> None:
    data = b'{"op":"clear"}\n' + b"\n".join(lines) + b"\n"
    assert read_all(data, size) == read_all(data, 1 << 20)
    assert read_strictly(data, size) == read_strictly(data, 1 << 20)


@settings(max_examples=500, deadline=None)
@given(near_canonical())
def test_the_scan_reads_a_line_as_the_decoder_does_or_leaves_it(line: bytes) -> None:
    """The byte scan of the recorder's spelling (used where the core is compiled) on its
    own: the decoder's task, or no answer."""
    task, end = _canonical_task(b"x" + line + b"\n", 1)
    if task is None:
        assert end == 1
        return
    assert end == len(line) + 2
    submit = event_decoder.decode(line)
    assert isinstance(submit, Submit)
    assert (task.tid, task.sid, task.kind, task.size) == (
        submit.tid, submit.sid, submit.kind, submit.size
    )  # fmt: skip
    assert (task.position, task.produce_output, task.priority, task.meta) == (None, None, 0, None)
    assert line.count(b":") == 5  # five keys, none repeated


def test_the_scan_is_used_where_the_core_is_compiled() -> None:
    import schedcli
    from schedcli.formats.trace import scan

    assert (schedcli.CORE == "compiled") == scan._SCAN


def test_a_read_of_tasks_with_prepared_inputs_is_decoded_at_once() -> None:
    # Their nested keys are counted as decoded: no repeated key, so no line-by-line re-read.
    from schedcli.formats.trace import decode_chunk

    body = (
        b'{"op":"submit","tid":1,"sid":1,"kind":"prefill","size":2,"prepared":{"size":9,"offset":7}}\n'
        b'{"op":"submit","tasks":[{"tid":2,"sid":1,"kind":"decode","size":1,'
        b'"prepared":{"size":1,"offset":0}}],"meta":{"a":1}}\n'
    )
    decoded = decode_chunk(1, body, 2)
    assert decoded is not None
    events = [as_event(x, 1 + i) for i, x in enumerate(decoded[0])]
    assert [t.prepared for e in events for t in e.tasks or []] == [(9, 7), (1, 0)]


def test_recorded_submits_read_as_their_tasks_at_their_lines() -> None:
    lines = [
        b'{"op":"submit","tid":999999999999999999,"sid":0,"kind":"prefill","size":0}',
        b'{"op":"submit","tid":1000000000000000000,"sid":3,"kind":"decode","size":1}',
        b'{"op":"get_work"}',
        b'{"op":"submit","tid":5,"sid":12,"kind":"decode","size":1}',
    ]
    data = BODY + b"\n".join(lines) + b"\n"
    events, error = read_strictly(data, len(BODY))
    assert error is None
    tasks = [(e[1], e[7][0][:4]) for e in events[400:] if e[0] == "submit"]
    assert tasks == [
        (401, (999999999999999999, 0, "prefill", 0)),
        (402, (10**18, 3, "decode", 1)),
        (404, (5, 12, "decode", 1)),
    ]


def test_a_recorded_submit_with_a_leading_zero_is_refused_at_its_line() -> None:
    bad = b'{"op":"submit","tid":07,"sid":1,"kind":"decode","size":1}\n'
    events, error = read_strictly(BODY + bad + BODY, len(BODY))
    assert error is not None and error.startswith("t.jsonl:401: ")
    assert len(events) == 400


def test_a_recorded_submit_with_more_after_its_brace_is_refused_at_its_line() -> None:
    bad = b'{"op":"submit","tid":7,"sid":1,"kind":"decode","size":1}}{"op":"clear"}\n'
    events, error = read_strictly(BODY + bad + BODY, len(BODY))
    assert error is not None and error.startswith("t.jsonl:401: ")
    assert len(events) == 400


def test_a_line_too_long_is_refused_while_it_is_still_arriving() -> None:
    long_line = b'{"op":"clear","meta":"' + b"x" * 5000 + b'"}\n'
    reader = TraceReader(Trickle(BODY + long_line, 100), "t.jsonl", max_line_bytes=1000)
    with pytest.raises(InputError, match=r"t\.jsonl:401: line is longer than --max-line-bytes"):
        for _ in reader:
            pass
