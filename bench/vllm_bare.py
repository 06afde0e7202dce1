"""A bare loop over vLLM's own Scheduler: the held-out second path ``-p vllm``,
``-p vllm@PYTHON``, ``-P KNOB=...``, ``-p vllm:MODULE:CLASS`` and ``diff --a vllm@A --b
vllm@B`` are checked against (tests/runtimes/test_vllm*.py), and ``simulate -p vllm`` is
timed against (bench/vllm_bench.py).

Standard library and vLLM only, nothing of schedcli's: it is written again from vLLM's
interface (its config classes, ``Scheduler``, ``Request``, ``ModelRunnerOutput``) and the
parameters docs/policies.md documents, never from schedcli/runtimes/vllm, the thing it
checks. It runs under any interpreter with vLLM 0.33 or 0.34, two ways:

- imported: ``bare_loop(requests, params, cost, max_steps, scheduler)``, in this process;
- as a script, ``PYTHON bench/vllm_bare.py``: each line on standard input is one case,
  ``{"requests": [...], "params": {...}, "cost": [a, b, c], "scheduler": "MODULE:CLASS",
  "max_steps": N}`` (all but requests optional), and each line on standard output answers
  it as ``answer`` does. ``--version`` prints the vLLM it runs.

Requests are a workload's (``sid``, ``arrival``, ``prompt_tokens``, ``output_tokens``,
optional ``priority``); params are schedcli's names for every setting, each one not given
taking -p vllm's documented default. The scheduler is built as a program embedding vLLM
builds one: vLLM's ``VllmConfig`` from a weightless Llama-shaped model, every other setting
set by name on ``SchedulerConfig`` or ``CacheConfig`` (whichever has the field), a KV cache
of ``num_gpu_blocks`` blocks in one full-attention group, and vLLM's ``Scheduler`` or the
subclass ``MODULE:CLASS`` names. The loop: a request is added once the clock reaches its
arrival (its arrival time is its arrival order; vLLM's input processing refuses an empty
prompt and one of ``max_model_len`` or more, so those are never added), each step is one
``schedule()`` and one ``update_from_output()`` with one token sampled by every request
whose computed tokens reach its known ones, and the clock advances by a + b * tokens +
c * decodes; an idle scheduler jumps to the next arrival.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

Step = list[Any]  # [batch [[sid, n], ...], preempted [sid, ...], finished [sid, ...]]

# -p vllm's parameters not given, as docs/policies.md documents their defaults.
DEFAULTS: dict[str, Any] = {
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 256,
    "num_gpu_blocks": 8192,
    "block_size": 16,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": True,
    "policy": "fcfs",
    "max_model_len": 32768,
}
# The parameters that shape the scheduler rather than name a config field. The cache is
# always built as given, as an embedded Scheduler's is (skip_kv_startup_check or not).
SHAPE = (
    "num_gpu_blocks",
    "block_size",
    "max_model_len",
    "async_scheduling",
    "skip_kv_startup_check",
)
UNSET = -1  # a field vLLM leaves None by default, given as -1: left to vLLM
COST = (0.005, 0.00002, 0.0001)  # simulate's default cost model: a, b, c
MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_hidden_layers": 1,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "torch_dtype": "float32",
}


class Refused(ValueError):
    """vLLM's config classes refuse the settings (or name no such setting)."""


_models: dict[int, str] = {}
_folder: tempfile.TemporaryDirectory[str] | None = None


def _model(max_len: int) -> str:
    """A weightless model's folder (its config.json only), one per length, kept for the
    process."""
    global _folder
    if max_len not in _models:
        if _folder is None:
            _folder = tempfile.TemporaryDirectory(prefix="vllm-bare-")
        path = Path(_folder.name) / str(max_len)
        path.mkdir()
        (path / "config.json").write_text(json.dumps(MODEL | {"max_position_embeddings": max_len}))
        _models[max_len] = str(path)
    return _models[max_len]


def _value(value: Any) -> Any:
    """schedcli's on/off strings as vLLM's booleans; every other value as it is."""
    if value in ("true", "false"):
        return value == "true"
    return value


def _class(spec: str | None) -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    if not spec:
        return Scheduler
    module, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise Refused(f"{spec} is not a subclass of vLLM's Scheduler")
    return cls


def _left_unset(cls: Any, name: str, max_len: int, size: int) -> bool:
    """Whether vLLM leaves the field None when it is not set (then -1 means unset)."""
    from vllm.config import SchedulerConfig

    if cls is SchedulerConfig:
        plain = cls(max_model_len=max_len, is_encoder_decoder=False)
    else:
        plain = cls(block_size=size)
    return getattr(plain, name, None) is None


def build(params: dict[str, Any], scheduler: str | None = None) -> Any:
    """vLLM's scheduler (or the ``MODULE:CLASS`` subclass) for ``params``; Refused where
    vLLM's config classes refuse them."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    given = DEFAULTS | params
    if _value(given.get("async_scheduling", False)):
        raise Refused("this bare loop runs vLLM's synchronous Scheduler only")
    max_len, size = int(given["max_model_len"]), int(given["block_size"])
    blocks = int(given["num_gpu_blocks"])
    classes = (SchedulerConfig, CacheConfig)
    fields = {cls: {f.name for f in dataclasses.fields(cls) if f.init} for cls in classes}
    knobs: dict[Any, dict[str, Any]] = {cls: {} for cls in classes}
    for name, value in given.items():
        if name in SHAPE:
            continue
        owner = next((c for c in classes if name in fields[c]), None)
        if owner is None:
            raise Refused(f"vLLM {version('vllm')} has no setting {name!r}")
        if value == UNSET and _left_unset(owner, name, max_len, size):
            continue
        knobs[owner][name] = _value(value)
    try:
        config = VllmConfig(
            model_config=ModelConfig(
                model=_model(max_len),
                skip_tokenizer_init=True,
                max_model_len=max_len,
                dtype="float32",
            ),
            scheduler_config=SchedulerConfig(
                max_model_len=max_len, is_encoder_decoder=False, **knobs[SchedulerConfig]
            ),
            cache_config=CacheConfig(block_size=size, **knobs[CacheConfig]),
            device_config=DeviceConfig(device="cpu"),
        )
    except (TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
        raise Refused(" ".join(str(e).split())) from None
    config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(block_size=size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l"], spec)]
    )
    return _class(scheduler)(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=size,
    )


def runner_output(keys: list[str], sampled: list[list[int]]) -> Any:
    """The model runner's answer, as this vLLM spells it: 0.33's also indexes its requests
    (told by the field, not the version)."""
    from vllm.v1.outputs import ModelRunnerOutput

    given: dict[str, Any] = {"req_ids": keys, "sampled_token_ids": sampled}
    if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
        given["req_id_to_index"] = {k: i for i, k in enumerate(keys)}
    return ModelRunnerOutput(**given)


def bare_loop(
    requests: list[dict[str, Any]],
    params: dict[str, Any],
    cost: tuple[float, float, float] | list[float] = COST,
    max_steps: int | None = None,
    scheduler: str | None = None,
) -> list[Step]:
    """Each step of the workload under vLLM's scheduler (the first ``max_steps`` only, if
    given: a scheduler that stalls steps forever); Refused where vLLM refuses the settings."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    sched = build(params, scheduler)
    given = DEFAULTS | params
    init_none_hash(sha256)
    hasher = get_request_block_hasher(int(given["block_size"]), sha256)
    max_len = int(given["max_model_len"])
    a, b, c = cost
    sid: dict[str, Any] = {}
    order: dict[str, int] = {}
    steps: list[Step] = []
    pending = sorted(requests, key=lambda r: r["arrival"])  # stable: ties in workload order
    next_up = 0
    t = pending[0]["arrival"] if pending else 0.0
    while max_steps is None or len(steps) < max_steps:
        while next_up < len(pending) and pending[next_up]["arrival"] <= t:
            r = pending[next_up]
            next_up += 1
            if not 0 < r["prompt_tokens"] < max_len:  # vLLM's input processing refuses it
                continue
            key = f"q{len(order)}"
            order[key], sid[key] = len(order), r["sid"]
            # A first token of its own: every block hash (chained from the first) differs
            # from every other request's, and each id fits the C int32 0.34 keeps them in.
            prompt = [len(order)] + [3] * (r["prompt_tokens"] - 1)
            sched.add_request(
                Request(
                    request_id=key,
                    prompt_token_ids=prompt,
                    sampling_params=SamplingParams(max_tokens=r["output_tokens"], ignore_eos=True),
                    pooling_params=None,
                    arrival_time=float(order[key]),
                    priority=r.get("priority", 0),
                    block_hasher=hasher,
                )
            )
        if not sched.get_num_unfinished_requests():
            if next_up == len(pending):
                return steps
            t = pending[next_up]["arrival"]
            continue
        out = sched.schedule()
        keys = list(out.num_scheduled_tokens)
        sampled, tokens, decodes = [], 0, 0
        for key in keys:
            request = sched.requests[key]
            n = int(out.num_scheduled_tokens[key])
            tokens += n
            reached = request.num_computed_tokens >= request.num_tokens
            if n == 1 and request.num_output_tokens > 0 and reached:
                decodes += 1
            sampled.append([9] if reached else [])
        outputs = sched.update_from_output(out, runner_output(keys, sampled))
        finished = [
            o.request_id for group in outputs.values() for o in group.outputs if o.finish_reason
        ]
        steps.append(
            [
                [[sid[k], int(out.num_scheduled_tokens[k])] for k in keys],
                [sid[k] for k in sorted(out.preempted_req_ids or (), key=order.__getitem__)],
                [sid[k] for k in sorted(finished, key=order.__getitem__)],
            ]
        )
        t += a + b * tokens + c * decodes
    return steps


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """One case's answer: ``{"steps": [...]}``, or ``{"refused": TEXT}`` where vLLM's
    config classes refuse its settings."""
    try:
        steps = bare_loop(
            case["requests"],
            case.get("params", {}),
            case.get("cost", COST),
            case.get("max_steps"),
            case.get("scheduler"),
        )
    except Refused as e:
        return {"refused": str(e)}
    return {"steps": steps}


def _environment() -> None:
    """vLLM quiet and offline, its caches kept apart from schedcli's."""
    for key, value in (
        ("VLLM_LOGGING_LEVEL", "ERROR"),
        ("VLLM_LOGGING_STREAM", "ext://sys.stderr"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("VLLM_NO_USAGE_STATS", "1"),
    ):
        os.environ.setdefault(key, value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(base) / "schedcli" / f"bare-vllm-{version('vllm')}"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(root / "vllm"))


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        print(version("vllm"))
        return 0
    # Standard output carries the answers: anything vLLM prints goes to standard error.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _environment()
    sys.path.insert(0, os.getcwd())  # a case's scheduler class, from the working folder
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(answer(json.loads(line))) + "\n")
            answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
