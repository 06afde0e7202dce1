"""schedcli fit: a step-time model recovered from a clocked recording, used by simulate."""

from __future__ import annotations

import random
import re
from pathlib import Path

import orjson
import pytest

from schedcli import Task
from schedcli.formats.writer import TraceWriter
from tests.helpers import run_cli, write_lines

TRUE = {"a": 0.004, "b": 0.00003, "c": 0.0002, "d": 0.0000005}


def synthesize(path: Path, steps: int = 2000, seed: int = 5, idle_every: int = 40) -> None:
    """A recording whose steps take TRUE's time, with 2% noise and idle gaps mixed in."""
    rng = random.Random(seed)
    t = 0.0
    tid = 0
    with path.open("wb") as f:
        w = TraceWriter(f)
        w.header("decode-first", None, {"synthetic": TRUE})
        for k in range(steps):
            batch = []
            for _ in range(rng.randint(0, 32)):
                tid += 1
                batch.append(Task(tid, tid, "decode", 1, position=rng.randint(10, 4000)))
            for _ in range(rng.randint(0, 2)):
                tid += 1
                size = rng.randint(16, 256)
                batch.append(Task(tid, tid, "prefill", size, position=rng.randint(0, 2000)))
            if not batch:
                tid += 1
                batch.append(Task(tid, tid, "decode", 1, position=5))
            for task in batch:
                w.submit([task], t=t)
            w.get_work([x.tid for x in batch], t=t)
            tokens = sum(x.size for x in batch)
            decodes = sum(1 for x in batch if x.is_decode)
            context = sum((x.position or 0) + x.size for x in batch)
            took = TRUE["a"] + TRUE["b"] * tokens + TRUE["c"] * decodes + TRUE["d"] * context
            t += took * rng.gauss(1.0, 0.02)
            if k % idle_every == idle_every - 1:
                t += rng.uniform(0.5, 3.0)  # the runner waited for requests


def test_fit_recovers_the_coefficients_within_five_percent(tmp_path: Path) -> None:
    rec, cost = tmp_path / "rec.jsonl", tmp_path / "cost.json"
    synthesize(rec)
    r = run_cli("fit", str(rec), "-o", str(cost), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    model = orjson.loads(cost.read_bytes())
    for term, value in TRUE.items():
        assert model[term] == pytest.approx(value, rel=0.05), term
    fit = model["fit"]
    assert fit["outliers"] >= 45  # the 50 idle gaps, 2000 // 40 (a few land in no set)
    assert fit["mape"] < 0.05 and fit["r2"] > 0.95
    assert fit["held_out"] > 300


def test_fit_prints_the_fit_and_its_quality(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"
    synthesize(rec, steps=300)
    r = run_cli("fit", str(rec))
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert "held-out MAPE" in out and "R²" in out and "seconds per decode" in out


def test_simulate_uses_a_fitted_cost_model(tmp_path: Path) -> None:
    rec, cost, w = tmp_path / "rec.jsonl", tmp_path / "cost.json", tmp_path / "w.jsonl"
    synthesize(rec, steps=300)
    assert run_cli("fit", str(rec), "-o", str(cost)).returncode == 0
    w.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 300, "output_tokens": 4}\n')
    r = run_cli("simulate", str(w), "--cost", str(cost), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    summary = orjson.loads(r.stdout)
    model = orjson.loads(cost.read_bytes())
    assert summary["cost_model"] == {k: model[k] for k in ("a", "b", "c", "d")}
    r = run_cli("simulate", str(w), "--cost", str(cost), "--cost-a", "1")
    assert r.returncode == 2 and b"not both" in r.stderr


def test_a_recording_without_times_cannot_be_fitted(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"
    rec.write_text(
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}\n{"op": "get_work"}\n'
    )
    r = run_cli("fit", str(rec))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{rec}:2: get_work has no time: record with clock=True")


def _noisy_without_a_token_term(path: Path, steps: int = 400, seed: int = 3) -> None:
    """Step time does not depend on tokens at all; noise makes plain least squares give
    the token term a small negative coefficient."""
    rng = random.Random(seed)
    t, tid = 0.0, 0
    with path.open("wb") as f:
        w = TraceWriter(f)
        w.header("decode-first", None, None)
        for _ in range(steps):
            batch = []
            for _ in range(rng.randint(1, 30)):
                tid += 1
                batch.append(Task(tid, tid, "decode", 1))
            for task in batch:
                w.submit([task], t=t)
            w.get_work([x.tid for x in batch], t=t)
            t += 0.010 * rng.gauss(1.0, 0.15)


def test_fit_never_writes_a_negative_coefficient_and_says_which_terms_are_zero(
    tmp_path: Path,
) -> None:
    from schedcli.engine.fit import _least_squares

    # Plain least squares on this data would make b negative; the fit keeps it at 0.
    rows = [[1.0, float(n), float(n)] for n in (1, 2, 3, 4, 5, 6)]
    y = [0.010, 0.009, 0.0105, 0.0085, 0.010, 0.0088]
    beta = _least_squares(rows, y, "x")
    assert all(v >= 0 for v in beta)
    rec, cost = tmp_path / "rec.jsonl", tmp_path / "cost.json"
    _noisy_without_a_token_term(rec)
    r = run_cli("fit", str(rec), "-o", str(cost), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    model = orjson.loads(cost.read_bytes())
    assert all(model[term] >= 0 for term in ("a", "b", "c"))
    zero = model["fit"]["zero_terms"]
    assert zero and all(model[term] == 0.0 for term in zero)
    assert any(
        "the best fit with every term >= 0 leaves it out" in n for n in model["fit"]["notes"]
    )
    table = run_cli("fit", str(rec)).stdout.decode()
    assert f"{zero[0]} is 0: the best fit with every term >= 0 leaves it out" in table
    w = tmp_path / "w.jsonl"
    w.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 30, "output_tokens": 4}\n')
    assert run_cli("simulate", str(w), "--cost", str(cost)).returncode == 0


def test_a_cost_model_simulate_refuses_is_named(tmp_path: Path) -> None:
    cost, w = tmp_path / "cost.json", tmp_path / "w.jsonl"
    cost.write_text('{"a": 0.001, "b": -2.6e-8, "c": 0.0001}')
    w.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 30, "output_tokens": 4}\n')
    r = run_cli("simulate", str(w), "--cost", str(cost))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{cost}: cost model b must be a finite number >= 0")


@pytest.mark.parametrize("times", ["alternating", "huge"])
def test_fit1_infinite_or_huge_step_times_are_located(tmp_path: Path, times: str) -> None:
    rec = tmp_path / "rec.jsonl"
    lines = []
    for k in range(40):
        t = (1.7e308 if k % 2 else -1.7e308) if times == "alternating" else k * 1e300
        lines.append(f'{{"op": "submit", "tid": {k}, "sid": {k}, "kind": "decode", "size": 1}}')
        lines.append(f'{{"op": "get_work", "expect": [{k}], "t": {t}}}')
    rec.write_text("\n".join(lines) + "\n")
    r = run_cli("fit", str(rec))
    assert r.returncode == 2, r.stderr
    assert re.match(rf"{re.escape(str(rec))}:\d+: t ", r.stderr.decode())


def _workload(path: Path) -> Path:
    path.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 8, "output_tokens": 3}\n')
    return path


def test_a_poor_fit_is_said_loudly_and_marked(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    lines: list[dict[str, object]] = [{"schedcli": 1, "policy": "fcfs", "params": {}}]
    t = 0.0
    for i in range(200):  # step times that have nothing to do with the batch
        lines.append({"op": "submit", "tid": i, "sid": i, "kind": "prefill",
                      "size": rng.randint(1, 256), "t": t})  # fmt: skip
        t += rng.choice([0.001, 0.05, 0.2])
        lines.append({"op": "get_work", "t": t, "expect": [i]})
    trace = write_lines(tmp_path / "rec.jsonl", lines)
    out = tmp_path / "cost.json"
    r = run_cli("fit", str(trace), "-o", str(out), "-f", "json")
    assert r.returncode == 0
    assert b"warning: this fit is poor" in r.stderr
    fit = orjson.loads(out.read_bytes())["fit"]
    assert fit["quality"] == "poor" and fit["poor"]
    workload = _workload(tmp_path / "w.jsonl")
    r = run_cli("simulate", str(workload), "--cost", str(out), "-f", "json")
    assert r.returncode == 0 and b"is poor" in r.stderr
