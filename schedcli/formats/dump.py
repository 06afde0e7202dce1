"""The replay dump: writing records as JSON Lines, filtering them, comparing with a golden."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, BinaryIO

import orjson

from ..model.errors import InputError
from ..model.limits import INT_MAX, INT_MIN, BoundError, depth_within
from ..model.records import Record
from ..model.steps import Emitted, Step
from ..model.task import Id, Task, same_id
from ..streams.source import display_name, numbered_lines, open_binary
from .kinds import check_kind

_DUMP_OPTIONS = orjson.OPT_APPEND_NEWLINE


def encode(record: Record) -> bytes:
    """One dump line. orjson writes keys in insertion order, so output is byte-stable."""
    return orjson.dumps(record, option=_DUMP_OPTIONS)


class RecordFilter:
    """Passes on the records a user asked to see (--steps, --session); ``end`` always."""

    def __init__(
        self,
        emit: Callable[[Emitted], None],
        *,
        steps: Container[int] | None,
        session: Id | None,
        upcoming_step: Callable[[], int],
    ) -> None:
        self.emit = emit
        self.steps = steps
        self.session = session
        self.upcoming_step = upcoming_step
        self.passed = 0  # records that got through, ``end`` aside

    def __call__(self, record: Emitted) -> None:
        if isinstance(record, Step):
            self._step(record)
            return
        if "end" in record:
            self.emit(record)
            return
        steps, sid = self.steps, self.session
        if steps is not None and self.upcoming_step() not in steps:
            return
        if sid is not None:
            record = self._only_session(record, sid)
            if not record:
                return
        self.passed += 1
        self.emit(record)

    def _step(self, step: Step) -> None:
        if self.steps is not None and step.step not in self.steps:
            return
        sid = self.session
        if sid is not None:
            mine = [e for e in step.batch if same_id(e["sid"], sid)]
            if not mine:
                return
            step = step.with_batch(mine)
        self.passed += 1
        self.emit(step)

    @staticmethod
    def _only_session(record: Record, sid: Id) -> Record:
        op = record.get("op")
        if op == "cancel":
            return record if same_id(record["sid"], sid) else {}
        if op == "submit":
            return record if any(same_id(s, sid) for s in record.get("sids", ())) else {}
        return record


def _id_ok(value: object) -> bool:
    return type(value) is str or (type(value) is int and INT_MIN <= value <= INT_MAX)


def _dropped_ok(value: object) -> bool:
    return value is None or (type(value) is list and all(_id_ok(t) for t in value))


def _entry_ok(e: object) -> bool:
    if type(e) is not dict:
        return False
    size = e.get("size")
    return (
        _id_ok(e.get("tid"))
        and _id_ok(e.get("sid"))
        and e.get("kind") in ("prefill", "decode")
        and type(size) is int
        and 0 <= size <= INT_MAX
    )


def slice_position(entry: Mapping[str, Any]) -> int:
    """A request-level batch entry's position: its tid is ``RID@POSITION``, its sid RID
    (``read_dump`` has checked it)."""
    return int(entry["tid"].rpartition("@")[2])


def _ids_ok(value: object) -> bool:
    return type(value) is list and all(_id_ok(r) for r in value)


def _request_entry_ok(e: Record) -> bool:
    tid, sid = e["tid"], e["sid"]
    if type(tid) is not str:
        return False
    rid, at, position = tid.rpartition("@")
    digits = position.isascii() and position.isdigit() and len(position) <= 19
    return bool(at) and digits and rid == str(sid)


def _request_level_problem(record: Record) -> str | None:
    """What is wrong with a request level's record (a batch record with ``preempted``, an
    update, an abort), read for its requests by ``stats`` and ``report``; None if nothing."""
    if "batch" in record:
        if not (_ids_ok(record["preempted"]) and _ids_ok(record.get("finished", []))):
            return "a request-level batch record's preempted and finished are lists of rids"
        if not all(_request_entry_ok(e) for e in record["batch"]):
            return "a request-level batch entry's tid is RID@POSITION (its sid, '@', a position)"
    elif record.get("op") == "update" and not _ids_ok(record.get("finished")):
        return "an update record's finished is a list of rids"
    elif record.get("op") == "abort" and not _id_ok(record.get("rid")):
        return "an abort record's rid is a 64-bit integer or a string"
    return None


class IncompleteDump(InputError):
    """A dump without its ``end`` record: cut short, or marked ``partial`` by a replay
    that stopped (exit 3, 130, 143)."""


def read_dump(
    path: str,
    *,
    allow_incomplete: bool = False,
    golden: bool = False,
    stream: BinaryIO | None = None,
) -> Iterator[Record]:
    """A dump's records, streamed; a record that cannot be read is ``FILE:LINE: message``.

    A dump is complete only with its ``end`` record, last. Without it, the records are all
    yielded and then ``IncompleteDump`` is raised, unless ``allow_incomplete``. A
    ``golden`` may end instead with the partial record of a contract break (``"exit": 3``),
    yielded: the ending it pins. ``stream``: the dump opened already (``path`` names it).
    """
    name = display_name(path)
    first = True
    last_step: int | None = None
    ended: int | None = None  # the line of the end (or partial) record
    partial: Record | None = None
    opened: AbstractContextManager[BinaryIO] = (
        open_binary(path, name) if stream is None else nullcontext(stream)
    )
    with opened as source:
        for lineno, raw, _ in numbered_lines(source, name):
            if ended is not None:
                raise InputError(
                    name,
                    lineno,
                    f"a record after the {'partial' if partial else 'end'} record "
                    f"at line {ended}: it must be the last",
                )
            if first:
                first = False
                check_kind("dump", raw, name, lineno)
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise InputError(name, lineno, f"not valid JSON: {e}") from None
            if type(record) is not dict:
                raise InputError(name, lineno, "each dump line must be a JSON object")
            if ("op" in record and "line" not in record) or "schedcli" in record:
                raise InputError(name, lineno, "this is a trace, not a dump")
            if "batch" in record and not (
                type(record.get("step")) is int
                and type(record.get("queued")) is int
                and type(record["batch"]) is list
                and all(_entry_ok(e) for e in record["batch"])
            ):
                raise InputError(
                    name,
                    lineno,
                    "a batch record needs an integer step and queued, and entries with "
                    "a tid and sid (64-bit integers or strings), a kind, and a size >= 0",
                )
            if "preempted" in record or record.get("op") in ("update", "abort"):
                problem = _request_level_problem(record)
                if problem is not None:
                    raise InputError(name, lineno, problem)
            if record.get("op") in ("cancel", "clear") and not _dropped_ok(record.get("dropped")):
                raise InputError(
                    name,
                    lineno,
                    f"a {record['op']} record's dropped is a list of the dropped tasks' tids "
                    "(64-bit integers or strings)",
                )
            try:
                depth_within(record, "the record")
            except BoundError as e:
                raise InputError(name, lineno, str(e)) from None
            if "batch" in record:
                step = record["step"]
                if last_step is not None and step <= last_step:
                    raise InputError(
                        name,
                        lineno,
                        f"step {step} after step {last_step}: a dump's steps only increase",
                    )
                last_step = step
            elif "end" in record or "partial" in record:
                ended = lineno
                if "partial" in record and not (golden and pins_break(record)):
                    partial = record
                    continue  # a marker, not a record of the schedule
            yield record
    if (ended is None or partial is not None) and not allow_incomplete:
        why = "no end record"
        if partial is not None:
            why = f"partial: {_reason(partial)}"
        raise IncompleteDump(
            name, None, f"incomplete dump ({why}); --allow-incomplete reads it anyway"
        )


def _reason(partial: Record) -> str:
    body = partial.get("partial")
    reason = body.get("reason") if isinstance(body, dict) else None
    return str(reason) if reason else "the replay stopped before its end"


BROKE = 3  # the exit code of a policy that broke the contract, as a partial record says it


def partial_record(reason: str, steps: int, broke: bool = False) -> Record:
    """The last record of a dump whose replay stopped early (exit 3, 130, 143); ``broke``:
    because the policy broke the contract (``"exit": 3``), an ending a golden may pin."""
    body: dict[str, object] = {"reason": reason, "steps": steps}
    if broke:
        body["exit"] = BROKE
    return {"partial": body}


def pins_break(record: Record) -> bool:
    """A partial record of a contract break: in a golden, the ending it expects."""
    body = record.get("partial")
    return isinstance(body, dict) and body.get("exit") == BROKE and type(body["exit"]) is int


def batch_tasks(record: Record) -> list[Task]:
    """The tasks of a batch record read by :func:`read_dump`."""
    return [Task(e["tid"], e["sid"], e["kind"], e["size"]) for e in record["batch"]]


def ends_request_level(record: Record) -> bool:
    """``record`` is the end record of a request-level replay's dump (its ``mode`` names
    the level): a dump's reader tells the level here, where levels are told."""
    end = record.get("end")
    return isinstance(end, dict) and end.get("mode") == "request"
