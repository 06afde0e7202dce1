"""fuzz/fuzz_targets.py: the coverage-guided fuzzer's targets, run on bundled inputs."""

from __future__ import annotations


def test_every_fuzz_target_loads_and_runs_an_input_in_the_default_suite() -> None:
    # The harness is outside the package: a module it names that moves would break only
    # CI's fuzz step. Here each target but vLLM's runs on bundled inputs.
    import importlib.util
    import sys

    from tests.helpers import ROOT, TRACES

    spec = importlib.util.spec_from_file_location("fuzz_targets", ROOT / "fuzz" / "fuzz_targets.py")
    assert spec is not None and spec.loader is not None
    from schedcli.runtimes.vllm import policy

    module = importlib.util.module_from_spec(spec)
    saved, available = list(sys.path), policy.available  # the harness replaces both
    try:
        spec.loader.exec_module(module)
        inputs = [b"", (TRACES / "rotation-fairness.jsonl").read_bytes()[:2000]]
        for name, target in module.TARGETS.items():
            if name in ("requests-vllm", "compiled-pure"):  # vLLM's import; two subprocesses
                continue
            for data in inputs:
                target(data)
    finally:
        sys.path[:] = saved
        policy.available = available  # type: ignore[method-assign]
