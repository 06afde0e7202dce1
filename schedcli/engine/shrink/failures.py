"""How a shrink candidate fails: its signature, by ``--until`` (check, contract,
diff:POLICY, cmd:SHELL), at either level."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...model.errors import InvariantError, Option, SchedcliError, StepMismatch, UsageError
from ...model.records import discard
from ...model.task import id_key
from ..diff import Side, diff_trace
from ..levels.facts import Failure

__all__ = ["Failure", "Test", "failure_test"]
from ..levels.table import level_of_difference
from ..recorded import OutcomeMismatch
from ..run import open_replay

Event = dict[str, Any]


# A candidate's test: its path, and its bytes where it is held in memory (a test that
# needs a file writes them there).
Test = Callable[[str, bytes | None], Failure | None]


def failure_test(
    until: str,
    policy: str | None,
    params: Mapping[str, object],
    drain: bool = False,
    b_params: Mapping[str, object] | None = None,
) -> Test:
    """How a candidate (a trace of either level) fails: ``check``, ``contract``,
    ``diff:POLICY`` (under ``b_params``) or ``cmd:SHELL``; ``drain``: replayed with
    ``--drain``."""
    if b_params and not until.startswith("diff:"):
        raise UsageError(
            Option("b_param"),
            " is for ",
            Option("until", "diff:POLICY"),
            " (the other policy's parameters)",
        )
    if until in ("check", "contract"):
        check = until == "check"
        return lambda path, data: _replay_fails(path, data, policy, params, check, drain)
    if until.startswith("diff:") and until[5:]:
        a, b = Side(policy, dict(params)), Side(until[5:], dict(b_params or {}))
        return lambda path, data: _parts_ways(_on_disk(path, data), a, b)
    if until.startswith("cmd:") and until[4:].strip():
        command = until[4:]
        return lambda path, data: _command_fails(command, _on_disk(path, data))
    raise UsageError(
        Option("until", repr(until)), ": one of check, contract, diff:POLICY, cmd:'SHELL COMMAND'"
    )


def _on_disk(path: str, data: bytes | None) -> str:
    if data is not None:
        with open(path, "wb") as f:
            f.write(data)
    return path


def _parts_ways(path: str, a: Side, b: Side) -> Failure | None:
    try:
        result = diff_trace(path, a, b)
    except SchedcliError:
        return None
    first = result.first
    if first is None:
        return None if result.identical else Failure(0, ("diff", "events"))
    only_a, only_b = first.moved()
    return Failure(0, ("diff", _keys(only_a), _keys(only_b), first.fields is not None), first.step)


def _command_fails(command: str, path: str) -> Failure | None:
    run = subprocess.run(
        command.replace("{}", shlex.quote(path)),
        shell=True,
        env={**os.environ, "TRACE": path},
        capture_output=True,
        check=False,
    )
    return Failure(0, ("cmd", run.returncode)) if run.returncode != 0 else None


def _keys(ids: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(sorted((id_key(x) for x in ids), key=repr))


# A number in a contract message that is not an id: a count, which a smaller trace changes.
_COUNT = re.compile(r"(?<!task )(?<!tid )(?<!chunk )(?<!session )(?<!cancel\()\b\d+\b")
# The tasks a contract message lists as examples (the lost ones, say): a smaller trace
# loses others, the same way.
_TASKS = re.compile(r" \(tasks: [^)]*\)")
_CONTRACT = re.compile(r"broke the Scheduler contract at step (\d+) \(([^)]*)\): (.*)", re.S)


def refusal(
    path: str, policy: str | None, params: Mapping[str, object], drain: bool
) -> SchedcliError | None:
    """The bad input (exit 2) that replaying ``path`` ends with, if it does: its header's
    policy refused, a malformed line."""
    try:
        with open_replay(
            path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
        ) as opened:
            opened.replayer(discard, check=False, drain=drain).replay()
    except SchedcliError as e:
        return e if e.exit_code == 2 else None
    return None


def _replay_fails(
    path: str,
    data: bytes | None,
    policy: str | None,
    params: Mapping[str, object],
    check: bool,
    drain: bool,
) -> Failure | None:
    try:
        with open_replay(
            path,
            policy=policy,
            params=params,
            note=lambda _: None,
            allow_incomplete=True,
            data=data,
        ) as opened:
            opened.replayer(discard, check=check, drain=drain).replay()
    except StepMismatch as e:
        return level_of_difference(e).failure(e)
    except OutcomeMismatch as e:
        return Failure(e.line, ("outcome", e.recorded, e.replayed))
    except InvariantError as e:
        return None if check else _broke(str(e))
    except SchedcliError:
        return None
    return None


def _broke(message: str) -> Failure:
    """A broken contract, its counts and example tasks dropped (a smaller trace changes
    them); at the task level, located at the line the message names. A stall keeps the
    first of what it names stuck, and why: what blocks the rest."""
    found = _CONTRACT.search(message)
    if found is None:  # the request level's message names no line
        return Failure(0, ("contract", *_stuck(_COUNT.sub("N", message))))
    step, where, said = found.groups()
    line = int(where[5:]) if where.startswith("line ") and where[5:].isdigit() else 0
    signature = ("contract", *_stuck(_COUNT.sub("N", _TASKS.sub("", said))))
    return Failure(line, signature, int(step))


# What a stall names first: "Stuck: request "r4" (kv_blocks: ...", "Stuck: task 3 (...".
_FIRST_STUCK = re.compile(r'Stuck: ((?:task|request) (?:"[^"]*"|[^ ,(]+))(?: \(([a-z_]+)[:)])?')


def _stuck(said: str) -> tuple[str, ...]:
    """A stall's message as its kind, the first thing stuck and that one's reason code."""
    head, sep, _ = said.partition(" Stuck: ")
    if not sep:
        return (said,)
    first = _FIRST_STUCK.search(said)
    return (head, *(first.groups("") if first else ()))
