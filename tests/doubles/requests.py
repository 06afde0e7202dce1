"""A request-level policy without vLLM (``tests.doubles:ToyRequests``): the default test
run, the fuzzers and the recipes drive every request-level path through it, so no
request-level command needs the 9 GB extra to be tested."""

from __future__ import annotations

from schedcli.model.requests import (
    KV_BLOCKS,
    MAX_SEQS,
    TOKEN_BUDGET,
    Arrival,
    RequestScheduler,
    Slice,
    StepPlan,
)
from schedcli.model.scheduler import Param
from schedcli.model.task import Id


class _Request:
    def __init__(self, a: Arrival) -> None:
        self.rid, self.prompt, self.max_tokens = a.rid, a.prompt_tokens, a.max_tokens
        self.computed = 0  # tokens computed
        self.produced = 0  # tokens sampled

    @property
    def known(self) -> int:
        return self.prompt + self.produced


class ToyRequests(RequestScheduler):
    """A request-level policy without vLLM, for tests and the fuzzer: first come, first
    served under a token budget and a cap on running requests, prompts chunked to fit,
    split steps (``schedule``/``update``) supported. Its rule is simple so that what it
    exercises is the engine around it."""

    name = "toy-requests"
    PARAMS = (
        Param("max_num_batched_tokens", int, 64, "tokens one step may hold", minimum=1),
        Param("max_num_seqs", int, 4, "requests running at once", minimum=1),
    )

    def __init__(self, max_num_batched_tokens: int = 64, max_num_seqs: int = 4) -> None:
        self.budget, self.seqs = max_num_batched_tokens, max_num_seqs
        self._held: dict[tuple[type, Id], _Request] = {}  # arrival order
        self._running: list[tuple[type, Id]] = []
        self._planned: list[list[tuple[type, Id]]] = []  # split steps awaiting update
        self._reasons: list[tuple[Id, str, str]] = []

    @property
    def token_budget(self) -> int:
        return self.budget

    def params(self) -> dict[str, object]:
        return {"max_num_batched_tokens": self.budget, "max_num_seqs": self.seqs}

    def add(self, arrival: Arrival) -> str | None:
        key = (type(arrival.rid), arrival.rid)
        if key in self._held:
            return f"request {arrival.rid!r} is already held"
        self._held[key] = _Request(arrival)
        return None

    def abort(self, rid: Id) -> str | None:
        key = (type(rid), rid)
        if self._held.pop(key, None) is None:
            return None
        if key in self._running:
            self._running.remove(key)
            return "running"
        return "waiting"

    def has_work(self) -> bool:
        return bool(self._held)

    def _plan(self) -> StepPlan:
        for key in self._held:  # admit in arrival order
            if len(self._running) >= self.seqs:
                break
            if key not in self._running:
                self._running.append(key)
        spent, batch, samplers = 0, [], []
        self._reasons = []
        for key in self._running:
            r = self._held[key]
            want = r.known - r.computed
            take = min(want, self.budget - spent)
            if take <= 0:
                self._reasons.append((r.rid, TOKEN_BUDGET, "the step's tokens are spent"))
                continue
            samples = take == want
            batch.append(Slice(r.rid, take, r.computed, r.computed < r.prompt, samples))
            r.computed += take
            spent += take
            if samples:
                samplers.append(key)
        for key, r in self._held.items():
            if key not in self._running:
                self._reasons.append((r.rid, MAX_SEQS, f"{self.seqs} requests are running"))
        self._planned.append(samplers)
        return StepPlan(batch)

    def _outputs(self, stop: frozenset[Id]) -> list[Id]:
        finished = []
        for key in self._planned.pop(0):
            r = self._held.get(key)
            if r is None:
                continue  # aborted meanwhile
            r.produced += 1
            if r.produced >= r.max_tokens or r.rid in stop:
                finished.append(key)
        done = [key for key in self._held if key in finished]  # in arrival order
        for key in done:
            del self._held[key]
            self._running.remove(key)
        return [key[1] for key in done]

    def step(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> StepPlan:
        plan = self._plan()
        plan.finished = self._outputs(stop)
        return plan

    def schedule(self) -> StepPlan:
        return self._plan()

    def update(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> list[Id]:
        return self._outputs(stop)

    def counts(self) -> tuple[int, int]:
        return len(self._running), len(self._held) - len(self._running)

    def held(self) -> list[Id]:
        return [key[1] for key in self._held]

    def reasons(self) -> list[tuple[Id, str, str]]:
        return list(self._reasons)

    def fingerprint(self) -> object | None:
        """Everything a step decides from: the held requests in arrival order with their
        progress, the running ones in order, the split steps awaiting their update."""
        held = tuple(
            (_key(key), r.prompt, r.max_tokens, r.computed, r.produced)
            for key, r in self._held.items()
        )
        running = tuple(_key(key) for key in self._running)
        planned = tuple(tuple(_key(key) for key in keys) for keys in self._planned)
        return (self.budget, self.seqs, held, running, planned)


def _key(key: tuple[type, Id]) -> tuple[str, Id]:
    """A held request's key as a plain value (``1`` and ``"1"`` kept apart)."""
    return (key[0].__name__, key[1])


class Thrashes(ToyRequests):
    """A livelock: one request runs at a time, and each step preempts it (its progress
    recomputed from scratch, to the back of the queue) for the next one waiting, so two
    prompts longer than the budget take turns forever, two steps a cycle."""

    name = "thrashes"

    def __init__(self, max_num_batched_tokens: int = 8, max_num_seqs: int = 1) -> None:
        super().__init__(max_num_batched_tokens, max_num_seqs)

    def step(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> StepPlan:
        preempted = []
        if self._running and any(k not in self._running for k in self._held):
            key = self._running.pop(0)
            request = self._held.pop(key)
            request.computed = 0
            self._held[key] = request
            preempted.append(request.rid)
        plan = self._plan()
        plan.preempted = preempted
        plan.finished = self._outputs(stop)
        return plan

    def fingerprint(self) -> object | None:
        """ToyRequests' (declared again: only a class's own counts, engine/stall.py)."""
        return super().fingerprint()


class Preempts(ToyRequests):
    """Preemption by recompute in miniature (vLLM's, simplified): a KV cache of
    ``kv_tokens`` tokens, one per token a running request has computed. Running requests
    are served in admission order; one whose slice does not fit the free cache preempts
    the last admitted running request (its progress dropped: it recomputes from position
    0), as often as needed. Waiting requests are admitted in arrival order while their
    slice fits, never in a step that preempted. A request no larger than the cache always
    finishes: the first running one can always make room."""

    name = "toy-preempts"
    PARAMS = (
        *ToyRequests.PARAMS,
        Param("kv_tokens", int, 32, "tokens the KV cache holds", minimum=1),
    )

    def __init__(
        self, max_num_batched_tokens: int = 64, max_num_seqs: int = 4, kv_tokens: int = 32
    ) -> None:
        super().__init__(max_num_batched_tokens, max_num_seqs)
        self.kv = kv_tokens

    def params(self) -> dict[str, object]:
        return super().params() | {"kv_tokens": self.kv}

    def _plan(self) -> StepPlan:
        spent, batch, samplers, preempted = 0, [], [], []
        self._reasons = []
        used = sum(self._held[k].computed for k in self._running)

        def serve(key: tuple[type, Id], take: int) -> None:
            nonlocal spent, used
            r = self._held[key]
            want = r.known - r.computed
            prefill = r.computed < r.known - 1 or r.produced == 0
            batch.append(Slice(r.rid, take, r.computed, prefill, take == want))
            r.computed += take
            spent += take
            used += take
            if take == want:
                samplers.append(key)

        i = 0
        while i < len(self._running):
            key = self._running[i]
            r = self._held[key]
            take = min(r.known - r.computed, self.budget - spent)
            while take > 0 and used + take > self.kv and self._running[-1] != key:
                victim = self._held[self._running.pop()]
                used -= victim.computed
                victim.computed = 0
                preempted.append(victim.rid)
            take = min(take, self.kv - used)
            if take > 0:
                serve(key, take)
            else:
                self._reasons.append((r.rid, TOKEN_BUDGET, "the step's tokens are spent"))
            i += 1
        for key, r in self._held.items():
            if key in self._running:
                continue
            take = min(r.known - r.computed, self.budget - spent)
            if preempted or len(self._running) >= self.seqs or take <= 0 or used + take > self.kv:
                self._reasons.append((r.rid, KV_BLOCKS, "the KV cache is full"))
                continue
            self._running.append(key)
            serve(key, take)
        self._planned.append(samplers)
        order = {rid: n for n, rid in enumerate(r.rid for r in self._held.values())}
        return StepPlan(batch, sorted(preempted, key=lambda rid: order[rid]))

    def schedule(self) -> StepPlan:
        raise NotImplementedError("toy-preempts does not split its steps")

    def update(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> list[Id]:
        raise NotImplementedError("toy-preempts does not split its steps")

    def fingerprint(self) -> object | None:
        """ToyRequests' and the cache's size (declared again: only a class's own counts)."""
        return (self.kv, super().fingerprint())
