"""A bare loop over vLLM's own Scheduler that runs under ANY interpreter with vLLM 0.33 or
0.34: the held-out driver ``simulate -p vllm@PYTHON`` and ``diff --a vllm@A --b vllm@B``
are checked against (tests/runtimes/test_vllm_worker.py).

Standard library and vLLM only, nothing of schedcli's: it is written again from vLLM's
interface (its config classes, ``Scheduler``, ``Request``, ``ModelRunnerOutput``), not
from schedcli/runtimes/vllm. Run it as ``PYTHON vllm_bare_any.py``: each line on standard
input is one case, ``{"requests": [...], "params": {...}, "cost": [a, b, c]}`` (requests
as a workload's: ``sid``, ``arrival``, ``prompt_tokens``, ``output_tokens``, optional
``priority``, sorted by arrival; params every setting, schedcli's names); each line on
standard output answers it, ``{"steps": [[batch [[sid, n]], preempted, finished], ...]}``
or ``{"error": TEXT}``. ``--version`` prints the vLLM it runs.

The loop: a request is added once the clock reaches its arrival (arrival order is its
arrival time, and its prompt is tokens no other request shares), each step is one
``schedule()`` and one ``update_from_output()`` with one token for every request whose
computed tokens reach its known ones, and the clock advances by a + b * tokens + c *
decodes; an idle scheduler jumps to the next arrival.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

OWN = ("num_gpu_blocks", "block_size", "max_model_len", "async_scheduling", "skip_kv_startup_check")
CONFIG = (
    '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, '
    '"intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1, '
    '"num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": %d, '
    '"torch_dtype": "float32"}\n'
)


def _environment() -> None:
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


def _model(max_len: int) -> str:
    folder = Path(tempfile.mkdtemp(prefix="vllm-bare-"))
    (folder / "config.json").write_text(CONFIG % max_len)
    return str(folder)


def _as_value(value: Any) -> Any:
    """schedcli's on/off strings as vLLM's booleans; every other value as it is."""
    if value in ("true", "false"):
        return value == "true"
    return value


def build(params: dict[str, Any]) -> Any:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    if params.get("async_scheduling", "false") != "false":
        raise ValueError("this bare loop runs vLLM's synchronous Scheduler only")
    max_len, size = int(params["max_model_len"]), int(params["block_size"])
    blocks = int(params["num_gpu_blocks"])
    fields = {
        cls: {f.name: f for f in dataclasses.fields(cls)} for cls in (SchedulerConfig, CacheConfig)
    }
    knobs: dict[Any, dict[str, Any]] = {SchedulerConfig: {}, CacheConfig: {}}
    for name, value in params.items():
        if name in OWN or value == -1:  # -1: an optional knob left to vLLM
            continue
        owner = next((c for c in knobs if name in fields[c]), None)
        if owner is None:
            raise ValueError(f"vLLM {version('vllm')} has no setting {name!r}")
        knobs[owner][name] = _as_value(value)
    config = VllmConfig(
        model_config=ModelConfig(
            model=_model(max_len), skip_tokenizer_init=True, max_model_len=max_len, dtype="float32"
        ),
        scheduler_config=SchedulerConfig(
            max_model_len=max_len, is_encoder_decoder=False, **knobs[SchedulerConfig]
        ),
        cache_config=CacheConfig(block_size=size, **knobs[CacheConfig]),
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(block_size=size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l"], spec)]
    )
    return Scheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=size,
    )


def runner_output(keys: list[str], sampled: list[list[int]]) -> Any:
    """The model runner's answer, as this vLLM spells it: 0.33 also takes an index of each
    request (told by the field, not the version)."""
    from vllm.v1.outputs import ModelRunnerOutput

    named = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    extra = {"req_id_to_index": {k: i for i, k in enumerate(keys)}}
    return ModelRunnerOutput(
        req_ids=keys,
        sampled_token_ids=sampled,
        **{k: v for k, v in extra.items() if k in named},
    )


def bare_loop(
    requests: list[dict[str, Any]], params: dict[str, Any], cost: list[float]
) -> list[list[Any]]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    sched = build(params)
    hasher = get_request_block_hasher(int(params["block_size"]), sha256)
    max_len = int(params["max_model_len"])
    a, b, c = cost
    sid: dict[str, Any] = {}
    order: dict[str, int] = {}
    steps: list[list[Any]] = []
    pending = list(requests)
    t = pending[0]["arrival"] if pending else 0.0
    while True:
        while pending and pending[0]["arrival"] <= t:
            r = pending.pop(0)
            if not 0 < r["prompt_tokens"] < max_len:  # vLLM's input processing refuses it
                continue
            key = f"q{len(order)}"
            order[key], sid[key] = len(order), r["sid"]
            # A first token of its own: every block hash (chained from the first) differs
            # from every other request's, and each id fits the int32 0.34 keeps them in.
            prompt = [len(order)] + [3] * (r["prompt_tokens"] - 1)
            sched.add_request(
                Request(
                    request_id=key,
                    prompt_token_ids=prompt,
                    sampling_params=SamplingParams(
                        max_tokens=r["output_tokens"], ignore_eos=True
                    ),
                    pooling_params=None,
                    arrival_time=float(order[key]),
                    priority=r.get("priority", 0),
                    block_hasher=hasher,
                )
            )
        if not sched.get_num_unfinished_requests():
            if not pending:
                return steps
            t = pending[0]["arrival"]
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
        preempted = list(out.preempted_req_ids or ())
        steps.append(
            [
                [[sid[k], int(out.num_scheduled_tokens[k])] for k in keys],
                [sid[k] for k in sorted(preempted, key=order.__getitem__)],
                [sid[k] for k in sorted(finished, key=order.__getitem__)],
            ]
        )
        t += a + b * tokens + c * decodes


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        print(version("vllm"))
        return 0
    # Standard output carries the answers: anything vLLM prints goes to standard error.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _environment()
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        try:
            reply: dict[str, Any] = {
                "steps": bare_loop(case["requests"], case["params"], case["cost"])
            }
        except ValueError as e:
            reply = {"error": str(e)}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
