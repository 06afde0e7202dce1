"""A bare loop over vLLM's own Scheduler: the held-out driver ``simulate -p vllm`` is checked
against (tests/runtimes/test_vllm.py) and timed against (bench/vllm_bench.py).

It shares only the scheduler's configuration with schedcli (``build_scheduler``); the
loop is written here again from vLLM's interface: requests added at their arrival, one
``schedule()`` and ``update_from_output()`` per step, a token sampled by every request
whose computed tokens reach its known ones, time advanced by the same cost model.
"""

from __future__ import annotations

from typing import Any

Step = tuple[list[list[Any]], list[Any], list[Any]]  # batch [[rid, n]], preempted, finished


def bare_loop(
    requests: list[dict[str, Any]],
    params: dict[str, Any],
    cost: tuple[float, float, float] = (0.005, 0.00002, 0.0001),
    max_steps: int | None = None,
) -> list[Step]:
    """Each step of the workload (``sid``, ``arrival``, ``prompt_tokens``,
    ``output_tokens``, optional ``priority``; sorted by arrival) under vLLM's scheduler;
    the first ``max_steps`` only, if given (a scheduler that stalls steps forever)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    from schedcli.runtimes.vllm.build import load
    from schedcli.runtimes.vllm.policy import build_scheduler

    sched = build_scheduler(params)
    hasher = load().hasher(int(params.get("block_size", 16)))
    a, b, c = cost
    rid_of: dict[str, Any] = {}
    order: dict[str, int] = {}
    steps: list[Step] = []
    pending = list(requests)
    t = pending[0]["arrival"] if pending else 0.0
    while max_steps is None or len(steps) < max_steps:
        while pending and pending[0]["arrival"] <= t:
            r = pending.pop(0)
            key = f"k{len(order)}"
            order[key], rid_of[key] = len(order), r["sid"]
            base = (len(order) + 7) * 10_000_000
            sched.add_request(
                Request(
                    request_id=key,
                    prompt_token_ids=list(range(base, base + r["prompt_tokens"])),
                    sampling_params=SamplingParams(max_tokens=r["output_tokens"], ignore_eos=True),
                    pooling_params=None,
                    arrival_time=float(order[key]),
                    priority=r.get("priority", 0),
                    block_hasher=hasher,
                )
            )
        if not sched.get_num_unfinished_requests():
            if not pending:
                return steps
            t = pending[0]["arrival"]
            continue
        out = sched.schedule()
        keys = list(out.num_scheduled_tokens)
        sampled, tokens, decodes = [], 0, 0
        for key in keys:
            req = sched.requests[key]
            n = out.num_scheduled_tokens[key]
            tokens += n
            if n == 1 and req.num_output_tokens > 0 and req.num_computed_tokens == req.num_tokens:
                decodes += 1
            sampled.append([5] if req.num_computed_tokens >= req.num_tokens else [])
        result = sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=keys,
                req_id_to_index={k: i for i, k in enumerate(keys)},
                sampled_token_ids=sampled,
            ),
        )
        finished = sorted(
            (o.request_id for v in result.values() for o in v.outputs if o.finish_reason),
            key=order.__getitem__,
        )
        preempted = sorted(out.preempted_req_ids or (), key=order.__getitem__)
        steps.append(
            (
                [[rid_of[k], out.num_scheduled_tokens[k]] for k in keys],
                [rid_of[k] for k in preempted],
                [rid_of[k] for k in finished],
            )
        )
        t += a + b * tokens + c * decodes
    return steps
