"""Recording a live vLLM engine's scheduler as a request-level trace (docs/recording.md).

Load it with ``--scheduler-cls schedcli.runtimes.vllm.recorder.RecordingVllmScheduler`` (or
``SchedulerConfig.scheduler_cls``); it runs inside vLLM's engine-core process and writes
to ``SCHEDCLI_VLLM_TRACE`` (a path; ``.gz`` compresses), or to the ``trace_path`` given
to its constructor. Every call it sees is recorded in the order the engine made it:
arrivals, client aborts, and each step's schedule with what the step's outputs finished.
``schedcli replay TRACE --check`` then replays it through vLLM's scheduler offline.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import FinishReason
from vllm.v1.request import RequestStatus

from ...formats.requests import RequestTraceWriter
from ...formats.writer import LineBuffer
from ...model.requests import Arrival, Slice, StepPlan
from ...model.task import Id
from ...streams.output import output_stream
from .vllm_build import UNSET, knobs
from .vllm_build import version as vllm_version

TRACE_ENV = "SCHEDCLI_VLLM_TRACE"


def recorded_params(scheduler: Any) -> dict[str, Any]:
    """The live engine's settings, as ``-p vllm``'s parameters (what a replay builds)."""
    config = scheduler.vllm_config
    sched, cache = config.scheduler_config, config.cache_config

    def flag(value: object) -> str:
        return "true" if value else "false"

    blocks, block_size = int(scheduler.kv_cache_config.num_blocks), int(scheduler.block_size)
    max_len = int(config.model_config.max_model_len)
    # The cache the scheduler ran with, replayed as one full-attention group: where that
    # group could not hold a max_model_len request (a hybrid model's cache, an embedded
    # scheduler's), the replay runs it as it ran, past the engine's start-up check.
    fits = -(-max_len // block_size) <= blocks - 1
    found: dict[str, Any] = {
        "max_num_batched_tokens": int(sched.max_num_batched_tokens),
        "max_num_seqs": int(sched.max_num_seqs),
        "num_gpu_blocks": blocks,
        "block_size": block_size,
        "enable_chunked_prefill": flag(sched.enable_chunked_prefill),
        "long_prefill_token_threshold": int(sched.long_prefill_token_threshold),
        "enable_prefix_caching": flag(cache.enable_prefix_caching),
        "policy": str(getattr(sched.policy, "value", sched.policy)),
        "max_model_len": max_len,
        "async_scheduling": flag(isinstance(scheduler, AsyncScheduler)),
        "skip_kv_startup_check": flag(not fits),
    }
    # Every other knob as the engine ran with it, so the replay builds the same scheduler
    # (one the engine left unset is UNSET: vLLM decides in the replay as it did live). The
    # config classes are read from the live configs, not by loading vLLM again, which
    # would configure logging inside the engine's process.
    live = {"SchedulerConfig": sched, "CacheConfig": cache}
    classes: Any = types.SimpleNamespace(SchedulerConfig=type(sched), CacheConfig=type(cache))
    for knob in knobs(classes):
        if knob["name"] not in found:
            value = getattr(live[knob["config"]], knob["name"], None)
            found[knob["name"]] = _as_param(value, knob)
    return found


def _as_param(value: Any, knob: dict[str, Any]) -> Any:
    """A live config's value as the knob's parameter takes it."""
    if value is None:
        return UNSET if knob.get("unset") else knob["default"]
    if knob["kind"] == "bool":
        return "true" if value else "false"
    if knob["kind"] == "str":
        return str(getattr(value, "value", value))
    return value


class _Recording:
    """The trace of one scheduler: its writer, and what a step needs to be written."""

    def __init__(self, scheduler: Any, path: str) -> None:
        self._stack = contextlib.ExitStack()
        self._buffer = LineBuffer(self._stack.enter_context(output_stream(path)))
        self._stack.callback(self._buffer.flush)
        self.prefix_caching = bool(scheduler.vllm_config.cache_config.enable_prefix_caching)
        meta = {
            "recorded_by": "schedcli.runtimes.vllm.recorder.RecordingVllmScheduler",
            "vllm": vllm_version(),
            "kv_cache_groups": len(scheduler.kv_cache_config.kv_cache_groups),
        }
        self.writer = RequestTraceWriter(self._buffer, "vllm", recorded_params(scheduler), meta)
        self.order: dict[str, int] = {}  # arrival number of each request held
        self.arrivals = itertools.count()
        self.lock = threading.Lock()
        self.started = time.perf_counter()
        self.scheduled: dict[int, tuple[list[Slice], list[str], float]] = {}

    def close(self) -> None:
        self._stack.close()


def _sampled(runner_output: Any) -> list[list[Any]]:
    """Each request's sampled token: prefix caching hashes output tokens too, so a replay
    samples the same ones."""
    found = []
    sampled: list[Any] = list(runner_output.sampled_token_ids or ())
    # Row i answers req_ids[i] (0.33 also kept that as req_id_to_index; 0.34 dropped it).
    for index, rid in enumerate(runner_output.req_ids):
        tokens: Any = sampled[index] if index < len(sampled) else []
        if len(tokens):
            found.append([rid, int(tokens[-1])])
    return found


class _Recorder:
    """The recording, over vLLM's Scheduler or AsyncScheduler (the class after it)."""

    split: bool = False  # async scheduling: a step's schedule and its outputs apart
    requests: dict[str, Any]

    def __init__(self, *args: Any, trace_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        path = trace_path or os.environ.get(TRACE_ENV)
        if not path:
            raise ValueError(
                f"{type(self).__name__} needs a trace path: set {TRACE_ENV} (the engine core "
                "builds the scheduler itself) or pass trace_path="
            )
        self._recording = _Recording(self, path)

    def add_request(self, request: Any) -> None:
        rec = self._recording
        with rec.lock:
            fresh = request.request_id not in self.requests
            super().add_request(request)  # type: ignore[misc]
            if not fresh:
                return  # a streaming session's next chunk: not a new request
            rec.order[request.request_id] = next(rec.arrivals)
            tokens = None
            if rec.prefix_caching and request.prompt_token_ids is not None:
                tokens = tuple(request.prompt_token_ids)
            arrival = Arrival(
                request.request_id,
                int(request.num_prompt_tokens),
                int(request.max_tokens),
                int(request.priority),
                tokens,
            )
            rec.writer.arrive(arrival, t=self._now())

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        rec = self._recording
        with rec.lock:
            aborted = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
            if finished_status == RequestStatus.FINISHED_ABORTED:
                for request in sorted(aborted, key=lambda r: rec.order[r.request_id]):
                    rec.writer.abort(request.request_id, t=self._now())
                    del rec.order[request.request_id]
            return aborted

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        rec = self._recording
        with rec.lock:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
            batch = []
            for rid, n in out.num_scheduled_tokens.items():
                request = self.requests[rid]
                position = request.num_computed_tokens - n
                batch.append(Slice(rid, n, position, True))
            preempted = sorted(out.preempted_req_ids or (), key=rec.order.__getitem__)
            rec.scheduled[id(out)] = (batch, preempted, time.perf_counter())
            if self.split:
                rec.writer.schedule(StepPlan(batch, preempted), t=self._now())
            return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        rec = self._recording
        with rec.lock:
            outputs = super().update_from_output(  # type: ignore[misc]
                scheduler_output, model_runner_output
            )
            batch, preempted, began = rec.scheduled.pop(id(scheduler_output), ([], [], 0.0))
            finished: list[str] = []
            stopped: list[str] = []
            for engine_outputs in outputs.values():
                for o in engine_outputs.outputs:
                    if o.finish_reason is None:
                        continue
                    finished.append(o.request_id)
                    if o.finish_reason != FinishReason.LENGTH:
                        stopped.append(o.request_id)  # a stop the replay must be told of
            by_arrival: Callable[[Any], int] = rec.order.__getitem__
            ended: list[Id] = sorted(finished, key=by_arrival)
            wall = round(time.perf_counter() - began, 9) if began else None
            sampled = _sampled(model_runner_output) if rec.prefix_caching else None
            stop: list[Id] = sorted(stopped, key=by_arrival)
            if self.split:
                rec.writer.update(ended, stop=stop, sampled=sampled, wall=wall, t=self._now())
            else:
                plan = StepPlan(batch, list(preempted), list(ended))
                rec.writer.step(plan, stop=stop, sampled=sampled, wall=wall, t=self._now())
            for rid in finished:
                del rec.order[rid]
            return outputs

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            self._recording.close()

    def close_recording(self) -> None:
        """Write out what is gathered and close the trace (``shutdown`` does this too)."""
        self._recording.close()

    def _now(self) -> float:
        return round(time.perf_counter() - self._recording.started, 9)


class RecordingVllmScheduler(_Recorder, Scheduler):  # type: ignore[misc]
    """vLLM's ``Scheduler`` (synchronous: a ``Scheduler`` subclass turns async scheduling
    off), recording each step as one ``step`` event."""


class RecordingVllmAsyncScheduler(_Recorder, AsyncScheduler):  # type: ignore[misc]
    """vLLM's ``AsyncScheduler``, recording each step's plan and its outputs apart
    (``schedule`` and ``update`` events), in the order the engine core called them."""

    split = True
