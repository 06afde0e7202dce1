"""Where two schedules part ways: one trace under two configurations, or two dumps."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..engine.lockstep import run_in_lockstep
from ..engine.metrics import StepMetrics
from ..engine.replay import Replayer
from ..engine.run import choose_policy, open_replay
from ..formats.dump import Record, batch_tasks, read_dump
from ..formats.source import DEFAULT_MAX_LINE_BYTES, display_name
from ..model.task import ids_only_in
from ..policies.registry import config_label
from .progress import TraceProgress


@dataclass
class Config:
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

    def moved(self) -> tuple[list[Any], list[Any]]:
        """Tids only in a, and only in b."""
        return ids_only_in([e["tid"] for e in self.a or ()], [e["tid"] for e in self.b or ()])


@dataclass
class DiffResult:
    labels: tuple[str, str]
    params: tuple[dict[str, object], dict[str, object]]
    steps_compared: int = 0
    steps_differing: int = 0
    events_differing: int = 0
    first: FirstDifference | None = None
    summaries: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    @property
    def identical(self) -> bool:
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
            "a": {"label": self.labels[0], "params": self.params[0], "metrics": self.summaries[0]},
            "b": {"label": self.labels[1], "params": self.params[1], "metrics": self.summaries[1]},
        }


class _Aligner:
    """Pairs the two sides' batch records by step number as they arrive."""

    def __init__(self, result: DiffResult) -> None:
        self.result = result
        self.a: deque[Record] = deque()
        self.b: deque[Record] = deque()
        self.events_a: deque[bytes] = deque()
        self.events_b: deque[bytes] = deque()

    def sink(self, side: str) -> Any:
        batches = self.a if side == "a" else self.b
        events = self.events_a if side == "a" else self.events_b

        def emit(record: Record) -> None:
            if "batch" in record:
                batches.append(record)
            elif "end" not in record:
                events.append(orjson.dumps(record))

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

    def settle(self, final: bool = False) -> None:
        a, b, result = self.a, self.b, self.result
        while a and b:
            ra, rb = a[0], b[0]
            sa, sb = ra["step"], rb["step"]
            result.steps_compared += 1
            if sa == sb:
                a.popleft()
                b.popleft()
                if ra != rb:  # ids are int or str, never bool
                    fields = None
                    if ra["batch"] == rb["batch"]:
                        fields = (_other_fields(ra), _other_fields(rb))
                    self._differ(sa, ra["batch"], rb["batch"], fields)
            elif sa < sb:
                a.popleft()
                self._differ(sa, ra["batch"], None)
            else:
                b.popleft()
                self._differ(sb, None, rb["batch"])
        while self.events_a and self.events_b:
            if self.events_a.popleft() != self.events_b.popleft():
                result.events_differing += 1
        if final:
            for r in a:
                result.steps_compared += 1
                self._differ(r["step"], r["batch"], None)
            for r in b:
                result.steps_compared += 1
                self._differ(r["step"], None, r["batch"])
            a.clear()
            b.clear()
            result.events_differing += len(self.events_a) + len(self.events_b)


def _other_fields(record: Record) -> Record:
    return {k: v for k, v in record.items() if k not in ("step", "batch")}


def diff_trace(
    path: str,
    a: Config,
    b: Config,
    *,
    drain: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    progress: TraceProgress | None = None,
) -> DiffResult:
    """Replay one trace under two configurations in lockstep and compare every step."""
    with open_replay(path, policy=a.policy, params=a.params, max_line_bytes=max_line_bytes) as ta:
        if progress is not None:
            progress.position = ta.reader.position
        name = display_name(path)
        policy_b, label_b, params_b = choose_policy(ta.reader.header, name, b.policy, b.params)
        # Both sides' whole configurations, defaults included: like is compared with like.
        full_a = ta.policy.params() or dict(ta.params)
        full_b = policy_b.params() or params_b
        result = DiffResult(
            (config_label(ta.policy_name, full_a), config_label(label_b, full_b)),
            (full_a, full_b),
        )
        aligner = _Aligner(result)
        metrics_a = StepMetrics(ta.policy.token_budget)
        metrics_b = StepMetrics(policy_b.token_budget)
        side_a = Replayer(
            ta.policy,
            aligner.sink("a"),
            policy_name=ta.policy_name,
            trace_name=name,
            drain=drain,
            observer=metrics_a,
            on_step=progress.on_step if progress is not None else None,
        )
        side_b = Replayer(
            policy_b,
            aligner.sink("b"),
            policy_name=label_b,
            trace_name=name,
            drain=drain,
            observer=metrics_b,
        )
        run_in_lockstep(ta.reader.runs(), side_a, side_b, aligner.settle)
        aligner.settle(final=True)
        result.summaries = (metrics_a.summary(), metrics_b.summary())
        return result


def diff_dumps(path_a: str, path_b: str) -> DiffResult:
    """Compare two dumps record by record (batches aligned by step)."""
    result = DiffResult((display_name(path_a), display_name(path_b)), ({}, {}))
    aligner = _Aligner(result)
    metrics = (StepMetrics(waits_known=False), StepMetrics(waits_known=False))
    streams = (read_dump(path_a), read_dump(path_b))
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
