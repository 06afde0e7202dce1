"""``simulate -p vllm`` against a bare loop over vLLM's scheduler (bench/vllm_bare.py), on
the same requests, both in this process, CPU time. vLLM's import is measured apart.

    python bench/vllm_bench.py [--trace PATH] [--requests N] [--repeat N]

The workload is the first N requests (default 2,000) of the Azure conversation trace
(``schedcli convert``). Both sides build the same scheduler and run it to the end; the
figure is the least CPU of N interleaved runs of each. Target: at most 1.3x.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import verdict
from bench.vllm_bare import bare_loop

REAL = Path(
    os.environ.get("SCHEDCLI_TRACES_REAL")
    or Path(__file__).resolve().parent.parent.parent / "shared" / "traces-real"
)
DEFAULT = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
PARAMS = {
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 128,
    "num_gpu_blocks": 4096,
    "block_size": 16,
}
TARGET = 1.3


def cpu(fn: object) -> float:
    start = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(DEFAULT))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from schedcli.app.inprocess import run_cli_in_process

    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "w.jsonl"
        run = run_cli_in_process(
            ["convert", "auto", args.trace, "--limit", str(args.requests), "-o", str(workload)]
        )
        assert run.code == 0, run.stderr
        requests = [orjson.loads(line) for line in workload.read_bytes().splitlines()]

        start = time.perf_counter()
        t0 = time.process_time()
        from schedcli.runtimes.vllm.build import load
        from schedcli.runtimes.vllm.policy import build_scheduler

        load()
        build_scheduler(PARAMS)  # the first build in a cache inspects the model: not timed
        print(
            f"vLLM import and first build: {time.perf_counter() - start:.1f} s wall, "
            f"{time.process_time() - t0:.1f} s CPU (excluded below)"
        )
        argv = ["simulate", str(workload), "-p", "vllm", "-f", "json"]
        argv += [f"-P{k}={v}" for k, v in PARAMS.items()]
        steps = len(bare_loop(requests, PARAMS))
        ours, bare = [], []
        for _ in range(args.repeat):
            bare.append(cpu(lambda: bare_loop(requests, PARAMS)))
            result: list[object] = []
            ours.append(cpu(lambda into=result: into.append(run_cli_in_process(argv))))
            done = result[0]
            assert done.code == 0, done.stderr  # type: ignore[attr-defined]
            simulated = orjson.loads(done.stdout)["steps"]  # type: ignore[attr-defined]
            assert simulated == steps, (simulated, steps)
    ratio = min(ours) / min(bare)
    print(f"{len(requests)} requests, {steps} steps, params {PARAMS}")
    print(
        f"bare loop over vLLM's Scheduler: {min(bare):.2f} s CPU ({steps / min(bare):.0f} steps/s)"
    )
    print(f"schedcli simulate -p vllm:       {min(ours):.2f} s CPU")
    print(f"ratio {ratio:.2f}x (target <= {TARGET}x): {verdict(ratio, TARGET)}")


if __name__ == "__main__":
    main()
