"""vLLM's own v1 scheduler as a request-level policy (``-p vllm``; the ``vllm`` extra).

The scheduler runs offline on CPU: a Llama-shaped config without weights, no tokenizer,
a KV cache of ``num_gpu_blocks`` blocks. Each step is ``schedule()`` then
``update_from_output()`` with one sampled token for every request whose slice reached its
last known token (as the GPU runner does). vLLM loads once per process.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
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

# The version whose internals this module calls (pyproject's ``vllm`` extra pins it).
VLLM_VERSION = "0.33.0"
TOKEN = 1  # the token every step samples
STOP = -1  # what a trace's ``stop`` samples: every request's stop token, never a real id
ON_OFF = ("true", "false")


def _flag(value: object) -> bool:
    return value is True or value == "true"


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
        self._chunked = _flag(values["enable_chunked_prefill"])
        self._threshold = int(values["long_prefill_token_threshold"])
        self._vllm = _load()
        self._sched = _build(self._vllm, values)
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
        total = arrival.prompt_tokens + arrival.max_tokens
        if total > self._max_len:
            return f"prompt + max_tokens ({total}) exceed max_model_len ({self._max_len})"
        blocks = -(-total // self._block_size)
        if blocks > self._blocks:
            return f"needs {blocks} KV blocks; the cache has {self._blocks} (num_gpu_blocks)"
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
                found.append((rid, KV_BLOCKS, f"needs {blocks} KV blocks{kept}; {free} free"))
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


def _distinct(key: str, length: int) -> list[int]:
    """A prompt no other request shares: prefix caching finds no false hits."""
    base = (int(key) + 1) << 24
    return list(range(base, base + length))


class _Vllm:
    """The vLLM names this module uses, imported once per process."""

    def __init__(self) -> None:
        import torch
        from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        from vllm.v1.structured_output import StructuredOutputManager

        self.torch = torch
        self.CacheConfig, self.DeviceConfig, self.ModelConfig = (
            CacheConfig,
            DeviceConfig,
            ModelConfig,
        )
        self.SchedulerConfig, self.VllmConfig = SchedulerConfig, VllmConfig
        self.SamplingParams, self.Scheduler = SamplingParams, Scheduler
        self.AsyncScheduler = AsyncScheduler
        self.FullAttentionSpec, self.KVCacheConfig = FullAttentionSpec, KVCacheConfig
        self.KVCacheGroupSpec, self.ModelRunnerOutput = KVCacheGroupSpec, ModelRunnerOutput
        self.Request, self.RequestStatus = Request, RequestStatus
        self.StructuredOutputManager = StructuredOutputManager
        init_none_hash(sha256)  # deterministic block hashes (no seed from the process)
        self._hashers: dict[int, Any] = {}
        self._get_hasher = get_request_block_hasher
        self._sha256 = sha256

    def hasher(self, block_size: int) -> Any:
        found = self._hashers.get(block_size)
        if found is None:
            found = self._hashers[block_size] = self._get_hasher(block_size, self._sha256)
        return found


_loaded: _Vllm | None = None


def available() -> str | None:
    """None when vLLM can be loaded, at the pinned version; else what to install. (Its
    files and metadata are looked up, not imported: a validate stays fast.)"""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("vllm") is None:
        return f"needs vLLM {VLLM_VERSION}: pip install 'schedcli[vllm]'"
    try:
        found = version("vllm")
    except PackageNotFoundError:
        return f"needs vLLM {VLLM_VERSION}: pip install 'schedcli[vllm]'"
    if found != VLLM_VERSION:
        return (
            f"-p vllm drives vLLM {VLLM_VERSION}'s internals, and {found} is installed: "
            f"pip install 'vllm=={VLLM_VERSION}' (docs/policies.md: moving the pin)"
        )
    return None


def _load() -> _Vllm:
    global _loaded
    if _loaded is None:
        missing = available()
        if missing is not None:
            raise ValueError(missing)
        _quiet_environment()
        _loaded = _Vllm()
    return _loaded


def cache_root() -> Path:
    """Where the offline model config and vLLM's cache live (reused across runs: the
    first build in a new cache inspects the model class in a subprocess, ~25 s)."""
    given = os.environ.get("SCHEDCLI_VLLM_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedcli" / f"vllm-{VLLM_VERSION}"


def _quiet_environment() -> None:
    """vLLM logs to stdout by default; stdout carries our data. Offline, our cache."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_root() / "vllm"))


_CONFIG = (
    b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, '
    b'"intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1, '
    b'"num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": %d, '
    b'"torch_dtype": "float32"}\n'
)


def _model_dir(max_len: int) -> str:
    """A Llama-shaped config, no weights: enough for vLLM to build its configs."""
    folder = cache_root() / f"model-{max_len}"
    config = folder / "config.json"
    text = _CONFIG % max_len
    if not config.exists() or config.read_bytes() != text:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"config.json.{os.getpid()}"
        partial.write_bytes(text)
        partial.replace(config)
    return str(folder)


def build_scheduler(params: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
    """A vLLM scheduler (``cls``, default vLLM's own ``Scheduler``) built as ``-p vllm``
    builds it, from its parameters (defaults for those not given): for a recorder's test
    and a bare loop that drive vLLM themselves."""
    values = {p.name: p.default for p in VllmScheduler.PARAMS} | params
    return _build(_load(), values, cls, **kwargs)


def _build(v: _Vllm, p: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
    max_len = int(p["max_model_len"])
    block_size = int(p["block_size"])
    blocks = int(p["num_gpu_blocks"])
    model = v.ModelConfig(
        model=_model_dir(max_len),
        skip_tokenizer_init=True,
        max_model_len=max_len,
        dtype="float32",
    )
    scheduler = v.SchedulerConfig(
        max_num_seqs=int(p["max_num_seqs"]),
        max_num_batched_tokens=int(p["max_num_batched_tokens"]),
        max_model_len=max_len,
        enable_chunked_prefill=_flag(p["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(p["long_prefill_token_threshold"]),
        policy=str(p["policy"]),
        is_encoder_decoder=False,
    )
    cache = v.CacheConfig(
        block_size=block_size, enable_prefix_caching=_flag(p["enable_prefix_caching"])
    )
    cache.num_gpu_blocks = blocks
    config = v.VllmConfig(
        model_config=model,
        scheduler_config=scheduler,
        cache_config=cache,
        device_config=v.DeviceConfig(device="cpu"),
    )
    spec = v.FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=v.torch.float32
    )
    kv = v.KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)],
    )
    default = v.AsyncScheduler if _flag(p["async_scheduling"]) else v.Scheduler
    return (cls or default)(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=v.StructuredOutputManager(config),
        block_size=block_size,
        **kwargs,
    )
