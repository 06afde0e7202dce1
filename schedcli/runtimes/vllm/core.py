"""vLLM's scheduler, driven with plain data: the one piece of schedcli that runs next to vLLM.

``-p vllm`` imports this module and calls a ``Core`` in its own process; ``-p vllm@PYTHON``
runs this very file with another interpreter (``PYTHON core.py``), where vLLM is installed
and schedcli need not be, and calls the same ``Core`` over a pipe (``serve``). One code
path, two transports: the answers are the same values either way, so the output is
byte-identical (docs/policies.md, "vLLM versions side by side").

Invariants:
- This file imports only the standard library, and vLLM lazily: it must run under any
  interpreter that has vLLM, with nothing of schedcli's beside it.
- Every value a ``Core`` method takes or returns is JSON's (dicts with string keys, lists,
  strings, ints, floats, booleans, None), so a pipe carries it unchanged; what vLLM keeps
  (its ``SchedulerOutput`` objects) stays on this side.
- Versions are told apart by feature (a field, a parameter, a module), never by the version
  string; a vLLM whose scheduler interface is outside the supported family is refused at
  load with the family named (``Unsupported``).
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from typing import Any

try:
    from . import vllm_build as vb
except ImportError:  # run as a script by another interpreter: its folder is on sys.path
    import vllm_build as vb  # type: ignore[no-redef,import-not-found]

PROTOCOL = vb.PROTOCOL
Unsupported = vb.Unsupported
TOKEN = 1  # the token every step samples
STOP = -1  # what a trace's ``stop`` samples: every request's stop token, never a real id


# --- the core ---------------------------------------------------------------------------------


class Core:
    """One vLLM scheduler, driven with plain data. Requests are named by string keys (the
    caller's), in arrival order ``order``; each step is ``schedule`` then ``update``."""

    def __init__(self, params: dict[str, Any], scheduler: str | None = None) -> None:
        v = self._v = vb.load()
        cls = vb.scheduler_class(scheduler) if scheduler else None
        self._block_size = int(params.get("block_size", vb.OWN["block_size"]))
        self._sched = vb.build(params, cls)
        self._inflight: deque[tuple[Any, list[str], list[bool]]] = deque()
        self._free = self._running = 0
        self._vllm = v

    def describe(self) -> dict[str, Any]:
        s = self._sched
        cache = s.vllm_config.cache_config
        return {
            "version": vb.version(),
            "class": f"{type(s).__module__}:{type(s).__qualname__}",
            "num_gpu_blocks": int(cache.num_gpu_blocks),
            "watermark_blocks": int(getattr(s.kv_cache_manager, "watermark_blocks", 0)),
        }

    def add(
        self, key: str, tokens: list[int], max_tokens: int, priority: int, arrival: float
    ) -> None:
        v = self._v
        request = v.Request(
            request_id=key,
            prompt_token_ids=tokens,
            sampling_params=v.SamplingParams(
                max_tokens=max_tokens, ignore_eos=True, stop_token_ids=[STOP]
            ),
            pooling_params=None,
            arrival_time=arrival,
            priority=priority,
            block_hasher=v.hasher(self._block_size),
        )
        self._sched.add_request(request)

    def abort(self, key: str) -> str | None:
        """Where the request was (running or waiting) when aborted; None if not held."""
        request = self._sched.requests.get(key)
        if request is None or request.is_finished():
            return None
        where = "running" if request.status == self._v.RequestStatus.RUNNING else "waiting"
        self._sched.finish_requests([key], self._v.RequestStatus.FINISHED_ABORTED)
        return where

    def unfinished(self) -> int:
        return int(self._sched.get_num_unfinished_requests())

    def counts(self) -> list[int]:
        running, waiting = self._sched.get_request_counts()
        return [int(running), int(waiting)]

    def held(self) -> list[str]:
        return [k for k, r in self._sched.requests.items() if not r.is_finished()]

    def schedule(self) -> dict[str, Any]:
        """One ``schedule()``: each slice ``[key, tokens, position, prefill, samples]``, and
        the keys it preempted (its outputs come back with ``update``)."""
        sched = self._sched
        out = sched.schedule()
        # The pool as the first waiting request found it: it fails, nothing more is taken.
        self._free = int(sched.kv_cache_manager.block_pool.get_num_free_blocks())
        self._running = len(sched.running)
        keys = list(out.num_scheduled_tokens)
        batch: list[list[Any]] = []
        for key in keys:
            request = sched.requests[key]
            n = int(out.num_scheduled_tokens[key])
            position = int(request.num_computed_tokens) - n  # schedule() already advanced it
            chunk = bool(request.is_prefill_chunk)
            decode = n == 1 and request.num_output_tokens > 0 and not chunk
            batch.append([key, n, position, not decode, not chunk])
        self._inflight.append((out, keys, [s[4] for s in batch]))
        return {"batch": batch, "preempted": [str(k) for k in (out.preempted_req_ids or ())]}

    def update(self, stop: list[str], sampled: dict[str, int] | None) -> list[str]:
        """The outputs of the oldest step scheduled: a token for each slice that reached
        its request's end (``stop``'s a stop token); the keys that finished."""
        if not self._inflight:
            raise ValueError("update with no step scheduled")
        out, keys, samples = self._inflight.popleft()
        stopping = set(stop)
        tokens: list[list[int]] = []
        for key, one in zip(keys, samples, strict=True):
            if not one or key not in self._sched.requests:
                tokens.append([])
            elif key in stopping:
                tokens.append([STOP])
            else:
                tokens.append([sampled.get(key, TOKEN) if sampled else TOKEN])
        outputs = self._sched.update_from_output(out, self._v.runner_output(keys, tokens))
        return [
            str(o.request_id)
            for group in outputs.values()
            for o in group.outputs
            if o.finish_reason is not None
        ]

    def fingerprint(self) -> list[Any]:
        """What vLLM's next ``schedule()`` decides from: each unfinished request's status
        and progress, the order of every queue it keeps, the blocks each request holds, and
        the free-block queue with each block's cached hash (its order is what allocation
        and prefix-cache eviction take next). Step counters are left out: they decide
        nothing here (no KV connector, no streaming input)."""
        sched = self._sched
        manager = sched.kv_cache_manager
        requests = [
            [
                key,
                r.status.value,
                int(r.num_computed_tokens),
                int(r.num_tokens),
                int(r.num_output_tokens),
                r.num_preemptions > 0,
                [[int(b) for b in ids] for ids in manager.get_block_ids(key)],
            ]
            for key, r in sched.requests.items()
            if not r.is_finished()
        ]
        pool = manager.block_pool
        free = [
            [int(b.block_id), _hex(b.block_hash)]
            for b in pool.free_block_queue.get_all_free_blocks()
        ]
        queues = [
            [r.request_id for r in getattr(sched, name)]
            for name in ("running", "waiting", "kv_holding_waiting", "async_kv_waiting")
            if hasattr(sched, name)
        ]
        deferred = sorted(r.request_id for r in getattr(sched, "deferred_waiting", ()))
        inflight = [list(keys) for _, keys, _ in self._inflight]
        return [requests, queues, deferred, free, inflight]

    def waiting(self, keys: list[str]) -> dict[str, Any]:
        """The facts a step's reasons are read from, after its ``schedule``: for each of
        ``keys`` (the step's slices) its computed and known tokens; the waiting queues in
        order, each request's computed and known tokens; the pool and the running count as
        the step's first waiting request found them; the blocks kept free."""
        sched = self._sched
        sliced = {}
        for key in keys:
            r = sched.requests.get(key)
            if r is not None:
                sliced[key] = [int(r.num_computed_tokens), int(r.num_tokens)]
        queue = [
            [r.request_id, int(r.num_computed_tokens), int(r.num_tokens)]
            for r in [*getattr(sched, "kv_holding_waiting", ()), *sched.waiting]
        ]
        return {
            "slices": sliced,
            "queue": queue,
            "free": self._free,
            "running": self._running,
            "watermark": int(getattr(sched.kv_cache_manager, "watermark_blocks", 0)),
            "reserve_full": bool(getattr(sched, "scheduler_reserve_full_isl", False)),
        }

    def computed(self, keys: list[str]) -> dict[str, int]:
        found = {}
        for key in keys:
            r = self._sched.requests.get(key)
            if r is not None:
                found[key] = int(r.num_computed_tokens)
        return found

    def close(self) -> None:
        self._sched.shutdown()


def _hex(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    raw = getattr(value, "block_hash", value)
    return bytes(raw).hex() if isinstance(raw, (bytes, bytearray)) else repr(raw)


# --- the pipe ---------------------------------------------------------------------------------

CALLS = frozenset(
    {
        "describe",
        "add",
        "abort",
        "unfinished",
        "counts",
        "held",
        "schedule",
        "update",
        "fingerprint",
        "waiting",
        "computed",
        "close",
    }
)


def serve(inp: Any, out: Any) -> int:
    """Answer calls, one JSON object a line: ``{"new": H, "params": {...}, "scheduler":
    S}`` builds core H; ``{"call": NAME, "core": H, "args": [...]}`` calls it; ``{"info":
    true}`` says the version, the protocol and the knobs. Each answer is one line,
    ``{"ok": VALUE}`` or ``{"error": KIND, "message": TEXT}`` (KIND ValueError for what the
    caller gave, Unsupported for this vLLM, else the exception's type: the caller's
    policy broke)."""
    cores: dict[int, Core] = {}
    for line in inp:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            answer: Any
            if message.get("info"):
                answer = vb.describe()
            elif "new" in message:
                cores[int(message["new"])] = Core(message["params"], message.get("scheduler"))
                answer = None
            else:
                name = message["call"]
                if name not in CALLS:
                    raise ValueError(f"no call {name!r}")
                core = cores[int(message["core"])]
                answer = getattr(core, name)(*message.get("args", ()))
                if name == "close":
                    del cores[int(message["core"])]
            reply = {"ok": answer}
        except (ValueError, Unsupported) as e:
            reply = {"error": type(e).__name__, "message": str(e)}
        except Exception as e:  # the scheduler's own failure: reported, the pipe lives on
            reply = {"error": type(e).__name__, "message": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply, separators=(",", ":")) + "\n")
        out.flush()
    return 0


def main() -> int:
    # stdout is the pipe: anything else printed to it (a library's print) goes to stderr.
    pipe = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(sys.stdin, pipe)


if __name__ == "__main__":
    sys.exit(main())
