"""A bare loop over vLLM's own Scheduler, standalone: the held-out second path that
tests/runtimes/test_vllm_knobs.py checks ``-P KNOB=…`` against, under any interpreter
that has vLLM (the standard library and vLLM only; nothing of schedcli's).

It builds the scheduler as a program embedding vLLM does, from vLLM's own config classes
with each knob set on ``SchedulerConfig``/``CacheConfig`` directly, and drives it as
``simulate --cost-a 1 --cost-b 0 --cost-c 0`` does: every step takes one second, requests
join at their arrival, one ``schedule()`` and ``update_from_output()`` a step, a token
sampled by each request whose computed tokens reach its known ones.

    PYTHON bare_vllm.py CASES.json OUT.json

CASES.json: ``{"requests": [{"sid", "arrival", "prompt_tokens", "output_tokens"}, ...],
"cases": [{"scheduler": {FIELD: VALUE}, "cache": {FIELD: VALUE}, "num_gpu_blocks": N,
"block_size": B, "max_model_len": L, "class": "MODULE:CLASS" or null}, ...]}``.
OUT.json: ``{"version": V, "steps": [[[batch [[sid, n]], preempted, finished], ...], ...]}``,
one list of steps per case (``{"refused": MESSAGE}`` for a case vLLM refuses).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import tempfile
from typing import Any

CONFIG = {
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


def scheduler(case: dict[str, Any], model_dir: str) -> Any:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    max_len, block_size, blocks = case["max_model_len"], case["block_size"], case["num_gpu_blocks"]
    config = VllmConfig(
        model_config=ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=max_len, dtype="float32"
        ),
        scheduler_config=SchedulerConfig(
            max_model_len=max_len, is_encoder_decoder=False, **case["scheduler"]
        ),
        cache_config=CacheConfig(block_size=block_size, **case["cache"]),
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l"], spec)]
    )
    cls = Scheduler
    if case.get("class"):
        module, _, name = case["class"].partition(":")
        cls = getattr(importlib.import_module(module), name)
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=block_size,
    )


def run(case: dict[str, Any], requests: list[dict[str, Any]], model_dir: str) -> list[Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(case["block_size"], sha256)
    # 0.33's runner output indexes its requests; 0.34's does not (told apart by the field).
    indexed = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    sched = scheduler(case, model_dir)
    pending = sorted(requests, key=lambda r: r["arrival"])
    sid: dict[str, Any] = {}
    order: dict[str, int] = {}
    steps: list[Any] = []
    t = 0
    while pending or sched.get_num_unfinished_requests():
        while pending and pending[0]["arrival"] <= t:
            r = pending.pop(0)
            key = f"q{len(order)}"
            order[key], sid[key] = len(order), r["sid"]
            base = (len(order) + 3) * 1_000_000
            sched.add_request(
                Request(
                    request_id=key,
                    prompt_token_ids=list(range(base, base + r["prompt_tokens"])),
                    sampling_params=SamplingParams(max_tokens=r["output_tokens"], ignore_eos=True),
                    pooling_params=None,
                    arrival_time=float(order[key]),
                    block_hasher=hasher,
                )
            )
        if not sched.get_num_unfinished_requests():
            t = pending[0]["arrival"]
            continue
        out = sched.schedule()
        keys = list(out.num_scheduled_tokens)
        sampled = [
            [7] if sched.requests[k].num_computed_tokens >= sched.requests[k].num_tokens else []
            for k in keys
        ]
        given: dict[str, Any] = {"req_ids": keys, "sampled_token_ids": sampled}
        if indexed:
            given["req_id_to_index"] = {k: i for i, k in enumerate(keys)}
        result = sched.update_from_output(out, ModelRunnerOutput(**given))
        done = [o.request_id for g in result.values() for o in g.outputs if o.finish_reason]
        steps.append(
            [
                [[sid[k], int(out.num_scheduled_tokens[k])] for k in keys],
                [sid[k] for k in sorted(out.preempted_req_ids or (), key=order.__getitem__)],
                [sid[k] for k in sorted(done, key=order.__getitem__)],
            ]
        )
        t += 1
    return steps


def run_all(given: dict[str, Any]) -> dict[str, Any]:
    """Each case's steps, or ``{"refused": MESSAGE}`` where vLLM refuses its settings."""
    from importlib.metadata import version

    found: list[Any] = []
    with tempfile.TemporaryDirectory() as folder:
        for case in given["cases"]:
            model_dir = os.path.join(folder, str(case["max_model_len"]))
            if not os.path.isdir(model_dir):
                os.mkdir(model_dir)
                config = CONFIG | {"max_position_embeddings": case["max_model_len"]}
                with open(os.path.join(model_dir, "config.json"), "w") as f:
                    json.dump(config, f)
            try:
                found.append(run(case, given["requests"], model_dir))
            except ValueError as e:  # pydantic's ValidationError is one
                found.append({"refused": str(e)})
    return {"version": version("vllm"), "steps": found}


def main() -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, os.getcwd())  # a case's scheduler class, from the working folder
    with open(sys.argv[1], encoding="utf-8") as f:
        given = json.load(f)
    found = run_all(given)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(found, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
