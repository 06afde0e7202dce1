"""Coverage-guided fuzzing of schedcli with atheris (libFuzzer), one target at a time.

    python fuzz/run.py TARGET [libFuzzer flags...]
    python fuzz/run.py replay -max_total_time=30          # what CI runs, per target
    python fuzz/run.py diff -max_total_time=3600 -jobs=2  # longer, on both cores

TARGET is one of fuzz_targets.TARGETS (docs/fuzzing.md lists them). The seed corpus is every file
under traces/ (traces and golden dumps) plus a CSV and a workload; new inputs the fuzzer
finds go to fuzz/corpus/TARGET/ (not committed). A crash is written as crash-* in the
current directory and ends the run with a non-zero exit. Defaults: 10 s per input at
most (a hang), 2 GiB of memory at most. Always pure Python (SCHEDCLI_PURE_PYTHON), so
the coverage that guides the fuzzer includes the modules the install compiles.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
SEEDS = {
    "lengths.csv": b"num_prefill_tokens,num_decode_tokens\n12,3\n40,7\n",
    "azure.csv": (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        b"2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.9951690,396,109\r\n"
    ),
    "workload.jsonl": (
        b'{"sid": 1, "arrival": 0, "prompt_tokens": 20, "output_tokens": 3}\n'
        b'{"sid": 2, "arrival": 0.5, "prompt_tokens": 300, "output_tokens": 2, "cancel_after": 1}\n'
    ),
    "spec.toml": (
        b"time_scale=0.5,1\njobs = 1\n[grid]\nmax_num_seqs = [4, 16]\n"
        b"[cost]\na = 0.005\n[capacity]\nslo_ttft = 0.5\nslo_tpot = 0.05\n"
    ),
    "sweep.jsonl": (
        b'{"workload":"w.jsonl","policy":"fcfs","params":{"max_num_seqs":4},'
        b'"cost_model":{"a":0.005,"b":2e-05,"c":0.0001},"metrics":{"requests":2,"finished":1,'
        b'"rejected":1,"rejected_by_reason":{"too big":1},"throughput_output_tokens_per_s":9.5,'
        b'"ttft":{"p99":0.2},"tpot":{"p99":0.01},"chunk_size":256},"capacity":{"rate_multiplier":2}}\n'
    ),
    "requests.jsonl": (
        b'{"op":"arrive","rid":"a","prompt_tokens":40,"max_tokens":3,"t":0.0}\n'
        b'{"op":"arrive","rid":2,"prompt_tokens":7,"max_tokens":2,"t":0.1}\n'
        b'{"op":"step","expect":{"batch":[["a",16],[2,7]],"preempted":[],"finished":[]}}\n'
        b'{"op":"abort","rid":"a","t":0.3}\n{"op":"step"}\n{"op":"step"}\n'
    ),
    "requests-split.jsonl": (
        b'{"op":"arrive","rid":"a","prompt_tokens":20,"max_tokens":2,"t":0.0}\n'
        b'{"op":"schedule","expect":{"batch":[["a",16]],"preempted":[]}}\n'
        b'{"op":"schedule"}\n{"op":"update"}\n{"op":"update","expect":{"finished":[]}}\n'
    ),
    # cxx-spec: a spec in the grammar, "=" first for the bundled FIFO header's path.
    "cxx-spec.txt": b"=schedcli_test::FifoScheduler::create(max_batch_tokens=512, 8, 256)",
    "cxx-spec-template.txt": b"=std::make_unique<schedcli_test::FifoScheduler>(64, 4, 16)",
    "clocked.jsonl": b"".join(
        b'{"op":"submit","tid":%d,"sid":%d,"kind":"decode","size":1}\n'
        b'{"op":"get_work","expect":[%d],"t":%f}\n' % (i, i, i, 0.01 * i + 0.001 * (i % 3))
        for i in range(12)
    ),
}


def seed_corpus(target: str) -> Path:
    corpus = ROOT / "fuzz" / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "traces").rglob("*.jsonl")):
        shutil.copyfile(path, corpus / f"seed-{path.parent.name}-{path.name}")
    for name, data in SEEDS.items():
        (corpus / f"seed-{name}").write_bytes(data)
    return corpus


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    target_name, flags = sys.argv[1], sys.argv[2:]
    # Pure Python: atheris instruments bytecode, and compiled modules have none to guide it.
    os.environ["SCHEDCLI_PURE_PYTHON"] = "1"
    defaults = ["-timeout=10", "-rss_limit_mb=2048", "-max_len=4096"]
    if target_name == "requests-vllm":  # vLLM's own scheduler: its import is an input's time
        os.environ["SCHEDCLI_FUZZ_VLLM"] = "1"
        defaults = ["-timeout=180", "-rss_limit_mb=6144", "-max_len=4096"]
    with atheris.instrument_imports():
        from fuzz_targets import TARGETS

        import schedcli  # noqa: F401  (instrumented for coverage)

    if target_name not in TARGETS:
        sys.exit(f"unknown target {target_name!r}; one of {', '.join(TARGETS)}")
    target = TARGETS[target_name]
    corpus = seed_corpus(target_name)
    args = [sys.argv[0], *defaults, *flags, f"-artifact_prefix={Path.cwd()}/", str(corpus)]
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
