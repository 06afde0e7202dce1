"""Built-in policies, one module each, registered here by name."""

from __future__ import annotations

from ..model.scheduler import Scheduler, own_subclass_cache
from ._decode_first_reference import ReferenceDecodeFirst
from .decode_first import DecodeFirstScheduler
from .fair import FairScheduler
from .fcfs import FcfsScheduler
from .prefill_first import PrefillFirstScheduler
from .priority import PriorityScheduler
from .sjf import SjfScheduler

BUILTIN_POLICIES: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (
        DecodeFirstScheduler,
        FcfsScheduler,
        PrefillFirstScheduler,
        PriorityScheduler,
        SjfScheduler,
        FairScheduler,
    )
}

own_subclass_cache(*BUILTIN_POLICIES.values(), ReferenceDecodeFirst)

# Request-level policies (model/requests.py), imported when asked for: vLLM's scheduler
# (runtimes/vllm/policy.py) needs the ``vllm`` extra.
REQUEST_POLICIES: dict[str, str] = {"vllm": "schedcli.runtimes.vllm.policy:VLLM"}

__all__ = [
    "BUILTIN_POLICIES",
    "REQUEST_POLICIES",
    "DecodeFirstScheduler",
    "FairScheduler",
    "FcfsScheduler",
    "PrefillFirstScheduler",
    "PriorityScheduler",
    "SjfScheduler",
]
