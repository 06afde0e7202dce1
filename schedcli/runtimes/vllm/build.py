"""Building vLLM's scheduler as its engine core does, offline on CPU: vLLM imported once
per process, a Llama-shaped config without weights, the KV-cache config through the
engine's own planning (its start-up check included), then ``Scheduler`` or
``AsyncScheduler`` over it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.33.0"  # the version whose internals this runtime calls (the extra pins it)
ON_OFF = ("true", "false")


def flag(value: object) -> bool:
    return value is True or value == "true"


class Vllm:
    """The vLLM names this module uses, imported once per process."""

    def __init__(self) -> None:
        import torch

        _quiet_loggers()
        from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
        from vllm.v1.core.kv_cache_utils import (
            generate_scheduler_kv_cache_config,
            get_request_block_hasher,
            init_none_hash,
        )
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
        self.resolve_kv_cache_layout = resolve_kv_cache_layout
        self.get_global_kv_cache_groups = get_global_kv_cache_groups
        self.get_kv_cache_configs = get_kv_cache_configs
        self.generate_scheduler_kv_cache_config = generate_scheduler_kv_cache_config
        init_none_hash(sha256)  # deterministic block hashes (no seed from the process)
        self._hashers: dict[int, Any] = {}
        self._get_hasher = get_request_block_hasher
        self._sha256 = sha256

    def hasher(self, block_size: int) -> Any:
        found = self._hashers.get(block_size)
        if found is None:
            found = self._hashers[block_size] = self._get_hasher(block_size, self._sha256)
        return found


_loaded: Vllm | None = None


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


def load() -> Vllm:
    global _loaded
    if _loaded is None:
        missing = available()
        if missing is not None:
            raise ValueError(missing)
        _quiet_environment()
        _loaded = Vllm()
    return _loaded


def cache_root() -> Path:
    """Where the offline model config and vLLM's cache live (reused across runs: the
    first build in a new cache inspects the model class in a subprocess, ~25 s)."""
    given = os.environ.get("SCHEDCLI_VLLM_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedcli" / f"vllm-{VLLM_VERSION}"


def _quiet_loggers() -> None:
    """vLLM's and torch's loggers say only errors, on stderr, unless the user's
    ``VLLM_LOGGING_*`` / ``VLLM_CONFIGURE_LOGGING`` / ``TORCH_LOGS`` say otherwise.

    vLLM 0.33 applies its logging configuration only in its engine's entry points: imported
    as a library, its loggers have no handler, and logging's last resort prints every
    warning bare on stderr whatever ``VLLM_LOGGING_LEVEL`` says. So its own configuration
    (``VLLM_LOGGING_*``, read from the environment ``_quiet_environment`` completed) is
    applied here, before any of its modules logs. torch sets its ``torch`` logger to WARNING
    at its import (``TORCH_LOGS`` unset); it is raised to ERROR once torch is imported (a
    torch imported earlier in the process included). Errors pass both."""
    if "TORCH_LOGS" not in os.environ:
        logging.getLogger("torch").setLevel(logging.ERROR)
    level = logging.getLevelName(os.environ.get("VLLM_LOGGING_LEVEL", "").upper())
    if os.environ.get("VLLM_CONFIGURE_LOGGING", "1") != "0" and isinstance(level, int):
        logging.getLogger("vllm").setLevel(level)  # its level already while vllm.config imports
    # Importing vllm.config imports modules that log (torch's deprecations among them).
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging

    configure_logging(LoggingConfig())


def _quiet_environment() -> None:
    """vLLM logs to stdout by default; stdout carries our data. Offline, our cache.
    (Read by vLLM's logging configuration: _quiet_loggers.)"""
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


def build(v: Vllm, p: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
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
        enable_chunked_prefill=flag(p["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(p["long_prefill_token_threshold"]),
        policy=str(p["policy"]),
        is_encoder_decoder=False,
    )
    cache = v.CacheConfig(
        block_size=block_size, enable_prefix_caching=flag(p["enable_prefix_caching"])
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
    if flag(p["skip_kv_startup_check"]):
        kv = v.KVCacheConfig(
            num_blocks=blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)],
        )
    else:
        kv = _engine_kv_config(v, config, spec, blocks)
    default = v.AsyncScheduler if flag(p["async_scheduling"]) else v.Scheduler
    return (cls or default)(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=v.StructuredOutputManager(config),
        block_size=block_size,
        **kwargs,
    )


def _engine_kv_config(v: Vllm, config: Any, spec: Any, blocks: int) -> Any:
    """The KV-cache config vLLM's engine core gives its scheduler for a cache of ``blocks``
    (``num_gpu_blocks_override``), through the engine's own planning: which refuses, at
    start-up, a cache that cannot hold one ``max_model_len`` request beside the null block."""
    config.cache_config.num_gpu_blocks_override = blocks
    specs = [{"layer": spec}]
    v.resolve_kv_cache_layout(config, [["NHD"]], [spec])
    groups = v.get_global_kv_cache_groups(config, specs)
    try:
        planned = v.get_kv_cache_configs(config, specs, [blocks * spec.page_size_bytes], groups)
    except ValueError as e:
        max_len, size = config.model_config.max_model_len, spec.block_size
        raise ValueError(
            f"vLLM's engine refuses this configuration at start-up: max_model_len={max_len} "
            f"needs {-(-max_len // size)} blocks of {size} tokens, and num_gpu_blocks={blocks} "
            f"leaves {blocks - 1} (one is the null block). vLLM says: {e} (schedcli: lower "
            "max_model_len, raise num_gpu_blocks, or run the scheduler bare with "
            "-P skip_kv_startup_check=true; docs/policies.md)"
        ) from None
    kv = v.generate_scheduler_kv_cache_config(planned)
    config.cache_config.num_gpu_blocks = kv.num_blocks
    return kv
