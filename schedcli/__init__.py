"""schedcli: replay LLM-serving scheduler traffic through batching policies."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# First: whether the compiled core is used is decided before any of its modules loads.
from ._compiled import CORE
from .model.errors import CheckFailed, InputError, InvariantError, SchedcliError, UsageError
from .model.scheduler import Param, QueueScheduler, Scheduler
from .model.task import Id, Task, TaskKind, settle_outputs
from .policies import BUILTIN_POLICIES, DecodeFirstScheduler
from .policies.registry import build_policy, policy_sources, resolve_policy

try:
    __version__ = version("schedcli")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "BUILTIN_POLICIES",
    "CORE",
    "CheckFailed",
    "DecodeFirstScheduler",
    "Id",
    "InputError",
    "InvariantError",
    "Param",
    "QueueScheduler",
    "SchedcliError",
    "Scheduler",
    "Task",
    "TaskKind",
    "UsageError",
    "__version__",
    "build_policy",
    "policy_sources",
    "resolve_policy",
    "settle_outputs",
]
