"""vLLM Scheduler subclasses for ``-p vllm:tests.vllm_patches:CLASS``: patches under review,
as a user would write them (tests/runtimes/test_vllm_patched.py). Imported by the process
that runs vLLM (this one for ``vllm:``, the worker for ``vllm@PYTHON:``), with the working
folder on its path; vLLM is imported only there."""

from __future__ import annotations

from collections import deque
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class ShortestFirst(Scheduler):
    """Admits waiting requests shortest prompt first (ties by arrival), not first come:
    the waiting queue is put in that order before each ``schedule()``."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        waiting = self.waiting
        if isinstance(waiting, deque):  # the FCFS queue (a deque); priority keeps its heap
            ordered = sorted(waiting, key=lambda r: (r.num_prompt_tokens, r.arrival_time))
            waiting.clear()
            waiting.extend(ordered)
        return super().schedule(*args, **kwargs)


class Stock(Scheduler):
    """Overrides nothing: schedules exactly as vLLM's own."""


class NotAScheduler:
    """A class, but not a Scheduler's."""
