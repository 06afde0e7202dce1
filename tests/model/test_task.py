"""The task model: what a task keeps and what its copy keeps."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from schedcli import Task


def test_a_task_keeps_its_prepared_input_as_a_plain_tuple_and_so_does_its_copy() -> None:
    # The C++ shim reads task.prepared as exactly a tuple of two ints, or None.
    t = Task(1, 7, "prefill", 256, position=512, prepared=(900, 512), meta={"k": 1})
    assert t.prepared == (900, 512) and type(t.prepared) is tuple
    twin = t.copy()
    assert twin is not t and twin.prepared == (900, 512) and type(twin.prepared) is tuple
    assert (twin.size, twin.position, twin.tokens, twin.meta) == (256, 512, None, {"k": 1})
    assert Task(2, 7, "decode", 1).prepared is None
    assert Task(2, 7, "decode", 1).copy().prepared is None


@pytest.mark.parametrize(
    ("size", "prepared", "tokens", "words"),
    [
        (4, (4, 1), None, "runs past"),  # offset 1 + size 4 > 4
        (0, (0, 0), None, "backing size >= 1"),
        (1, (5, -1), None, "offset >= 0"),
        (1, (5,), None, "(backing size, offset)"),
        (1, [5, 0], None, "(backing size, offset)"),
        (1, (5.0, 0), None, "integers"),
        (1, (True, 0), None, "integers"),
        (None, (5, 0), [1, 2], "tokens or prepared, not both"),
    ],
)
def test_a_task_refuses_a_prepared_input_that_could_not_hold_its_slice(
    size: int | None, prepared: Any, tokens: list[int] | None, words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Task(1, 1, "prefill", size, prepared=prepared, tokens=tokens)


def test_a_slice_may_end_exactly_at_the_end_of_its_prepared_input() -> None:
    assert Task(1, 1, "prefill", 4, prepared=(10, 6)).prepared == (10, 6)
    assert Task(1, 1, "decode", 0, prepared=(1, 1)).prepared == (1, 1)


def test_a_task_with_a_float_id_is_refused_in_both_cores() -> None:
    for args in ((1.5, 1), (1, 2.5)):
        with pytest.raises(TypeError):
            Task(*args, "decode", 1)  # type: ignore[arg-type]
    code = (
        "from schedcli import Task\ntry:\n Task(1.5, 1, 'decode', 1)\n"
        "except TypeError:\n print('refused')"
    )
    for pure in ("1", ""):
        env = {**os.environ, "SCHEDCLI_PURE_PYTHON": pure}
        import subprocess

        done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
        assert done.stdout.strip() == b"refused"
