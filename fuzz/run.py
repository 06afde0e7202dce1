"""Coverage-guided fuzzing of schedcli with atheris (libFuzzer), one target at a time.

    python fuzz/run.py TARGET [libFuzzer flags...]
    python fuzz/run.py replay -max_total_time=30          # what CI runs, per target
    python fuzz/run.py diff -max_total_time=3600 -jobs=2  # longer, on both cores

TARGET is replay, validate, convert-simulate or diff. The seed corpus is every file
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
    with atheris.instrument_imports():
        from fuzz_targets import TARGETS

        import schedcli  # noqa: F401  (instrumented for coverage)

    if target_name not in TARGETS:
        sys.exit(f"unknown target {target_name!r}; one of {', '.join(TARGETS)}")
    target = TARGETS[target_name]
    corpus = seed_corpus(target_name)
    defaults = ["-timeout=10", "-rss_limit_mb=2048", "-max_len=4096"]
    args = [sys.argv[0], *defaults, *flags, f"-artifact_prefix={Path.cwd()}/", str(corpus)]
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
