"""A seeded search for stalls of vLLM's own scheduler under configurations its engine
accepts: random request-level traces (shared prompt prefixes, priorities, chunked prefill
on and off, prefix caching, async scheduling, small caches up to what the engine's start-up
check allows), each replayed with ``--drain``. Exit 3 is a stall or cycle (a finding: of
vLLM, or of schedcli's watch); exit 2 is a configuration vLLM's own validation refuses.

    python fuzz/vllm_stalls.py [FIRST_SEED] [COUNT]     # needs the vllm extra

Prints each non-zero exit and the counts by exit code.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson


def case(seed: int) -> list[dict[str, Any]]:
    """One trace: a header the engine accepts, then 1-14 arrivals, no steps (drained)."""
    rng = random.Random(seed)
    block_size = rng.choice([4, 8, 16])
    blocks = rng.randint(6, 120)
    max_len = rng.randint(2, (blocks - 1) * block_size)  # the start-up check's bound
    chunked = rng.random() < 0.8
    budget = rng.randint(8, max(16, max_len * 2))
    params = {
        "num_gpu_blocks": blocks,
        "block_size": block_size,
        "max_model_len": max_len,
        "max_num_batched_tokens": budget if chunked else max(budget, max_len),
        "max_num_seqs": rng.randint(1, 8),
        "enable_chunked_prefill": "true" if chunked else "false",
        "enable_prefix_caching": rng.choice(["true", "false"]),
        "policy": rng.choice(["fcfs", "priority"]),
        "long_prefill_token_threshold": rng.choice([0, 0, rng.randint(1, 64)]),
        "async_scheduling": rng.choice(["false", "false", "true"]),
    }
    lines: list[dict[str, Any]] = [
        {"schedcli": 1, "level": "request", "policy": "vllm", "params": params}
    ]
    shared = [rng.randint(100, 900) for _ in range(max_len)]
    for i in range(rng.randint(1, 14)):
        n = rng.randint(1, max(1, max_len - 1))  # under max_model_len: admitted
        k = rng.randint(0, n) if rng.random() < 0.5 else 0
        tokens = shared[:k] + [rng.randint(100, 900) for _ in range(n - k)]
        lines.append(
            {"op": "arrive", "rid": f"r{i}", "tokens": tokens,
             "max_tokens": rng.randint(1, max_len), "priority": rng.randint(0, 3)}
        )  # fmt: skip
    return lines


def main() -> None:
    from schedcli.app.inprocess import run_cli_in_process

    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    exits: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, first + count):
            path = Path(tmp) / f"c{seed}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in case(seed)))
            run = run_cli_in_process(["replay", str(path), "--drain", "-o", os.devnull])
            exits[run.code] = exits.get(run.code, 0) + 1
            if run.code:
                print(f"seed {seed}: exit {run.code}: {run.stderr.strip()[:300]}", flush=True)
    print(f"{count} traces from seed {first}: exits {dict(sorted(exits.items()))}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
