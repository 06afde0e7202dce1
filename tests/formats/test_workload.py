"""formats/workload.py: a workload's requests, refused at their line when out of bounds; a
repeated sid refused exactly, in memory that follows the gaps in the ids' numbering, not
how many requests the file has."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcli.formats.workload import SeenIds, read_workload
from schedcli.model.errors import InputError
from schedcli.model.task import id_key
from tests.helpers import located, run_cli

ids = st.one_of(
    st.integers(-5, 40),
    st.integers(-(2**63), 2**63 - 1),
    st.builds(
        lambda p, z, n: f"{p}{'0' * z}{n}",
        st.sampled_from(["", "r", "r0", "a-"]),
        st.integers(0, 2),
        st.integers(0, 30),
    ),
    st.text(max_size=6),
    st.integers(0, 10**25).map(str),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ids, max_size=80))
def test_an_id_is_new_exactly_when_a_set_of_them_says_so(sequence: list[int | str]) -> None:
    seen = SeenIds()
    plain: set[tuple[type, int | str]] = set()
    for sid in sequence:
        assert seen.add(sid) == (id_key(sid) not in plain), sid
        plain.add(id_key(sid))


def test_a_repeated_sid_far_apart_is_refused_at_its_line(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    lines = [{"sid": f"r{i}", "arrival": 0.0, "prompt_tokens": 1, "output_tokens": 1}
             for i in [*range(1000), 500]]  # fmt: skip
    w.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    with pytest.raises(InputError, match=r':1001: sid "r500" appears twice'):
        list(read_workload(str(w)))


def _peak(path: Path) -> int:
    tracemalloc.start()
    try:
        for _ in read_workload(str(path)):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_ten_times_the_requests_holds_no_more_memory(tmp_path: Path) -> None:
    paths = []
    for n in (10_000, 100_000):
        path = tmp_path / f"w{n}.jsonl"
        path.write_bytes(b"".join(
            b'{"sid":%d,"arrival":%d,"prompt_tokens":3,"output_tokens":2}\n' % (i, i)
            for i in range(n)
        ))  # fmt: skip
        paths.append(path)
    small, large = _peak(paths[0]), _peak(paths[1])
    assert large < small + 512 * 1024, (small, large)  # a set of every sid: megabytes more


def test_a_request_of_nine_quintillion_tokens_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"sid":0,"arrival":0,"prompt_tokens":9000000000000000000,"output_tokens":1}\n')
    start = time.monotonic()
    err = located(run_cli("simulate", str(path)), path)
    assert "prompt_tokens must be between 1 and 2,097,152" in err
    assert time.monotonic() - start < 10
