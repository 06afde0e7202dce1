"""Loading vLLM and building its scheduler as the engine core does, offline on CPU: the
half of ``core.py`` that knows vLLM's classes (``core.py`` drives what this builds).

Like ``core.py``, this file imports only the standard library, and vLLM lazily: it runs
under any interpreter that has vLLM (``PYTHON core.py`` imports it from beside itself).
Versions are told apart by feature, never by the version string; a vLLM outside the
supported window is refused at load with the window named (``Unsupported``).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Any

PROTOCOL = 1  # the pipe's message format (serve); bumped when a message changes
SUPPORTED = "0.33 to 0.34"  # the API family: block_size on Scheduler, kv_cache_planning
FAMILY = ("0.33.", "0.34.")  # the releases of that family this module is tested against
ON_OFF = ("true", "false")

# schedcli's own parameters: the scheduler's shape as schedcli sets it up (the rest of
# SchedulerConfig's and CacheConfig's fields are knobs, passed through to vLLM's classes).
OWN = {
    "num_gpu_blocks": 8192,
    "block_size": 16,
    "max_model_len": 32768,
    "async_scheduling": "false",
    "skip_kv_startup_check": "false",
}
# The knobs schedcli sets whatever vLLM's default (its own defaults, kept across versions
# so a recording replays as it was made); any other knob takes the installed vLLM's.
PINNED = {
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 256,
    "enable_chunked_prefill": "true",
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": "true",
    "policy": "fcfs",
}
# The SchedulerConfig and CacheConfig fields (of a release in the family) that are not
# knobs, each with why (docs/policies.md lists them; tests/runtimes/test_vllm_knobs.py
# checks the two agree, and that every public field of each release is a knob or here).
SET_BY_SCHEDCLI = "set by schedcli (its own parameters, or what its model is)"
DERIVED = "derived by vLLM from the model and the other settings"
NOT_THIS_MODEL = "not a scheduling decision for a weightless, text-only, full-attention model"
MEMORY = "sizes or places memory, which num_gpu_blocks fixes here"
API_SERVER = "enforced by vLLM's API server (which schedcli does not run), not its scheduler"
AFTER = "acts after the step is scheduled (streaming outputs), never on what it holds"
HASH = "the hash function of prompt blocks: equal prefixes match under any of them"
NOT_KNOBS: dict[str, str] = {
    "max_model_len": SET_BY_SCHEDCLI,
    "is_encoder_decoder": SET_BY_SCHEDCLI,
    "async_scheduling": SET_BY_SCHEDCLI,
    "scheduler_cls": SET_BY_SCHEDCLI,
    "block_size": SET_BY_SCHEDCLI,
    "num_gpu_blocks_override": SET_BY_SCHEDCLI,
    "runner_type": SET_BY_SCHEDCLI,
    "is_multimodal_model": SET_BY_SCHEDCLI,
    "is_attention_free": SET_BY_SCHEDCLI,
    "user_specified_block_size": DERIVED,
    "max_num_encoder_input_tokens": DERIVED,
    "encoder_cache_size": DERIVED,
    "kv_cache_layout": DERIVED,
    "num_gpu_blocks": DERIVED,
    "num_cpu_blocks": DERIVED,
    "effective_attention_block_size": DERIVED,
    "kv_cache_size_tokens": DERIVED,
    "kv_cache_max_concurrency": DERIVED,
    "simple_cpu_offload_num_blocks": DERIVED,
    "use_kda_recoverssm": DERIVED,
    "hash_block_size": DERIVED,
    "cache_hit_alignment_tokens": DERIVED,
    "disable_chunked_mm_input": NOT_THIS_MODEL,
    "disable_hybrid_kv_cache_manager": NOT_THIS_MODEL,
    "sliding_window": NOT_THIS_MODEL,
    "kv_sharing_fast_prefill": NOT_THIS_MODEL,
    "kv_cache_dtype_skip_layers": NOT_THIS_MODEL,
    "mamba_cache_dtype": NOT_THIS_MODEL,
    "mamba_ssm_cache_dtype": NOT_THIS_MODEL,
    "mamba_page_size_padded": NOT_THIS_MODEL,
    "mamba_block_size": NOT_THIS_MODEL,
    "mamba_cache_mode": NOT_THIS_MODEL,
    "enable_mamba_shared_prefix_checkpoint": NOT_THIS_MODEL,
    "skip_page_size_padded": NOT_THIS_MODEL,
    "replayssm_buffer_len": NOT_THIS_MODEL,
    "use_replayssm": NOT_THIS_MODEL,
    "gpu_memory_utilization": MEMORY,
    "kv_cache_memory_bytes": MEMORY,
    "cache_dtype": MEMORY,
    "kv_offloading_size": MEMORY,
    "kv_offloading_backend": MEMORY,
    "enable_extensible_kv_cache": MEMORY,
    "max_num_queued_reqs": API_SERVER,
    "max_num_queued_tokens": API_SERVER,
    "stream_interval": AFTER,
    "prefix_caching_hash_algo": HASH,
}
# The knobs one release of the family has and another lacks, with the release that has each
# (tests/runtimes/test_vllm_knobs.py checks it against every release it runs): a recording
# made under one names them, and replays under the other with a note, never a typo's error.
RELEASE_KNOBS = {
    "max_num_inflight_kv_loads": "0.34",
    "cache_aware_admission_window": "0.34",
    "cache_aware_admission_threshold": "0.34",
}
UNSET = -1  # an optional knob's value when not given: vLLM decides (never passed to it)


class Unsupported(Exception):
    """The vLLM found has a scheduler interface this module does not drive."""


def flag(value: object) -> bool:
    return value is True or value == "true"


# --- loading vLLM ----------------------------------------------------------------------------


class Vllm:
    """The vLLM names this module uses, imported once per process, and the features that
    tell its versions apart."""

    def __init__(self) -> None:
        try:
            import torch

            _quiet_loggers()
            from vllm.config import (
                CacheConfig,
                DeviceConfig,
                ModelConfig,
                SchedulerConfig,
                VllmConfig,
            )
            from vllm.sampling_params import SamplingParams
            from vllm.utils.hashing import sha256
            from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
            from vllm.v1.core.kv_cache_planning import (
                get_global_kv_cache_groups,
                get_kv_cache_configs,
            )
            from vllm.v1.core.kv_cache_utils import (
                generate_scheduler_kv_cache_config,
                get_request_block_hasher,
                init_none_hash,
            )
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler
            from vllm.v1.core.sched.scheduler import Scheduler
            from vllm.v1.kv_cache_interface import (
                FullAttentionSpec,
                KVCacheConfig,
                KVCacheGroupSpec,
            )
            from vllm.v1.outputs import ModelRunnerOutput
            from vllm.v1.request import Request, RequestStatus
            from vllm.v1.structured_output import StructuredOutputManager
        except ImportError as e:
            raise Unsupported(
                f"vLLM {version()} lacks what schedcli drives ({e}): the supported family is "
                f"vLLM {SUPPORTED} (its scheduler takes block_size, plans the KV cache in "
                "vllm.v1.core.kv_cache_planning)"
            ) from None
        if "block_size" not in inspect.signature(Scheduler.__init__).parameters:
            raise Unsupported(
                f"vLLM {version()}'s Scheduler takes no block_size: the supported family is "
                f"vLLM {SUPPORTED}"
            )
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
        # 0.33 hands the runner's output an index of each request; 0.34 dropped it.
        self.runner_index = "req_id_to_index" in _fields(ModelRunnerOutput)
        init_none_hash(sha256)  # deterministic block hashes (no seed from the process)
        self._hashers: dict[int, Any] = {}
        self._get_hasher = get_request_block_hasher
        self._sha256 = sha256

    def hasher(self, block_size: int) -> Any:
        found = self._hashers.get(block_size)
        if found is None:
            found = self._hashers[block_size] = self._get_hasher(block_size, self._sha256)
        return found

    def runner_output(self, keys: list[str], tokens: list[list[int]]) -> Any:
        """What the model runner hands back for a step, as this version spells it."""
        if self.runner_index:
            return self.ModelRunnerOutput(
                req_ids=keys,
                req_id_to_index={k: i for i, k in enumerate(keys)},
                sampled_token_ids=tokens,
            )
        return self.ModelRunnerOutput(req_ids=keys, sampled_token_ids=tokens)


def _fields(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(inspect.signature(cls).parameters)


def version() -> str:
    """The installed vLLM's version (its metadata, not an import)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("vllm")
    except PackageNotFoundError:
        return NOT_INSTALLED


NOT_INSTALLED = "(not installed)"
_loaded: Vllm | None = None


def load() -> Vllm:
    global _loaded
    if _loaded is None:
        found = version()
        if found == NOT_INSTALLED:
            raise Unsupported(
                f"{sys.executable} has no vLLM (no vllm distribution is installed in it): "
                f'install vLLM {SUPPORTED} into it (docs/policies.md, "vLLM versions side '
                'by side", says how)'
            )
        if not found.startswith(FAMILY):
            raise Unsupported(
                f"vLLM {found} is outside the supported window, vLLM {SUPPORTED} (the API "
                "family whose Scheduler takes block_size and whose engine plans the KV cache "
                "in vllm.v1.core.kv_cache_planning); docs/policies.md says how to install one"
            )
        _quiet_environment()
        _loaded = Vllm()
    return _loaded


def cache_root() -> Path:
    """Where the offline model config and vLLM's cache live, per vLLM version (the first
    build in a new cache inspects the model class in a subprocess, ~25 s)."""
    given = os.environ.get("SCHEDCLI_VLLM_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedcli" / f"vllm-{version()}"


def _quiet_loggers() -> None:
    """vLLM's and torch's loggers say only errors, on stderr, unless the user's
    ``VLLM_LOGGING_*`` / ``VLLM_CONFIGURE_LOGGING`` / ``TORCH_LOGS`` say otherwise.

    vLLM applies its logging configuration only in its engine's entry points: imported as a
    library, its loggers have no handler, and logging's last resort prints every warning
    bare on stderr whatever ``VLLM_LOGGING_LEVEL`` says. So its own configuration (read from
    the environment ``_quiet_environment`` completed) is applied here, before any of its
    modules logs. torch sets its ``torch`` logger to WARNING at import; it is raised to
    ERROR once torch is imported. Errors pass both."""
    if "TORCH_LOGS" not in os.environ:
        logging.getLogger("torch").setLevel(logging.ERROR)
    level = logging.getLevelName(os.environ.get("VLLM_LOGGING_LEVEL", "").upper())
    if os.environ.get("VLLM_CONFIGURE_LOGGING", "1") != "0" and isinstance(level, int):
        logging.getLogger("vllm").setLevel(level)
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging

    configure_logging(LoggingConfig())


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


# --- the knobs --------------------------------------------------------------------------------


def describe() -> dict[str, Any]:
    """The vLLM here, as a worker's ``info`` answers and ``-p vllm`` reads it: its version,
    the pipe's protocol, its knobs (Unsupported outside the window)."""
    return {"version": version(), "protocol": PROTOCOL, "knobs": knobs(load())}


def knobs(v: Vllm) -> list[dict[str, Any]]:
    """Every field of the installed vLLM's ``SchedulerConfig`` and ``CacheConfig`` that a
    scheduling run can set, as a parameter: name, kind (int, float, bool, str), default (the
    value vLLM's own class settles on when not given, schedcli's where it pins one), choices
    (an enum's or a Literal's values), and which config it belongs to. A field that is not
    one plain value (a container, an object, a value vLLM leaves unset) is not a knob."""
    found: list[dict[str, Any]] = []
    defaults = {
        "SchedulerConfig": v.SchedulerConfig(
            max_model_len=OWN["max_model_len"], is_encoder_decoder=False
        ),
        "CacheConfig": v.CacheConfig(block_size=OWN["block_size"]),
    }
    for owner, cls in (("SchedulerConfig", v.SchedulerConfig), ("CacheConfig", v.CacheConfig)):
        hints = _hints(cls)
        for field in dataclasses.fields(cls):
            if field.name in NOT_KNOBS or field.name.startswith("_") or not field.init:
                continue
            settled = getattr(defaults[owner], field.name, None)
            described = _describe(PINNED.get(field.name, settled), hints.get(field.name))
            if described is not None:
                found.append({"name": field.name, "config": owner, **described})
    return found


def _hints(cls: Any) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # a forward reference vLLM never resolves: take what is plain
        return {}


def _describe(default: Any, hint: Any) -> dict[str, Any] | None:
    """A field as a parameter, from its settled default, or None when it is not one value
    of a plain kind."""
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    plain = args[0] if len(args) == 1 else hint
    if default is None:  # optional: unset unless given
        if plain is int:
            return {"kind": "int", "default": UNSET, "unset": True}
        if plain is float:
            return {"kind": "float", "default": float(UNSET), "unset": True}
        return None
    if isinstance(default, enum.Enum):
        return {
            "kind": "str",
            "default": str(default.value),
            "choices": [str(m.value) for m in type(default)],
        }
    if typing.get_origin(plain) is typing.Literal:
        values = typing.get_args(plain)
        if all(isinstance(x, str) for x in values) and default in values:
            return {"kind": "str", "default": default, "choices": list(values)}
        return None
    if isinstance(default, bool) or (default in ON_OFF and plain is bool):
        on = default is True or default == "true"
        return {"kind": "bool", "default": "true" if on else "false", "choices": list(ON_OFF)}
    if type(default) is int:
        return {"kind": "int", "default": default}
    if isinstance(default, float):
        return {"kind": "float", "default": default}
    if isinstance(default, str) and plain is str:
        return None  # free text: a name or a path, not a scheduling decision
    return None


def _split(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """schedcli's own parameters, SchedulerConfig's knobs and CacheConfig's, from a
    parameter dict (unknown names are the caller's to refuse: ``check`` below)."""
    v = load()
    own = {k: params.get(k, d) for k, d in OWN.items()}
    known = {k["name"]: k for k in knobs(v)}
    sched: dict[str, Any] = {}
    cache: dict[str, Any] = {}
    for name, value in params.items():
        if name in OWN:
            continue
        knob = known.get(name)
        if knob is None:
            raise ValueError(f"vLLM {version()} has no scheduler or cache setting {name!r}")
        value = _as_kind(name, value, knob["kind"])
        if knob.get("unset") and value == UNSET:
            continue
        (sched if knob["config"] == "SchedulerConfig" else cache)[name] = value
    return own, sched, cache


def _as_kind(name: str, value: Any, kind: str) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if value in ON_OFF:
            return value == "true"
        raise ValueError(f"{name} is true or false, not {value!r}")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} is an integer, not {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} is a number, not {value!r}")
        return float(value)
    return value


# --- building the scheduler -----------------------------------------------------------------


def build(params: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
    """A vLLM scheduler as the engine core builds one, offline on CPU, from ``params``
    (schedcli's own parameters and any SchedulerConfig/CacheConfig knob; vLLM's own config
    classes validate them: what they refuse is a ValueError in their words)."""
    v = load()
    own, sched_knobs, cache_knobs = _split({**PINNED, **params})
    max_len = int(own["max_model_len"])
    block_size = int(own["block_size"])
    blocks = int(own["num_gpu_blocks"])
    try:
        model = v.ModelConfig(
            model=_model_dir(max_len),
            skip_tokenizer_init=True,
            max_model_len=max_len,
            dtype="float32",
        )
        scheduler = v.SchedulerConfig(
            max_model_len=max_len, is_encoder_decoder=False, **sched_knobs
        )
        cache = v.CacheConfig(block_size=block_size, **cache_knobs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"vLLM {version()} refuses the settings: {_said(e)}") from None
    cache.num_gpu_blocks = blocks
    try:
        config = v.VllmConfig(
            model_config=model,
            scheduler_config=scheduler,
            cache_config=cache,
            device_config=v.DeviceConfig(device="cpu"),
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"vLLM {version()} refuses the settings: {_said(e)}") from None
    spec = v.FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=v.torch.float32
    )
    if flag(own["skip_kv_startup_check"]):
        kv = v.KVCacheConfig(
            num_blocks=blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)],
        )
    else:
        kv = _engine_kv_config(v, config, spec, blocks)
    default = v.AsyncScheduler if flag(own["async_scheduling"]) else v.Scheduler
    return (cls or default)(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=v.StructuredOutputManager(config),
        block_size=block_size,
        **kwargs,
    )


def _said(e: BaseException) -> str:
    """What vLLM's config class said, on one line: each field it refused, with why."""
    errors = getattr(e, "errors", None)
    if callable(errors):  # pydantic's ValidationError
        try:
            return "; ".join(
                f"{'.'.join(str(x) for x in err.get('loc', ())) or 'value'}: {err.get('msg')}"
                for err in errors()
            )
        except Exception:
            pass
    text = " ".join(str(e).split())
    return text or type(e).__name__


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


def scheduler_class(spec: str) -> Any:
    """The ``Scheduler`` subclass ``MODULE:CLASS`` names, imported here (a patch under
    review, say); a ValueError when it is not one."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"a scheduler class is named MODULE:CLASS, not {spec!r}")
    v = load()
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:
        raise ValueError(
            f"{spec}: the module {module_name} does not import here ({sys.executable}, with "
            f"the working folder {cwd} on its path): {type(e).__name__}: {e}"
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{spec}: {module_name} has no {attr!r}")
    if not (isinstance(obj, type) and issubclass(obj, v.Scheduler)):
        raise ValueError(
            f"{spec} is not a subclass of vLLM's Scheduler "
            "(vllm.v1.core.sched.scheduler.Scheduler): it is "
            + (
                f"the class {obj.__module__}.{obj.__qualname__}"
                if isinstance(obj, type)
                else f"a {type(obj).__name__}"
            )
        )
    return obj
