"""Built-in policies, one module each, registered here by name."""

from __future__ import annotations

from ..scheduler import Scheduler
from .decode_first import DecodeFirstScheduler

BUILTIN_POLICIES: dict[str, type[Scheduler]] = {cls.name: cls for cls in (DecodeFirstScheduler,)}

__all__ = ["BUILTIN_POLICIES", "DecodeFirstScheduler"]
