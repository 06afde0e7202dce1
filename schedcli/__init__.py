"""schedcli: replay LLM-serving scheduler traffic through batching policies."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

# First: whether the compiled core is used is decided before any of its modules loads.
from ._compiled import CORE

if TYPE_CHECKING:
    from .catalog.registry import build_policy, policy_sources, resolve_policy
    from .model.errors import CheckFailed, InputError, InvariantError, SchedcliError, UsageError
    from .model.requests import Arrival, RequestScheduler, Slice, StepPlan
    from .model.scheduler import Param, Policy, QueueScheduler, Scheduler
    from .model.task import Id, Task, TaskKind, settle_outputs
    from .policies import BUILTIN_POLICIES, DecodeFirstScheduler

    __version__: str


# Each public name and the module it lives in, imported when first asked for: a command
# loads only what it uses (start-up is most of a small run).
def _errors() -> ModuleType:
    from .model import errors

    return errors


def _scheduler() -> ModuleType:
    from .model import scheduler

    return scheduler


def _requests() -> ModuleType:
    from .model import requests

    return requests


def _task() -> ModuleType:
    from .model import task

    return task


def _policies() -> ModuleType:
    from . import policies

    return policies


def _registry() -> ModuleType:
    from .catalog import registry

    return registry


_HOMES: dict[str, Callable[[], ModuleType]] = {
    **dict.fromkeys(
        ("CheckFailed", "InputError", "InvariantError", "SchedcliError", "UsageError"), _errors
    ),
    **dict.fromkeys(("Param", "Policy", "QueueScheduler", "Scheduler"), _scheduler),
    **dict.fromkeys(("Arrival", "RequestScheduler", "Slice", "StepPlan"), _requests),
    **dict.fromkeys(("Id", "Task", "TaskKind", "settle_outputs"), _task),
    **dict.fromkeys(("BUILTIN_POLICIES", "DecodeFirstScheduler"), _policies),
    **dict.fromkeys(("build_policy", "policy_sources", "resolve_policy"), _registry),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("schedcli")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            found = "0.0.0"
        globals()["__version__"] = found
        return found
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'schedcli' has no attribute {name!r}")
    value = getattr(home(), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BUILTIN_POLICIES",
    "CORE",
    "Arrival",
    "CheckFailed",
    "DecodeFirstScheduler",
    "Id",
    "InputError",
    "InvariantError",
    "Param",
    "Policy",
    "QueueScheduler",
    "RequestScheduler",
    "SchedcliError",
    "Scheduler",
    "Slice",
    "StepPlan",
    "Task",
    "TaskKind",
    "UsageError",
    "__version__",
    "build_policy",
    "policy_sources",
    "resolve_policy",
    "settle_outputs",
]
