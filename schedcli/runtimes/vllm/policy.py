"""vLLM's own v1 scheduler as a request-level policy (``-p vllm``; the ``vllm`` extra).

The scheduler runs offline on CPU: a Llama-shaped config without weights, no tokenizer,
a KV cache of ``num_gpu_blocks`` blocks. Each step is ``schedule()`` then
``update_from_output()`` with one sampled token for every request whose slice reached its
last known token (as the GPU runner does). vLLM loads once per process.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from ...model.errors import SnapshotUnsupported
from ...model.limits import INT_MAX, MAX_BLOCK_SIZE, MAX_KV_BLOCKS, MAX_MODEL_LEN, MAX_RUNNING_SEQS
from ...model.records import Left
from ...model.requests import (
    KV_BLOCKS,
    LONG_PREFILL,
    MAX_SEQS,
    PREEMPTED,
    QUEUE,
    TOKEN_BUDGET,
    Arrival,
    RequestScheduler,
    Slice,
    StepPlan,
)
from ...model.scheduler import Param
from ...model.task import PREFILL, Id, Task
from .build import ON_OFF, available, flag
from .vllm_build import NOT_KNOBS, RELEASE_KNOBS, UNSET
from .worker import core_for, describe_here, interpreter, worker

_NO_SNAPSHOTS = "its state is vLLM's own scheduler (and KV cache), which hands none of it over"


class VllmScheduler(RequestScheduler):
    """vLLM v1's Scheduler, run as is: FCFS or priority over a token budget per step,
    chunked prefill, KV-cache blocks with preemption by recompute, prefix caching."""

    name = "vllm"
    PARAMS = (
        Param(
            "max_num_batched_tokens",
            int,
            2048,
            "tokens per step (the budget)",
            1,
            maximum=MAX_MODEL_LEN,
        ),
        Param("max_num_seqs", int, 256, "requests running at once", 1, maximum=MAX_RUNNING_SEQS),
        Param("num_gpu_blocks", int, 8192, "KV-cache blocks", 1, maximum=MAX_KV_BLOCKS),
        Param("block_size", int, 16, "tokens per KV-cache block", 1, maximum=MAX_BLOCK_SIZE),
        Param("enable_chunked_prefill", str, "true", "split prompts over steps", choices=ON_OFF),
        Param(
            "long_prefill_token_threshold",
            int,
            0,
            "cap on one prompt's tokens a step",
            0,
            maximum=MAX_MODEL_LEN,
        ),
        Param("enable_prefix_caching", str, "true", "reuse cached prompt blocks", choices=ON_OFF),
        Param("policy", str, "fcfs", "waiting order", choices=("fcfs", "priority")),
        Param(
            "max_model_len",
            int,
            32768,
            "longest prompt + output a request may have",
            2,
            maximum=MAX_MODEL_LEN,
        ),
        Param(
            "async_scheduling",
            str,
            "false",
            "AsyncScheduler (as a recording made with it)",
            choices=ON_OFF,
        ),
        Param(
            "skip_kv_startup_check",
            str,
            "false",
            "run with a KV cache vLLM's engine refuses at start-up (as an embedded Scheduler)",
            choices=ON_OFF,
        ),
    )
    RULE = __doc__

    # Which vLLM: None for the one importable here, else an interpreter (vllm@PYTHON);
    # and the Scheduler subclass to run, if not vLLM's own (vllm:MODULE:CLASS).
    PYTHON: ClassVar[str | None] = None
    SCHEDULER: ClassVar[str | None] = None
    VERSION: ClassVar[str | None] = None  # the vLLM's, where it was read when the class was

    def __init__(self, **params: Any) -> None:
        values = {p.name: p.default for p in self.PARAMS}
        values.update(params)
        self._params = values
        # A step's tokens and the requests admitted to run are capped by
        # max_num_scheduled_tokens and max_num_active_seqs where given (knobs of 0.33 on),
        # else by max_num_batched_tokens and max_num_seqs: vLLM's Scheduler reads them so.
        self._budget, self._budget_knob = _cap(
            values, "max_num_scheduled_tokens", "max_num_batched_tokens"
        )
        self._max_seqs, self._max_seqs_knob = _cap(values, "max_num_active_seqs", "max_num_seqs")
        self._max_len = int(values["max_model_len"])
        self._blocks = int(values["num_gpu_blocks"])
        self._block_size = int(values["block_size"])
        self._chunked = flag(values["enable_chunked_prefill"])
        self._threshold = int(values["long_prefill_token_threshold"])
        self._core = core_for(self.PYTHON, dict(values), self.SCHEDULER)
        # vLLM's ids are strings: ours (int or str) map to "0", "1", ... in arrival order.
        self._key: dict[Id, str] = {}
        self._rid: dict[str, Id] = {}
        self._order: dict[str, int] = {}
        self._arrived = 0
        self._last: StepPlan | None = None
        self._inflight: deque[list[str]] = deque()

    @classmethod
    def create(cls, **params: Any) -> VllmScheduler:
        return cls(**params)

    def snapshot(self) -> dict[str, object]:
        raise SnapshotUnsupported(self.name, _NO_SNAPSHOTS)

    def restore(self, state: Mapping[str, object]) -> None:
        raise SnapshotUnsupported(self.name, _NO_SNAPSHOTS)

    @classmethod
    def available(cls) -> str | None:
        """None when vLLM can be loaded; else what to install."""
        if cls.PYTHON is not None:
            return None  # the worker says, at start, what its vLLM is
        return available()

    @classmethod
    def lacks(cls, name: str) -> str | None:
        """Why this vLLM takes no parameter ``name`` (registry.param_lacked), where it is a
        setting schedcli leaves out or another release's knob; None for any other name (a
        typo: a header naming it is an error, not a note)."""
        why = NOT_KNOBS.get(name)
        if why is not None:
            return f"left out of vLLM's knobs: {why} (docs/policies.md)"
        if cls.VERSION is None:
            return f"the knobs are read from vLLM, and there is none here ({available()})"
        release = RELEASE_KNOBS.get(name)
        if release is None or cls.VERSION.startswith(f"{release}."):
            return None
        where = f" under {cls.PYTHON}" if cls.PYTHON else ""
        return (
            f"vLLM {cls.VERSION}{where} has no such SchedulerConfig or CacheConfig field "
            f"(vLLM {release} has)"
        )

    @classmethod
    def made_by(cls) -> dict[str, str]:
        """The vLLM this runs, as a recording's header says it (meta ``vllm``)."""
        return {"vllm": cls.VERSION} if cls.VERSION else {}

    @classmethod
    def runtime(cls) -> str | None:
        if cls.PYTHON is not None:
            return f"vllm=={worker(cls.PYTHON).info['version']}@{cls.PYTHON}"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"vllm=={version('vllm')}"
        except PackageNotFoundError:
            return None

    @property
    def token_budget(self) -> int | None:
        return self._budget

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def add(self, arrival: Arrival) -> str | None:
        if arrival.rid in self._key:
            return f"request {arrival.rid!r} is already held"
        refused = prompt_refused(arrival.prompt_tokens, self._max_len)
        if refused is not None:
            return refused
        key = str(self._arrived)
        self._arrived += 1
        self._key[arrival.rid], self._rid[key], self._order[key] = (
            key,
            arrival.rid,
            len(self._order),
        )
        prompt = arrival.prompt_tokens
        tokens = list(arrival.tokens) if arrival.tokens is not None else _distinct(key, prompt)
        # Arrival order, not the wall clock, is the request's arrival time.
        self._core.add(
            key, tokens[:prompt], arrival.max_tokens, arrival.priority, float(self._order[key])
        )
        return None

    def abort(self, rid: Id) -> str | None:
        key = self._key.get(rid)
        if key is None:
            return None
        where: str | None = self._core.abort(key)
        if where is not None:
            self._forget(key)
        return where

    def has_work(self) -> bool:
        return bool(self._core.unfinished())

    def counts(self) -> tuple[int, int]:
        running, waiting = self._core.counts()
        return int(running), int(waiting)

    def held(self) -> list[Id]:
        keys = [k for k in self._core.held() if k in self._rid]
        return [self._rid[k] for k in sorted(keys, key=self._order.__getitem__)]

    def step(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> StepPlan:
        plan = self.schedule()
        plan.finished = self.update(stop, sampled)
        return plan

    def schedule(self) -> StepPlan:
        """One ``schedule()``: the step's slices and preemptions (its outputs come back
        with ``update``, at once or, under async scheduling, after the next schedule)."""
        out = self._core.schedule()
        batch = [
            Slice(self._rid[k], n, position, prefill, samples)
            for k, n, position, prefill, samples in out["batch"]
        ]
        self._inflight.append([s[0] for s in out["batch"]])
        by_arrival = self._order.__getitem__
        preempted = [self._rid[k] for k in sorted(out["preempted"], key=by_arrival)]
        plan = StepPlan(batch, preempted)
        self._last = plan
        return plan

    def update(
        self, stop: frozenset[Id] = frozenset(), sampled: dict[Id, int] | None = None
    ) -> list[Id]:
        """The outputs of the oldest step scheduled: a token for each slice that reached
        its request's end (``stop``'s a stop token); the requests that finished."""
        if not self._inflight:
            raise ValueError("update with no step scheduled")
        keys = self._inflight.popleft()
        rids = [self._rid.get(k) for k in keys]
        stopping = [k for k, rid in zip(keys, rids, strict=True) if rid is not None and rid in stop]
        given = None
        if sampled:
            given = {k: sampled[rid] for k, rid in zip(keys, rids, strict=True) if rid in sampled}
        finished = [k for k in self._core.update(stopping, given) if k in self._rid]
        ended = [self._rid[k] for k in sorted(finished, key=self._order.__getitem__)]
        for key in finished:
            self._forget(key)
        return ended

    def _forget(self, key: str) -> None:
        rid = self._rid.pop(key)
        del self._key[rid]

    def fingerprint(self) -> object | None:
        """What vLLM's next ``schedule()`` decides from (core.Core.fingerprint): each
        unfinished request's status and progress, the order of every queue it keeps, the
        blocks each holds, and the free-block queue with each block's cached hash."""
        found: object = self._core.fingerprint()
        return found

    def _step_facts(self) -> dict[str, Any]:
        """The state reasons are read from, as it is now (a finished request is gone)."""
        batch = self._last.batch if self._last else []
        keys = [k for k in (self._key.get(s.rid) for s in batch) if k is not None]
        facts: dict[str, Any] = self._core.waiting(keys)
        return facts

    def reasons(self) -> list[tuple[Id, str, str]]:
        """Derived after the step from vLLM's state (it gives none): see docs/policies.md."""
        plan = self._last
        if plan is None:
            return []
        facts = self._step_facts()
        preempted = set(plan.preempted)
        left = plan.tokens
        budget_left = self._budget - left
        running, free = int(facts["running"]), int(facts["free"])
        watermark = int(facts["watermark"]) if running else 0
        full = bool(facts["reserve_full"])
        sliced: dict[str, list[int]] = facts["slices"]
        found: list[tuple[Id, str, str]] = []
        for s in plan.batch:
            known = sliced.get(self._key.get(s.rid, ""))
            if known is None or not s.prefill or known[0] >= known[1]:
                continue
            if 0 < self._threshold == s.tokens:
                found.append((s.rid, LONG_PREFILL, f"slice cut to {self._threshold} tokens"))
        head: Id | None = None
        for key, computed, total in facts["queue"]:
            rid = self._rid.get(key)
            if rid is None:
                continue
            need = total - computed
            if rid in preempted:
                found.append((rid, PREEMPTED, "preempted this step to free KV blocks"))
            elif preempted:
                found.append((rid, KV_BLOCKS, "a step that preempts admits no waiting request"))
            elif running >= self._max_seqs:
                found.append(
                    (rid, MAX_SEQS, f"{running} running: {self._max_seqs_knob} is {self._max_seqs}")
                )
            elif budget_left <= 0:
                found.append((rid, TOKEN_BUDGET, f"{left} of {self._budget} tokens scheduled"))
            elif head is not None:
                found.append((rid, QUEUE, f"waits behind request {head!r}"))
            elif not self._chunked and need > budget_left:
                found.append((rid, TOKEN_BUDGET, f"needs {need} tokens whole; {budget_left} left"))
            else:
                tokens = total if full else min(need, budget_left)
                blocks = -(-tokens // self._block_size) + watermark
                kept = f" (with {watermark} kept free)" if watermark else ""
                usable = self._blocks - 1  # the pool keeps one as the null block
                never = (
                    f"; the whole cache holds {usable} ({self._blocks} less the null block), "
                    "so it never will"
                    if blocks - watermark > usable
                    else ""
                )
                found.append(
                    (rid, KV_BLOCKS, f"needs {blocks} KV blocks{kept}; {free} free{never}")
                )
            if head is None and rid not in preempted:
                head = rid
        return found

    def left_behind(self) -> Left:
        """Reasons as the views match them: a waiting request as the slice it would run
        (``RID@POSITION``, its computed tokens), so it pairs with the other side's."""
        reasons = self.reasons()
        computed = self._core.computed([self._key.get(rid, "") for rid, _, _ in reasons])
        found: list[tuple[Task, str, str]] = []
        for rid, code, detail in reasons:
            position = int(computed.get(self._key.get(rid, ""), 0))
            found.append((Task(f"{rid}@{position}", rid, PREFILL, 0), code, detail))
        return found

    def close(self) -> None:
        self._core.close()


def prompt_refused(prompt: int, max_len: int) -> str | None:
    """What vLLM 0.33's input processing says of a prompt this long, None if it takes it
    (``_validate_prompt_len``, in vLLM's words). It checks nothing else of a request: one
    whose prompt + max_tokens pass max_model_len is admitted and capped there."""
    if prompt == 0:
        return "The decoder prompt cannot be empty"
    if prompt > max_len:
        return (
            f"The decoder prompt (length {prompt}) is longer than the maximum model length "
            f"of {max_len}. Make sure that `max_model_len` is no smaller than the number of "
            "text tokens."
        )
    if prompt == max_len:
        return (
            f"The decoder prompt (length {prompt}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of {max_len}. "
            "Make sure that `max_model_len` is no smaller than the number of text tokens "
            "(prompt + requested output tokens)."
        )
    return None


def _distinct(key: str, length: int) -> list[int]:
    """A prompt no other request shares: prefix caching finds no false hits. Its first
    tokens spell the key (each block's hash chains from the first block, so they make every
    block the request's own); every id fits the int32 vLLM 0.34 keeps prompts in."""
    high, low = divmod(int(key), _TOKEN_IDS)
    return ([low, high] + [0] * max(length - 2, 0))[:length]


_TOKEN_IDS = 2**31 - 1  # token ids 0 .. 2**31 - 2: a C int32 holds each


def build_scheduler(params: dict[str, Any], cls: Any = None, **kwargs: Any) -> Any:
    """A vLLM scheduler (``cls``, default vLLM's own ``Scheduler``) built as ``-p vllm``
    builds it, from its parameters (defaults for those not given): for a recorder's test
    and a bare loop that drive vLLM themselves."""
    from . import vllm_build

    values = {p.name: p.default for p in VllmScheduler.PARAMS} | params
    return vllm_build.build(values, cls, **kwargs)


# --- which vLLM, which scheduler ---------------------------------------------------------------

PREFIX = "vllm"
AT = "vllm@"  # vllm@PYTHON[:MODULE:CLASS]: the vLLM another interpreter has
PATCHED = "vllm:"  # vllm:MODULE:CLASS: a Scheduler subclass, run as stock vLLM runs


def parse(name: str) -> tuple[str | None, str | None]:
    """The interpreter and the ``MODULE:CLASS`` a ``vllm`` policy name gives (None for the
    vLLM here, for vLLM's own Scheduler); a ValueError for a name that is not one."""
    if name == PREFIX:
        return None, None
    if name.startswith(PATCHED):
        scheduler = name[len(PATCHED) :]
        python = None
    elif name.startswith(AT):
        python, _, scheduler = name[len(AT) :].partition(":")
        if not python:
            raise ValueError(f"policy {name!r}: vllm@ names an interpreter, vllm@PYTHON")
    else:
        raise ValueError(f"policy {name!r} is not vllm, vllm@PYTHON or vllm:MODULE:CLASS")
    if scheduler and scheduler.count(":") != 1:
        raise ValueError(
            f"policy {name!r}: a patched scheduler is named MODULE:CLASS "
            "(vllm:MODULE:CLASS, vllm@PYTHON:MODULE:CLASS)"
        )
    return python, scheduler or None


def policy_class(name: str) -> type[VllmScheduler]:
    """The policy class a ``vllm`` name names: its parameters are every knob that vLLM's
    ``SchedulerConfig`` and ``CacheConfig`` take (read from that vLLM), beside schedcli's
    own; its name is the name given."""
    python, scheduler = parse(name)
    return _class(name, interpreter(python) if python is not None else None, scheduler)


@functools.lru_cache(maxsize=32)
def _class(name: str, python: str | None, scheduler: str | None) -> type[VllmScheduler]:
    if python is None and available() is not None:
        info: dict[str, Any] = {"knobs": [], "version": None}  # said when it is built
    else:
        info = worker(python).info if python is not None else describe_here()
    declared = {p.name for p in VllmScheduler.PARAMS}
    params = list(VllmScheduler.PARAMS) + [
        _param(k) for k in info["knobs"] if k["name"] not in declared
    ]
    version = f"vLLM {info['version']}" if info["version"] else "vLLM"
    # The class's rule past its "run as is:", after which vLLM's and this name's own.
    what = " ".join((VllmScheduler.RULE or "").split()).partition("run as is: ")[2]
    rule = (
        f"{version}'s own v1 scheduler"
        + (f" (under {python})" if python else "")
        + (f", as the subclass {scheduler} changes it" if scheduler else "")
        + f", run as is: {what}"
    )
    attrs = {
        "name": name,
        "PARAMS": tuple(params),
        "PYTHON": python,
        "SCHEDULER": scheduler,
        "RULE": rule,
        "VERSION": info["version"],
        # The class adds no state, so vLLM's fingerprint is its own; a patched Scheduler
        # may keep state that fingerprint cannot see: it declares none (never a verdict
        # of "never again" from a state schedcli cannot read whole).
        "fingerprint": _no_fingerprint if scheduler else VllmScheduler.fingerprint,
        # A worker's scheduler lives in its process: a fork of this one (the debugger's
        # checkpoint) would share it, so the debugger replays from the start instead.
        "forkable": python is None,
    }
    if scheduler:  # its reasons are its own: none read the stock way (docs/policies.md)
        attrs["reasons"] = _no_reasons
        attrs["left_behind"] = _no_left_behind
    return type("VllmPolicy", (VllmScheduler,), attrs)


def _no_reasons(self: VllmScheduler) -> list[tuple[Id, str, str]]:
    """None known: a patched scheduler decides by rules stock vLLM's reasons do not read."""
    return []


def _no_left_behind(self: VllmScheduler) -> Left:
    return None


def _no_fingerprint(self: VllmScheduler) -> object | None:
    """None: a patched scheduler's own state is not in what schedcli reads of vLLM's."""
    return None


def _param(knob: dict[str, Any]) -> Param:
    """One vLLM knob as a parameter: checked here for its kind and bound, then by vLLM's
    own config class when the scheduler is built."""
    text = f"vLLM {knob['config']}.{knob['name']}"
    if knob.get("unset"):
        text += " (-1: unset, vLLM decides)"
    if knob["kind"] == "int":
        lowest = UNSET if knob.get("unset") else None
        return Param(knob["name"], int, int(knob["default"]), text, lowest)
    if knob["kind"] == "float":
        return Param(knob["name"], float, float(knob["default"]), text, maximum=float(INT_MAX))
    choices = tuple(str(c) for c in knob.get("choices") or ())
    return Param(knob["name"], str, str(knob["default"]), text, choices=choices)


def __getattr__(attr: str) -> Any:
    # ``VLLM``: the policy ``-p vllm`` names, its parameters read from the vLLM here.
    if attr == "VLLM":
        return policy_class(PREFIX)
    raise AttributeError(attr)


def _cap(values: dict[str, Any], narrower: str, cap: str) -> tuple[int, str]:
    """``cap``'s value, or ``narrower``'s where it is given and smaller; and its name."""
    limit = int(values[cap])
    given = values.get(narrower, UNSET)
    if given is None or int(given) == UNSET or int(given) >= limit:
        return limit, cap
    return int(given), narrower
