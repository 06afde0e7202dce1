"""Where two schedules part ways: one trace (either level) under two configurations in
lockstep, or two dumps, compared step by step as they come (``Aligner``; a golden
comparison uses it too).

What is compared is decisions: each batch, each submit's (arrival's) acceptance, each
cancel's and clear's dropped tasks, the end's counts. A rejection's ``reason`` is the
policy's own words (the C++ interface gives none): shown beside the comparison
(``reworded``), never counted as a difference."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from ..catalog.registry import config_label
from ..formats.dump import batch_tasks, read_dump
from ..model.records import Left, Record
from ..model.steps import Emitted, as_record
from ..model.task import id_key, ids_only_in
from ..streams.source import DEFAULT_MAX_LINE_BYTES, display_name
from .metrics import StepMetrics
from .run import Driver, Progress, open_replay


@dataclass
class Side:
    """One side of a diff: a policy and its parameters (None: the trace header's)."""

    policy: str | None = None
    params: dict[str, object] = field(default_factory=dict)


@dataclass
class FirstDifference:
    step: int
    a: list[Record] | None  # None: no batch at this step on that side
    b: list[Record] | None
    # Same batches, other fields of the record differ (tokens, queued): those fields.
    fields: tuple[Record, Record] | None = None

    # Each side's reasons for what it left out at this step, when they could be had as
    # the step was compared (None: ask a replay of the trace, as run_diff does).
    left: tuple[Left, Left] | None = None

    def moved(self) -> tuple[list[Any], list[Any]]:
        """Tids only in a, and only in b."""
        return ids_only_in([e["tid"] for e in self.a or ()], [e["tid"] for e in self.b or ()])

    def resized(self) -> list[tuple[Any, Any, Any, Any]]:
        """The tasks both sides ran at this step at different sizes (a request-level
        slice: the same request from the same position, cut elsewhere): each one's tid,
        sid, and its size in a and in b, in a's order."""
        b_sizes = {id_key(e["tid"]): e["size"] for e in self.b or ()}
        found = []
        for e in self.a or ():
            other = b_sizes.get(id_key(e["tid"]), e["size"])
            if other != e["size"]:
                found.append((e["tid"], e["sid"], e["size"], other))
        return found


_ABSENT = "(none)"
# Differing records other than batches kept for showing; all of them are counted.
RECORDS_KEPT = 1000


@dataclass
class RecordDifference:
    """A record other than a batch (a rejected submit, a cancel, a clear, the end) that
    differs between the sides: what it is, where, and each field that differs."""

    kind: str
    lines: tuple[int | None, int | None]  # its trace line on each side, if it has one
    fields: list[tuple[str, Any, Any]]  # (field, A's value, B's value); _ABSENT if missing

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "lines": list(self.lines),
            "fields": [{"field": f, "a": a, "b": b} for f, a, b in self.fields],
        }


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: the same values of the same JSON types, so ``3.0`` is not
    ``3`` and ``true`` is not ``1`` (Python's ``==`` says both are)."""
    return bool(a == b) and _same_types(a, b)


def _same_types(a: Any, b: Any) -> bool:
    """Of two values that compare equal: whether every part has the same JSON type (a
    record's kind may be a str subclass, a batch a tuple)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and all(_same_types(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and all(map(_same_types, a, b))
    return _json_type(a) is _json_type(b)


def _json_type(value: Any) -> type:
    for kind in (bool, int, float, str):  # bool first: it is an int too
        if isinstance(value, kind):
            return kind
    return type(value)


def _rejection(record: Record | None) -> bool:
    """A rejected submit's (or arrival's) record: its ``reason`` is the policy's words."""
    return record is not None and record.get("accepted") is False and "op" in record


def _decisions(record: Record | None) -> Record | None:
    """The record without its words (a rejection's ``reason``): what a comparison counts.
    A partial record's reason is compared without the policy's name: the same break under
    another name for the same scheduler (``vllm``, ``vllm@PYTHON``) pins alike."""
    if record is not None and isinstance(record.get("partial"), dict):
        body = record["partial"]
        if isinstance(body.get("reason"), str):
            return {**record, "partial": {**body, "reason": _unnamed(body["reason"])}}
    if not _rejection(record):
        return record
    assert record is not None
    return {k: v for k, v in record.items() if k != "reason"}


# How a stop's reason names the policy first ("policy 'vllm' broke the ..."): repr's quotes.
_NAMED = re.compile(r"""^policy (?:'[^']*'|"[^"]*") """)


def _unnamed(reason: str) -> str:
    return _NAMED.sub("policy ", reason, count=1)


def reworded(a: Record | None, b: Record | None) -> RecordDifference | None:
    """Two rejections at the same place whose reasons are worded differently: both
    reasons, for showing beside the comparison (never a difference); None otherwise."""
    if not (_rejection(a) and _rejection(b)):
        return None
    assert a is not None and b is not None
    ra, rb = a.get("reason", _ABSENT), b.get("reason", _ABSENT)
    if same(ra, rb):
        return None
    kind = str(a.get("op", "record"))
    return RecordDifference(kind, (_line(a), _line(b)), [("reason", ra, rb)])


def record_difference(a: Record | None, b: Record | None) -> RecordDifference | None:
    """How two records at the same place differ in what the policies decided, field by
    field; None if they do not (a rejection's reason apart: see ``reworded``)."""
    if same(_decisions(a), _decisions(b)):
        return None
    words = "reason" if _rejection(a) and _rejection(b) else None  # shown by ``reworded``
    kind = "end" if "end" in (a or b or {}) else str((a or b or {}).get("op", "record"))
    if kind == "end":
        a, b = (a or {}).get("end"), (b or {}).get("end")
        if not isinstance(a, dict) or not isinstance(b, dict):
            return RecordDifference(kind, (None, None), [("end", a or _ABSENT, b or _ABSENT)])
    elif a is None or b is None:
        return RecordDifference(
            kind, (_line(a), _line(b)), [("record", a or _ABSENT, b or _ABSENT)]
        )
    fields = [
        (key, a.get(key, _ABSENT), b.get(key, _ABSENT))
        for key in dict.fromkeys([*a, *b])
        if key not in ("line", words) and not same(a.get(key, _ABSENT), b.get(key, _ABSENT))
    ]
    lines = (None, None) if kind == "end" else (_line(a), _line(b))
    return RecordDifference(kind, lines, fields or [("line", _line(a), _line(b))])


def _line(record: Record | None) -> int | None:
    line = (record or {}).get("line")
    return line if type(line) is int else None


@dataclass
class DiffResult:
    labels: tuple[str, str]
    params: tuple[dict[str, object], dict[str, object]]
    steps_compared: int = 0
    steps_differing: int = 0
    events_differing: int = 0
    first: FirstDifference | None = None
    summaries: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    records: list[RecordDifference] = field(default_factory=list)  # the first RECORDS_KEPT
    # Rejections on both sides whose reasons are worded differently: shown, not counted
    # in ``identical`` (the first RECORDS_KEPT kept, all counted).
    reasons_differing: int = 0
    reasons: list[RecordDifference] = field(default_factory=list)

    def record_differs(self, difference: RecordDifference) -> None:
        self.events_differing += 1
        if len(self.records) < RECORDS_KEPT:
            self.records.append(difference)

    def reason_differs(self, difference: RecordDifference) -> None:
        self.reasons_differing += 1
        if len(self.reasons) < RECORDS_KEPT:
            self.reasons.append(difference)

    @property
    def identical(self) -> bool:
        """The same decisions at every step and record (reasons' wording not counted)."""
        return self.steps_differing == 0 and self.events_differing == 0

    def to_json(self) -> dict[str, Any]:
        first: dict[str, Any] | None = None
        if self.first is not None:
            only_a, only_b = self.first.moved()
            first = {
                "step": self.first.step,
                "a": self.first.a,
                "b": self.first.b,
                "only_in_a": only_a,
                "only_in_b": only_b,
            }
        return {
            "identical": self.identical,
            "steps_compared": self.steps_compared,
            "steps_differing": self.steps_differing,
            "events_differing": self.events_differing,
            "first_difference": first,
            "records_differing": [r.to_json() for r in self.records],
            "reasons_differing": self.reasons_differing,
            "reasons_worded_differently": [r.to_json() for r in self.reasons],
            "a": {"label": self.labels[0], "params": self.params[0], "metrics": self.summaries[0]},
            "b": {"label": self.labels[1], "params": self.params[1], "metrics": self.summaries[1]},
        }


class Aligner:
    """Pairs the two sides' records as they arrive: batches by step number, other records
    in order, and the end records at the end. ``diff`` (of two replays or two dumps) and
    ``replay --golden`` all compare through it, so they agree on every pair of dumps."""

    def __init__(self, result: DiffResult) -> None:
        self.result = result
        self.a: deque[Record] = deque()
        self.b: deque[Record] = deque()
        self.events_a: deque[Record] = deque()
        self.events_b: deque[Record] = deque()
        self.ends: list[Record | None] = [None, None]
        # Told the step of the first difference as soon as it is found, while the
        # policies still stand where they left that batch (their reasons still hold).
        self.on_first: Callable[[int], None] | None = None

    def sink(self, side: str) -> Any:
        batches = self.a if side == "a" else self.b
        events = self.events_a if side == "a" else self.events_b
        index = 0 if side == "a" else 1

        def emit(emitted: Emitted) -> None:
            # Compared as the dump writes them: a live step as its record(), so a replay,
            # a dump and a golden are compared alike.
            record = as_record(emitted)
            if "batch" in record:
                batches.append(record)
                if self.a and self.b:
                    self.settle()  # both sides have this step: compare it now
            elif "end" in record:
                self.ends[index] = record
            else:
                events.append(record)

        return emit

    def _differ(
        self,
        step: int,
        a: list[Record] | None,
        b: list[Record] | None,
        fields: tuple[Record, Record] | None = None,
    ) -> None:
        self.result.steps_differing += 1
        if self.result.first is None:
            self.result.first = FirstDifference(step, a, b, fields)
            if self.on_first is not None:
                self.on_first(step)

    def settle(self, final: bool = False) -> None:
        a, b, result = self.a, self.b, self.result
        while a and b:
            ra, rb = a[0], b[0]
            sa, sb = ra["step"], rb["step"]
            result.steps_compared += 1
            if sa == sb:
                a.popleft()
                b.popleft()
                if not same(ra, rb):
                    fields = None
                    if same(ra["batch"], rb["batch"]):
                        fields = (_other_fields(ra), _other_fields(rb))
                    self._differ(sa, ra["batch"], rb["batch"], fields)
            elif sa < sb:
                a.popleft()
                self._differ(sa, ra["batch"], None)
            else:
                b.popleft()
                self._differ(sb, None, rb["batch"])
        # Other records pair by their trace line (one record a line at most): a side that
        # is already past a line has no record of it.
        events_a, events_b = self.events_a, self.events_b
        while events_a and events_b:
            la, lb = _line(events_a[0]), _line(events_b[0])
            if la is None or lb is None or la == lb:
                self._compare(events_a.popleft(), events_b.popleft())
            elif la < lb:
                self._compare(events_a.popleft(), None)
            else:
                self._compare(None, events_b.popleft())
        if final:
            for r in a:
                result.steps_compared += 1
                self._differ(r["step"], r["batch"], None)
            for r in b:
                result.steps_compared += 1
                self._differ(r["step"], None, r["batch"])
            a.clear()
            b.clear()
            for ra in self.events_a:
                self._compare(ra, None)
            for rb in self.events_b:
                self._compare(None, rb)
            self.events_a.clear()
            self.events_b.clear()
            self._compare(*self.ends)

    def _compare(self, a: Record | None, b: Record | None) -> None:
        difference = record_difference(a, b)
        if difference is not None:
            self.result.record_differs(difference)
        words = reworded(a, b)
        if words is not None:
            self.result.reason_differs(words)


def _other_fields(record: Record) -> Record:
    return {k: v for k, v in record.items() if k not in ("step", "batch")}


def diff_trace(
    path: str,
    a: Side,
    b: Side,
    *,
    drain: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    progress: Progress | None = None,
    allow_incomplete: bool = False,
) -> DiffResult:
    """Replay one trace (either level) under two configurations in lockstep and compare
    every step."""
    with ExitStack() as stack:
        ta = stack.enter_context(
            open_replay(
                path,
                policy=a.policy,
                params=a.params,
                max_line_bytes=max_line_bytes,
                allow_incomplete=allow_incomplete,
            )
        )
        tb = ta.sibling(b.policy, b.params)
        stack.callback(tb.close)
        if progress is not None:
            progress.position = ta.reader.position
        # Both sides' whole configurations, defaults included: like is compared with like.
        full_a, full_b = ta.full_params, tb.full_params
        result = DiffResult(
            (config_label(ta.policy_name, full_a), config_label(tb.policy_name, full_b)),
            (full_a, full_b),
        )
        aligner = Aligner(result)
        ta.explain()  # reasons kept for when asked
        tb.explain()
        metrics_a, metrics_b = ta.step_metrics(), tb.step_metrics()
        on_step = progress.on_step if progress is not None else None
        side_a = ta.replayer(aligner.sink("a"), drain=drain, observer=metrics_a, on_step=on_step)
        side_b = tb.replayer(aligner.sink("b"), drain=drain, observer=metrics_b)
        aligner.on_first = lambda step: _reasons_now(result, step, side_a, side_b)
        side_a.lockstep(side_b, aligner.settle)
        aligner.settle(final=True)
        result.summaries = (metrics_a.summary(), metrics_b.summary())
        return result


def _reasons_now(result: DiffResult, step: int, a: Driver, b: Driver) -> None:
    """Both sides' reasons at the first differing step, if neither has moved past it."""
    first = result.first
    if first is not None and a.last_batch_step == step == b.last_batch_step:
        first.left = (a.left_behind(), b.left_behind())


def diff_dumps(path_a: str, path_b: str, *, allow_incomplete: bool = False) -> DiffResult:
    """Compare two dumps record by record (batches aligned by step, end records too)."""
    result = DiffResult((display_name(path_a), display_name(path_b)), ({}, {}))
    aligner = Aligner(result)
    metrics = (StepMetrics(waits_known=False), StepMetrics(waits_known=False))
    streams = (
        read_dump(path_a, allow_incomplete=allow_incomplete),
        read_dump(path_b, allow_incomplete=allow_incomplete),
    )
    sinks = (aligner.sink("a"), aligner.sink("b"))
    done = [False, False]
    while not all(done):
        for i in (0, 1):
            if done[i]:
                continue
            record = next(streams[i], None)
            if record is None:
                done[i] = True
                continue
            if "batch" in record:
                metrics[i].dispatched(batch_tasks(record), record["step"])
            elif record.get("op") in ("cancel", "clear"):
                metrics[i].dropped_count += len(record.get("dropped") or ())
            sinks[i](record)
        aligner.settle()
    aligner.settle(final=True)
    result.summaries = (metrics[0].summary(), metrics[1].summary())
    return result
