"""A file written whole or not at all, whenever a stop arrives."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedcli.streams import interrupt
from schedcli.streams.interrupt import Stopped
from schedcli.streams.output import atomic_output


@pytest.fixture
def stop_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupt.install()
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_stop_while_the_temporary_file_is_made_leaves_no_hidden_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_handlers: None
) -> None:
    real = tempfile.mkstemp

    def stopped_inside(*args: object, **kwargs: object) -> tuple[int, str]:
        made = real(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before the name is handed back
        return made  # type: ignore[no-any-return]

    monkeypatch.setattr(tempfile, "mkstemp", stopped_inside)
    with pytest.raises(Stopped), atomic_output(str(tmp_path / "golden.jsonl")) as out:
        out.write(b"never\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_stop_inside_a_nested_hold_is_raised_once_by_the_outermost(
    stop_handlers: None,
) -> None:
    still_held: list[bool] = []
    with pytest.raises(Stopped) as raised, interrupt.whole_write():
        with interrupt.whole_write():
            os.kill(os.getpid(), signal.SIGINT)
        still_held.append(interrupt.guard.writing)  # the inner hold ended, not the outer
    assert still_held == [True]
    assert raised.value.exit_code == 130
    assert not interrupt.guard.writing and interrupt.guard.held is None


def test_a_stop_while_writing_leaves_the_old_file_and_no_hidden_one(
    tmp_path: Path, stop_handlers: None
) -> None:
    target = tmp_path / "golden.jsonl"
    target.write_bytes(b"old\n")
    with pytest.raises(Stopped), atomic_output(str(target)) as out:
        out.write(b"new, half")
        os.kill(os.getpid(), signal.SIGTERM)
    assert [p.name for p in tmp_path.iterdir()] == ["golden.jsonl"]
    assert target.read_bytes() == b"old\n"
