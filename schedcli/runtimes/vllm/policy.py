"""vLLM's own v1 scheduler as a request-level policy (``-p vllm``; the ``vllm`` extra).

The scheduler runs offline on CPU: a Llama-shaped config without weights, no tokenizer,
a KV cache of ``num_gpu_blocks`` blocks. Each step is ``schedule()`` then
``update_from_output()`` with one sampled token for every request whose slice reached its
last known token (as the GPU runner does). vLLM loads once per process.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ...model.limits import MAX_BLOCK_SIZE, MAX_KV_BLOCKS, MAX_MODEL_LEN, MAX_RUNNING_SEQS
from ...model.records import Left
from ...model.requests import (
    KV_BLOCKS,
    LONG_PREFILL,
    MAX_SEQS,
    PREEMPTED,
    QUEUE,
    TOKEN_BUDGET,
    Arrival,
    RequestScheduler,
    Slice,
    StepPlan,
)
from ...model.scheduler import Param
from ...model.task import PREFILL, Id, Task
from .build import ON_OFF, available, build, flag, load

TOKEN = 1  # the token every step samples
STOP = -1  # what a trace's ``stop`` samples: every request's stop token, never a real id


class VllmScheduler(RequestScheduler):
    """vLLM v1's Scheduler, run as is: FCFS or priority over a token budget per step,
    chunked prefill, KV-cache blocks with preemption by recompute, prefix caching."""

    name = "vllm"
    PARAMS = (
        Param(
            "max_num_batched_tokens",
            int,
            2048,
            "tokens per step (the budget)",
            1,
            maximum=MAX_MODEL_LEN,
        ),
        Param("max_num_seqs", int, 256, "requests running at once", 1, maximum=MAX_RUNNING_SEQS),
        Param("num_gpu_blocks", int, 8192, "KV-cache blocks", 1, maximum=MAX_KV_BLOCKS),
        Param("block_size", int, 16, "tokens per KV-cache block", 1, maximum=MAX_BLOCK_SIZE),
        Param("enable_chunked_prefill", str, "true", "split prompts over steps", choices=ON_OFF),
        Param(
            "long_prefill_token_threshold",
            int,
            0,
            "cap on one prompt's tokens a step",
            0,
            maximum=MAX_MODEL_LEN,
        ),
        Param("enable_prefix_caching", str, "true", "reuse cached prompt blocks", choices=ON_OFF),
        Param("policy", str, "fcfs", "waiting order", choices=("fcfs", "priority")),
        Param(
            "max_model_len",
            int,
            32768,
            "longest prompt + output a request may have",
            2,
            maximum=MAX_MODEL_LEN,
        ),
        Param(
            "async_scheduling",
            str,
            "false",
            "AsyncScheduler (as a recording made with it)",
            choices=ON_OFF,
        ),
        Param(
            "skip_kv_startup_check",
            str,
            "false",
            "run with a KV cache vLLM's engine refuses at start-up (as an embedded Scheduler)",
            choices=ON_OFF,
        ),
    )
    RULE = __doc__

    def __init__(self, **params: Any) -> None:
        values = {p.name: p.default for p in self.PARAMS}
        values.update(params)
        self._params = values
        self._budget = int(values["max_num_batched_tokens"])
        self._max_seqs = int(values["max_num_seqs"])
        self._max_len = int(values["max_model_len"])
        self._blocks = int(values["num_gpu_blocks"])
        self._block_size = int(values["block_size"])
        self._chunked = flag(values["enable_chunked_prefill"])
        self._threshold = int(values["long_prefill_token_threshold"])
        self._vllm = load()
        self._sched = build(self._vllm, values)
        # vLLM's ids are strings: ours (int or str) map to "0", "1", ... in arrival order.
        self._key: dict[Id, str] = {}
        self._rid: dict[str, Id] = {}
        self._order: dict[str, int] = {}
        self._arrived = 0
        self._last: StepPlan | None = None
        self._free = self._running = 0
        self._inflight: deque[tuple[Any, list[str], list[bool]]] = deque()

    @classmethod
    def create(cls, **params: Any) -> VllmScheduler:
        return cls(**params)

    @classmethod
    def available(cls) -> str | None:
        """None when vLLM can be loaded; else what to install."""
        return available()

    @classmethod
    def runtime(cls) -> str | None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"vllm=={version('vllm')}"
        except PackageNotFoundError:
            return None

    @property
    def token_budget(self) -> int | None:
        return self._budget

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def add(self, arrival: Arrival) -> str | None:
        if arrival.rid in self._key:
            return f"request {arrival.rid!r} is already held"
        refused = prompt_refused(arrival.prompt_tokens, self._max_len)
        if refused is not None:
            return refused
        key = str(self._arrived)
        self._arrived += 1
        self._key[arrival.rid], self._rid[key], self._order[key] = (
            key,
            arrival.rid,
            len(self._order),
        )
        v = self._vllm
        prompt = arrival.prompt_tokens
        tokens = list(arrival.tokens) if arrival.tokens is not None else _distinct(key, prompt)
        request = v.Request(
            request_id=key,
            prompt_token_ids=tokens[:prompt],
            sampling_params=v.SamplingParams(
                max_tokens=arrival.max_tokens, ignore_eos=True, stop_token_ids=[STOP]
            ),
            pooling_params=None,
            arrival_time=float(self._order[key]),  # arrival order, not the wall clock
            priority=arrival.priority,
            block_hasher=v.hasher(self._block_size),
        )
        self._sched.add_request(request)
        return None

    def abort(self, rid: Id) -> str | None:
        key = self._key.get(rid)
        request = self._sched.requests.get(key) if key is not None else None
        if key is None or request is None or request.is_finished():
            return None
        where = "running" if request.status == self._vllm.RequestStatus.RUNNING else "waiting"
        self._sched.finish_requests([key], self._vllm.RequestStatus.FINISHED_ABORTED)
        self._forget(key)
        return where

    def has_work(self) -> bool:
        return bool(self._sched.get_num_unfinished_requests())

    def counts(self) -> tuple[int, int]:
        running, waiting = self._sched.get_request_counts()
        return int(running), int(waiting)

    def held(self) -> list[Id]:
        keys = [k for k, r in self._sched.requests.items() if not r.is_finished()]
        return [self._rid[k] for k in sorted(keys, key=self._order.__getitem__)]

    def step(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> StepPlan:
        plan = self.schedule()
        plan.finished = self.update(stop, sampled)
        return plan

    def schedule(self) -> StepPlan:
        """One ``schedule()``: the step's slices and preemptions (its outputs come back
        with ``update``, at once or, under async scheduling, after the next schedule)."""
        sched = self._sched
        out = sched.schedule()
        # The pool as the first waiting request found it: it fails, nothing more is taken.
        self._free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        self._running = len(sched.running)
        keys = list(out.num_scheduled_tokens)
        batch: list[Slice] = []
        for key in keys:
            request = sched.requests[key]
            n = out.num_scheduled_tokens[key]
            position = request.num_computed_tokens - n  # schedule() already advanced it
            decode = n == 1 and request.num_output_tokens > 0 and not request.is_prefill_chunk
            batch.append(
                Slice(self._rid[key], n, position, not decode, not request.is_prefill_chunk)
            )
        self._inflight.append((out, keys, [s.samples for s in batch]))
        by_arrival = self._order.__getitem__
        preempted = [self._rid[k] for k in sorted(out.preempted_req_ids or (), key=by_arrival)]
        plan = StepPlan(batch, preempted)
        self._last = plan
        return plan

    def update(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> list[Id]:
        """The outputs of the oldest step scheduled: a token for each slice that reached
        its request's end (``stop``'s a stop token); the requests that finished."""
        if not self._inflight:
            raise ValueError("update with no step scheduled")
        out, keys, samples = self._inflight.popleft()
        tokens: list[list[int]] = []
        for key, samples_one in zip(keys, samples, strict=True):
            rid = self._rid.get(key)
            if not samples_one or rid is None:
                tokens.append([])
            elif rid in stop:
                tokens.append([STOP])
            else:
                tokens.append([sampled.get(rid, TOKEN) if sampled else TOKEN])
        runner = self._vllm.ModelRunnerOutput(
            req_ids=keys,
            req_id_to_index={k: i for i, k in enumerate(keys)},
            sampled_token_ids=tokens,
        )
        finished = [
            o.request_id
            for outputs in self._sched.update_from_output(out, runner).values()
            for o in outputs.outputs
            if o.finish_reason is not None
        ]
        ended = [self._rid[k] for k in sorted(finished, key=self._order.__getitem__)]
        for key in finished:
            self._forget(key)
        return ended

    def _forget(self, key: str) -> None:
        rid = self._rid.pop(key)
        del self._key[rid]

    def fingerprint(self) -> object | None:
        """What vLLM's next ``schedule()`` decides from: each unfinished request's status
        and progress, the order of the running, waiting and block-holding queues, the
        blocks each holds, and the free-block queue with each block's cached hash (its
        order is what allocation and prefix-cache eviction take next). Step counters are
        left out: they decide nothing here (no KV connector, no streaming input)."""
        sched = self._sched
        manager = sched.kv_cache_manager
        requests = tuple(
            (
                key,
                r.status.value,
                r.num_computed_tokens,
                r.num_tokens,
                r.num_output_tokens,
                r.num_preemptions > 0,
                tuple(tuple(ids) for ids in manager.get_block_ids(key)),
            )
            for key, r in sched.requests.items()
            if not r.is_finished()
        )
        pool = manager.block_pool
        free = tuple(
            (b.block_id, b.block_hash) for b in pool.free_block_queue.get_all_free_blocks()
        )
        return (
            requests,
            tuple(r.request_id for r in sched.running),
            tuple(r.request_id for r in sched.waiting),
            tuple(r.request_id for r in sched.kv_holding_waiting),
            tuple(sorted(r.request_id for r in sched.deferred_waiting)),
            free,
            tuple(self._inflight_keys()),
        )

    def _inflight_keys(self) -> list[tuple[str, ...]]:
        return [tuple(keys) for _, keys, _ in self._inflight]

    def reasons(self) -> list[tuple[Id, str, str]]:
        """Derived after the step from vLLM's state (it gives none): see docs/policies.md."""
        plan = self._last
        if plan is None:
            return []
        sched = self._sched
        preempted = set(plan.preempted)
        left = plan.tokens
        budget_left = self._budget - left
        running, free = self._running, self._free
        watermark = int(sched.kv_cache_manager.watermark_blocks) if running else 0
        full = bool(getattr(sched, "scheduler_reserve_full_isl", False))
        found: list[tuple[Id, str, str]] = []
        for s in plan.batch:
            request = sched.requests.get(self._key.get(s.rid, ""))
            if (
                request is None
                or not s.prefill
                or request.num_computed_tokens >= request.num_tokens
            ):
                continue
            if 0 < self._threshold == s.tokens:
                found.append((s.rid, LONG_PREFILL, f"slice cut to {self._threshold} tokens"))
        head: Id | None = None
        for request in [*sched.kv_holding_waiting, *sched.waiting]:
            rid = self._rid.get(request.request_id)
            if rid is None:
                continue
            need = request.num_tokens - request.num_computed_tokens
            if rid in preempted:
                found.append((rid, PREEMPTED, "preempted this step to free KV blocks"))
            elif preempted:
                found.append((rid, KV_BLOCKS, "a step that preempts admits no waiting request"))
            elif running >= self._max_seqs:
                found.append(
                    (rid, MAX_SEQS, f"{running} running: max_num_seqs is {self._max_seqs}")
                )
            elif budget_left <= 0:
                found.append((rid, TOKEN_BUDGET, f"{left} of {self._budget} tokens scheduled"))
            elif head is not None:
                found.append((rid, QUEUE, f"waits behind request {head!r}"))
            elif not self._chunked and need > budget_left:
                found.append((rid, TOKEN_BUDGET, f"needs {need} tokens whole; {budget_left} left"))
            else:
                tokens = request.num_tokens if full else min(need, budget_left)
                blocks = -(-tokens // self._block_size) + watermark
                kept = f" (with {watermark} kept free)" if watermark else ""
                usable = self._blocks - 1  # the pool keeps one as the null block
                never = (
                    f"; the whole cache holds {usable} ({self._blocks} less the null block), "
                    "so it never will"
                    if blocks - watermark > usable
                    else ""
                )
                found.append(
                    (rid, KV_BLOCKS, f"needs {blocks} KV blocks{kept}; {free} free{never}")
                )
            if head is None and rid not in preempted:
                head = rid
        return found

    def left_behind(self) -> Left:
        """Reasons as the views match them: a waiting request as the slice it would run
        (``RID@POSITION``, its computed tokens), so it pairs with the other side's."""
        found: list[tuple[Task, str, str]] = []
        for rid, code, detail in self.reasons():
            request = self._sched.requests.get(self._key.get(rid, ""))
            position = int(request.num_computed_tokens) if request is not None else 0
            found.append((Task(f"{rid}@{position}", rid, PREFILL, 0), code, detail))
        return found

    def close(self) -> None:
        self._sched.shutdown()


def prompt_refused(prompt: int, max_len: int) -> str | None:
    """What vLLM 0.33's input processing says of a prompt this long, None if it takes it
    (``_validate_prompt_len``, in vLLM's words). It checks nothing else of a request: one
    whose prompt + max_tokens pass max_model_len is admitted and capped there."""
    if prompt == 0:
        return "The decoder prompt cannot be empty"
    if prompt > max_len:
        return (
            f"The decoder prompt (length {prompt}) is longer than the maximum model length "
            f"of {max_len}. Make sure that `max_model_len` is no smaller than the number of "
            "text tokens."
        )
    if prompt == max_len:
        return (
            f"The decoder prompt (length {prompt}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of {max_len}. "
            "Make sure that `max_model_len` is no smaller than the number of text tokens "
            "(prompt + requested output tokens)."
        )
    return None


def _distinct(key: str, length: int) -> list[int]:
    """A prompt no other request shares: prefix caching finds no false hits."""
    base = (int(key) + 1) << 24
    return list(range(base, base + length))


def build_scheduler(params: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
    """A vLLM scheduler (``cls``, default vLLM's own ``Scheduler``) built as ``-p vllm``
    builds it, from its parameters (defaults for those not given): for a recorder's test
    and a bare loop that drive vLLM themselves."""
    values = {p.name: p.default for p in VllmScheduler.PARAMS} | params
    return build(load(), values, cls, **kwargs)
