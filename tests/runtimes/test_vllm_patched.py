"""A patched vLLM scheduler (``-p vllm:MODULE:CLASS``, ``vllm@PYTHON:MODULE:CLASS``): a
``Scheduler`` subclass runs exactly as stock vLLM runs, and ``diff`` against stock parts
where the two bare loops over vLLM part (bench/vllm_bare.py, the second path).
The patches are tests/vllm_patches.py.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import Cli
from tests.helpers import ROOT
from tests.runtimes.test_vllm_knobs import (
    COST,
    REQUESTS,
    SMALL,
    bare_case,
    bare_steps,
    flags,
    simulated_steps,
    write_workload,
)

PATCHES = "tests.vllm_patches"
SHORTEST = f"{PATCHES}:ShortestFirst"
STOCK = f"{PATCHES}:Stock"


@functools.cache
def _bare(python: str | None) -> dict[str, Any]:
    """Stock vLLM's, ShortestFirst's and Stock's steps under ``python``'s bare loop."""
    stock, shortest, same = bare_steps(
        python, [bare_case({}), bare_case({}, SHORTEST), bare_case({}, STOCK)]
    )
    return {"vllm": stock, SHORTEST: shortest, STOCK: same}


def _first_parting(a: list[Any], b: list[Any]) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)


def _where(python: str | None) -> str:
    return f"vllm@{python}" if python else "vllm"


def _check_runs_and_diffs(cli: Cli, tmp_path: Path, python: str | None) -> None:
    bare = _bare(python)
    assert bare[SHORTEST] != bare["vllm"] and bare[STOCK] == bare["vllm"]
    workload = write_workload(tmp_path)
    stock = _where(python)
    # Run exactly as a bare loop runs that class.
    assert simulated_steps(cli, workload, f"{stock}:{SHORTEST}", {}) == bare[SHORTEST]
    # Diffed against stock on stock's trace: exit 1 at the step where the bare loops part.
    trace = tmp_path / "stock.jsonl"
    r = cli("simulate", workload, "-p", stock, *flags(SMALL), *COST, "-o", trace)
    assert r.code == 0, r.stderr
    r = cli("diff", trace, "--a", stock, "--b", f"{stock}:{SHORTEST}", "-f", "json")
    assert r.code == 1, r.stderr
    first = orjson.loads(r.stdout)["first_difference"]
    assert first["step"] == _first_parting(bare["vllm"], bare[SHORTEST])
    # A subclass that overrides nothing is stock.
    r = cli("diff", trace, "--a", stock, "--b", f"{stock}:{STOCK}", "-f", "json")
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["identical"] is True
    # A patch's reasons are its own: none are read the stock way (a new user's trial saw
    # "needs 35 KV blocks; 8166 free" for a request a patch held back by its own rule).
    r = cli("explain", trace, "-p", f"{stock}:{SHORTEST}", "--step", str(first["step"]))
    assert "no reasons given" in r.stdout.decode(), r.stdout.decode()


@pytest.mark.needs("vllm")
def test_a_patched_scheduler_runs_as_vllm_runs_and_diffs_against_stock_where_it_parts(
    cli: Cli, tmp_path: Path
) -> None:
    _check_runs_and_diffs(cli, tmp_path, None)


def test_a_patched_scheduler_under_another_release_runs_and_diffs_the_same_way(
    cli: Cli, tmp_path: Path, other_vllm: str
) -> None:
    _check_runs_and_diffs(cli, tmp_path, other_vllm)


def _refusals(cli: Cli, tmp_path: Path, stock: str) -> None:
    workload = write_workload(tmp_path, REQUESTS[:2])
    r = cli("simulate", workload, "-p", f"{stock}:tests.no_such_patch:Fix")
    assert r.code == 2, r.stderr
    assert "the module tests.no_such_patch does not import here" in r.stderr
    assert f"the working folder {ROOT} on its path" in r.stderr
    assert "No module named 'tests.no_such_patch'" in r.stderr
    r = cli("simulate", workload, "-p", f"{stock}:{PATCHES}:NotAScheduler")
    assert r.code == 2
    assert "NotAScheduler is not a subclass of vLLM's Scheduler" in r.stderr
    r = cli("simulate", workload, "-p", f"{stock}:{PATCHES}:Missing")
    assert r.code == 2 and f"{PATCHES} has no 'Missing'" in r.stderr
    r = cli("simulate", workload, "-p", f"{stock}:{PATCHES}")
    assert r.code == 2 and "a patched scheduler is named MODULE:CLASS" in r.stderr


@pytest.mark.needs("vllm")
def test_a_class_that_does_not_import_or_is_no_scheduler_is_exit_2_saying_which(
    cli: Cli, tmp_path: Path
) -> None:
    _refusals(cli, tmp_path, "vllm")


def test_the_worker_refuses_a_class_that_does_not_import_there_the_same_way(
    cli: Cli, tmp_path: Path, other_vllm: str
) -> None:
    _refusals(cli, tmp_path, f"vllm@{other_vllm}")


@pytest.mark.needs("vllm")
def test_a_trace_header_naming_a_patched_scheduler_is_refused_while_dash_p_runs_it(
    cli: Cli, tmp_path: Path
) -> None:
    rows = [
        {"schedcli": 1, "level": "request", "policy": f"vllm:{SHORTEST}", "params": SMALL},
        {"op": "arrive", "rid": "a", "prompt_tokens": 20, "max_tokens": 2},
        {"op": "step", "expect": {"batch": [["a", 20]], "preempted": [], "finished": []}},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in rows))
    r = cli("replay", trace, "--check")
    assert r.code == 2
    assert f"{trace}:1: the header names policy 'vllm:{SHORTEST}'" in r.stderr
    assert "never supply code to build or import" in r.stderr
    r = cli("replay", trace, "--check", "-p", f"vllm:{SHORTEST}", "-f", "jsonl")
    assert r.code == 0, r.stderr


@pytest.mark.needs("vllm")
def test_a_patched_scheduler_that_stalls_is_reported_as_unknown_never_as_never_again(
    cli: Cli,
) -> None:
    """It declares no fingerprint (its state is its own): the stall watch sees only that
    nothing is scheduled, where stock vLLM is proven stalled."""
    workload = ROOT / "docs" / "examples" / "vllm-kv-deadlock.workload.jsonl"
    deadlock = ["-P", "num_gpu_blocks=100", "-P", "skip_kv_startup_check=true"]
    r = cli("simulate", workload, "-p", f"vllm:{STOCK}", *deadlock, "--stall-steps", "40")
    assert r.code == 3
    assert "no batch for 40 steps with work queued" in r.stderr
    assert "whether it would ever schedule again is not known" in r.stderr
    r = cli("simulate", workload, "-p", "vllm", *deadlock, "--stall-steps", "40")
    assert r.code == 3 and "it will never schedule again" in r.stderr
