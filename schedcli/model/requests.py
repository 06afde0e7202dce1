"""The request-level seam: schedulers that take whole requests and plan each step's tokens.

vLLM's scheduler is one: requests go in, and each step says how many tokens of which
requests run, which were preempted and which finished. A task-level ``Scheduler`` is
handed slices by its caller; a ``RequestScheduler`` slices for itself.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .records import Left
from .scheduler import Policy
from .task import PREFILL, Id, Task

# Why a waiting request was left out of a step (``RequestScheduler.reasons``).
PREEMPTED = "preempted"
MAX_SEQS = "max_num_seqs"
TOKEN_BUDGET = "token_budget"
KV_BLOCKS = "kv_blocks"
LONG_PREFILL = "long_prefill"
QUEUE = "queue"
REASON_CODES = (PREEMPTED, MAX_SEQS, TOKEN_BUDGET, KV_BLOCKS, LONG_PREFILL, QUEUE)


@dataclass(frozen=True)
class Arrival:
    """A request as it reaches the scheduler. ``tokens``: its prompt's ids, when prefix
    caching should see them (else a prompt of ``prompt_tokens`` distinct ids)."""

    rid: Id
    prompt_tokens: int
    max_tokens: int
    priority: int = 0
    tokens: tuple[int, ...] | None = None
    arrival: float = 0.0


@dataclass(frozen=True)
class Slice:
    """One request's share of a step: ``tokens`` computed from ``position`` on; a prefill
    while it computes tokens already known (prompt, or outputs again after a preemption);
    ``samples`` when it reaches the request's last known token (a token comes out)."""

    rid: Id
    tokens: int
    position: int
    prefill: bool
    samples: bool = True


@dataclass
class StepPlan:
    """One step: the slices in the scheduler's order, the requests it preempted, and those
    the step's outputs finished (their last token, or a stop), in arrival order."""

    batch: list[Slice]
    preempted: list[Id] = field(default_factory=list)
    finished: list[Id] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.batch)


class RequestScheduler(Policy):
    """What a request-level policy promises its caller (the engine):

    - ``add`` queues a request, or returns why it will not (then nothing changed);
    - ``step(stop)`` plans one step and completes it: a request whose slice reaches its
      last known token samples one; ``stop`` names those whose sampled token ends them;
    - every added request ends finished, aborted, or still reported by ``counts``.
    """

    level: ClassVar[str] = "request"

    @classmethod
    def create(cls, **params: Any) -> RequestScheduler:
        return cls(**params)

    @classmethod
    def settle(cls, **params: Any) -> dict[str, Any]:
        """The defaults under ``params``, unbuilt: building one may take seconds (vLLM's)."""
        return {p.name: p.default for p in cls.PARAMS} | params

    @abstractmethod
    def add(self, arrival: Arrival) -> str | None: ...

    @abstractmethod
    def abort(self, rid: Id) -> str | None:
        """Drop a request; where it was ("running", "waiting"), or None if not held."""

    @abstractmethod
    def has_work(self) -> bool: ...

    @abstractmethod
    def step(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> StepPlan:
        """``sampled``: the token each request sampled, where recorded (prefix caching
        hashes outputs too); else any token."""

    def schedule(self) -> StepPlan:
        """Split steps (a recording of vLLM's async scheduling): plan one step; its
        outputs come back with ``update``, oldest first."""
        raise NotImplementedError(f"{type(self).__name__} does not split its steps")

    def update(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> list[Id]:
        """The oldest planned step's outputs; the requests that finished."""
        raise NotImplementedError(f"{type(self).__name__} does not split its steps")

    @abstractmethod
    def counts(self) -> tuple[int, int]:
        """Requests held: (running, waiting)."""

    @abstractmethod
    def held(self) -> list[Id]:
        """Every request still held, in arrival order."""

    def reasons(self) -> list[tuple[Id, str, str]]:
        """After a step: each waiting request it left out, with a code and a detail."""
        return []

    def left_behind(self) -> Left:
        """``reasons`` as task-level views show them: a waiting request as one task."""
        return [(Task(rid, rid, PREFILL, 0), code, detail) for rid, code, detail in self.reasons()]

    def params(self) -> dict[str, Any]:
        """The parameters in force (declared ones, resolved), for headers and reports."""
        return {}
