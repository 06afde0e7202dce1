"""engine/travel/wire.py: the debugger's messages between processes, framed by length."""

from __future__ import annotations

import os
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.engine.travel.wire import _HEAD, receive, send, whole, write_all

# What orjson carries unchanged: JSON values, with 64-bit integers and finite floats.
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
messages = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def through_a_pipe(sent: list[Any]) -> list[Any]:
    """Each message sent down a pipe by one thread, read back by this one until the end."""
    r, w = os.pipe()

    def writer() -> None:
        try:
            for message in sent:
                send(w, message)
        finally:
            os.close(w)

    thread = threading.Thread(target=writer)
    thread.start()
    got = []
    try:
        while (message := receive(r)) is not None:
            got.append(message)
    finally:
        thread.join()
        os.close(r)
    return got


@settings(max_examples=60, deadline=None)
@given(st.lists(messages.filter(lambda m: m is not None), max_size=6))
def test_any_messages_arrive_whole_and_in_order(sent: list[Any]) -> None:
    assert through_a_pipe(sent) == sent


def test_a_message_larger_than_a_pipe_arrives_whole() -> None:
    big = {"queue": [{"tid": i, "why": "x" * 50} for i in range(40_000)]}  # ~3 MB
    assert through_a_pipe([big, "after"]) == [big, "after"]


def test_the_end_of_the_stream_reads_as_none_even_mid_message() -> None:
    r, w = os.pipe()
    send(w, {"id": 1})
    write_all(w, _HEAD.pack(10) + b'{"id"')  # a writer gone halfway through its message
    os.close(w)
    assert receive(r) == {"id": 1}
    assert receive(r) is None
    os.close(r)


@given(messages)
def test_whole_is_exactly_one_framed_message(message: Any) -> None:
    r, w = os.pipe()
    try:
        send(w, message)
        framed = os.read(r, 1 << 20)
    finally:
        os.close(r)
        os.close(w)
    assert whole(framed)
    assert not whole(framed[:-1]) and not whole(framed + b" ") and not whole(framed[:3])
