"""The debugger's words, apart from the screen: breakpoints as typed, and the command the
copy key gives (run, it shows the same step)."""

from __future__ import annotations

import shlex

import pytest

from schedcli.app.debug.navigation import Breakpoint, parse_breakpoint, parse_id, reproduce
from schedcli.model.errors import UsageError


@pytest.mark.parametrize(
    ("typed", "parsed"),
    [
        ("wait>50", Breakpoint("wait", 50)),
        (" session=7 ", Breakpoint("session", 7)),
        ("session=chat1", Breakpoint("session", "chat1")),
        ("reason=no_room", Breakpoint("reason", "no_room")),
        ("under=50%", Breakpoint("under", 50.0)),
        ("under=12.5", Breakpoint("under", 12.5)),
        ("preempt", Breakpoint("preempt")),
        ("break", Breakpoint("break")),
        ("div", Breakpoint("div")),
    ],
)
def test_each_breakpoint_kind_reads_as_typed_and_says_itself_back(
    typed: str, parsed: Breakpoint
) -> None:
    assert parse_breakpoint(typed) == parsed
    assert parse_breakpoint(parsed.text) == parsed


@pytest.mark.parametrize(
    "typed",
    ["", "wait>", "wait>-1", "wait>1e9999", "under=0", "under=101%", "under=nan", "reason=", "x"],
)
def test_a_breakpoint_that_is_not_one_is_a_usage_error(typed: str) -> None:
    with pytest.raises(UsageError):
        parse_breakpoint(typed)


def test_ids_typed_as_numbers_are_integer_ids_else_strings() -> None:
    assert parse_id("42") == 42
    assert parse_id('"42"') == "42"
    assert parse_id("chat1") == "chat1"
    with pytest.raises(UsageError):
        parse_id("  ")


def test_the_copied_command_quotes_the_path_and_carries_policy_and_parameters() -> None:
    command = reproduce("my traces/a.jsonl", 3, "fcfs", {"max_num_seqs": 16, "x": True})
    assert shlex.split(command) == [
        "schedcli", "explain", "my traces/a.jsonl", "--step", "3",
        "-p", "fcfs", "-P", "max_num_seqs=16", "-P", "x=true",
    ]  # fmt: skip
