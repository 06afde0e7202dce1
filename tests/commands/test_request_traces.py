"""Request-level traces without vLLM: what validate, convert and fit read of them, and what a
machine without the extra is told. (Replaying them needs vLLM: tests/runtimes/test_vllm.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Cli
from tests.helpers import REQUEST_HEADER, TOY, run_cli, write_lines

HEADER = {"schedcli": 1, "level": "request", "policy": "vllm", "params": {"max_num_seqs": 4}}
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _write(path: Path, events: list[dict[str, Any]], header: dict[str, Any] = HEADER) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [header, *events]))
    return path


def _step(batch: list[list[Any]], finished: list[Any] = (), **fields: Any) -> dict[str, Any]:  # type: ignore[assignment]
    expect = {"batch": batch, "preempted": fields.pop("preempted", []), "finished": list(finished)}
    return {"op": "step", **fields, "expect": expect}


def test_validate_names_every_bad_line_of_a_request_trace(cli: Cli, tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "bad.jsonl",
        [
            {"op": "arrive", "rid": "a", "prompt_tokens": 5, "max_tokens": 0},
            {"op": "arrive", "rid": "b", "tokens": [1, 2], "prompt_tokens": 3, "max_tokens": 2},
            {"op": "step", "expect": {"batch": [["a"]]}},
            {"op": "abort"},
            {"op": "arrival", "rid": "c"},
            {"op": "step", "stop": "a"},
        ],
        {**HEADER, "params": {"max_num_seqz": 4}},
    )
    r = cli("validate", trace)
    assert r.code == 2
    first, *lines = r.stderr.splitlines()
    if HAS_VLLM:  # schedcli's own eleven first, then every knob the installed vLLM takes
        assert first.startswith(
            f"{trace}:1: header param 'max_num_seqz' is not a parameter of policy 'vllm' "
            "(did you mean 'max_num_seqs'? it takes max_num_batched_tokens, max_num_seqs, "
            "num_gpu_blocks, block_size, enable_chunked_prefill, "
            "long_prefill_token_threshold, enable_prefix_caching, policy, max_model_len, "
            "async_scheduling, skip_kv_startup_check"
        )
        assert first.endswith(")")
    else:  # its knobs are not known, so no header name is called a typo: what it needs is
        assert first == (
            f"{trace}:1: policy 'vllm': needs vLLM 0.33 to 0.34: pip install "
            "'schedcli[vllm]', or -p vllm@PYTHON"
        )
    assert lines[0] == f"{trace}:2: max_tokens must be >= 1, not 0"
    assert lines[1] == f"{trace}:3: prompt_tokens 3 disagrees with the 2 tokens given"
    assert lines[2] == f'{trace}:4: expect.batch entry ["a"] is not [rid, tokens >= 0]'
    assert lines[3] == f"{trace}:5: abort has no rid"
    assert lines[4].startswith(f'{trace}:6: unknown op "arrival" in a request-level trace')
    assert lines[5].startswith(f"{trace}:7: stop must be an array of request ids")
    assert "7 problem(s)" in lines[6]


@pytest.mark.needs("vllm")  # validate refuses -p vllm where it could not be built
def test_a_good_request_trace_validates_without_building_vllm(cli: Cli, tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            {"op": "arrive", "rid": 1, "prompt_tokens": 3, "max_tokens": 1, "t": 0.0},
            _step([[1, 3]], [1]),
        ],
    )
    r = cli("validate", trace)
    assert r.code == 0 and "valid, 2 event(s)" in r.stderr


def test_convert_turns_a_recording_into_the_traffic_it_carried(cli: Cli, tmp_path: Path) -> None:
    # "a" arrives first and outlives "b": rows still leave in arrival order. "c" aborts.
    trace = _write(
        tmp_path / "rec.jsonl",
        [
            {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 9, "t": 1.0},
            {
                "op": "arrive",
                "rid": "b",
                "prompt_tokens": 2,
                "max_tokens": 9,
                "t": 1.5,
                "priority": 2,
            },
            _step([["a", 2], ["b", 2]]),  # b samples its first token
            {"op": "arrive", "rid": "c", "prompt_tokens": 6, "max_tokens": 7, "t": 2.0},
            _step([["a", 2], ["b", 1]], ["b"], stop=["b"]),  # a samples; b stops (2 tokens)
            {"op": "abort", "rid": "c", "t": 2.25},
            _step([["a", 1]]),
            _step([["a", 1]], ["a"]),  # a: 3 tokens
        ],
    )
    out = tmp_path / "w.jsonl"
    r = cli("convert", "auto", trace, "-o", out)
    assert r.code == 0, r.stderr
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert rows == [
        {"sid": 0, "arrival": 0.0, "prompt_tokens": 4, "output_tokens": 3, "meta": {"rid": "a"}},
        {
            "sid": 1,
            "arrival": 0.5,
            "prompt_tokens": 2,
            "output_tokens": 2,
            "priority": 2,
            "meta": {"rid": "b"},
        },
        {
            "sid": 2,
            "arrival": 1.0,
            "prompt_tokens": 6,
            "output_tokens": 7,
            "cancel_after": 0.25,
            "meta": {"rid": "c"},
        },
    ]
    r = cli("simulate", out, "-p", "fcfs", "-f", "json")  # every policy runs the traffic
    assert r.code == 0 and orjson.loads(r.stdout)["requests"] == 3


def test_convert_counts_a_preempted_request_s_recomputed_tokens_once(
    cli: Cli, tmp_path: Path
) -> None:
    trace = _write(
        tmp_path / "rec.jsonl",
        [
            {"op": "arrive", "rid": "a", "prompt_tokens": 3, "max_tokens": 9, "t": 0.0},
            _step([["a", 3]]),  # samples token 1
            _step([], preempted=["a"]),
            _step([["a", 4]]),  # recomputes prompt + token 1, samples token 2
            _step([["a", 1]], ["a"]),  # token 3
        ],
    )
    out = tmp_path / "w.jsonl"
    assert cli("convert", "auto", trace, "-o", out).code == 0
    assert orjson.loads(out.read_bytes())["output_tokens"] == 3


def test_fit_reads_the_wall_times_of_a_request_level_recording(cli: Cli, tmp_path: Path) -> None:
    a, b, c = 0.004, 0.00003, 0.0002
    events: list[dict[str, Any]] = []
    for i in range(12):
        events.append(
            {"op": "arrive", "rid": i, "prompt_tokens": 40 + 17 * i, "max_tokens": 6, "t": float(i)}
        )
    prompts = {i: 40 + 17 * i for i in range(12)}
    produced = dict.fromkeys(range(12), 0)
    computed = dict.fromkeys(range(12), 0)
    step = 0
    while any(produced[i] < 6 for i in range(12)):
        batch, finished, decodes = [], [], 0
        for i in range(12):
            if produced[i] >= 6 or i > step:
                continue
            known = prompts[i] + produced[i]
            n = min(known - computed[i], 25 + 3 * i)
            decodes += n == 1 and produced[i] > 0
            batch.append([i, n])
            computed[i] += n
            if computed[i] >= known:
                produced[i] += 1
                if produced[i] == 6:
                    finished.append(i)
        tokens = sum(n for _, n in batch)
        events.append(_step(batch, finished, wall=round(a + b * tokens + c * decodes, 9)))
        step += 1
    trace = _write(tmp_path / "rec.jsonl", events)
    out = tmp_path / "cost.json"
    r = cli("fit", trace, "-o", out)
    assert r.code == 0, r.stderr
    fitted = orjson.loads(out.read_bytes())
    assert fitted["a"] == pytest.approx(a, rel=1e-4)
    assert fitted["b"] == pytest.approx(b, rel=1e-4)
    assert fitted["c"] == pytest.approx(c, rel=1e-4)


def test_fit_refuses_a_request_trace_without_wall_times(cli: Cli, tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "rec.jsonl",
        [{"op": "arrive", "rid": 1, "prompt_tokens": 3, "max_tokens": 1}, _step([[1, 3]], [1])],
    )
    r = cli("fit", trace)
    assert r.code == 2 and "no step with a wall time" in r.stderr


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_without_the_extra_vllm_is_listed_with_how_to_install_it(cli: Cli, tmp_path: Path) -> None:
    r = cli("policies", "-f", "json")
    described = {d["name"]: d for d in orjson.loads(r.stdout)}
    assert "pip install 'schedcli[vllm]'" in described["vllm"]["note"]
    trace = _write(
        tmp_path / "t.jsonl", [{"op": "arrive", "rid": 1, "prompt_tokens": 3, "max_tokens": 1}]
    )
    r = cli("replay", trace)
    assert r.code == 2 and "pip install 'schedcli[vllm]'" in r.stderr
    workload = tmp_path / "w.jsonl"
    workload.write_bytes(b'{"sid": 1, "arrival": 0, "prompt_tokens": 3, "output_tokens": 2}\n')
    r = cli("simulate", workload, "-p", "vllm")
    assert r.code == 2 and "pip install 'schedcli[vllm]'" in r.stderr


def test_a_task_level_policy_refuses_a_request_level_trace_and_back(
    cli: Cli, tmp_path: Path
) -> None:
    trace = _write(
        tmp_path / "t.jsonl", [{"op": "arrive", "rid": 1, "prompt_tokens": 3, "max_tokens": 1}]
    )
    r = cli("replay", trace, "-p", "fcfs")
    assert r.code == 2 and "not a request-level policy" in r.stderr
    r = cli("replay", "traces/rotation-fairness.jsonl", "-p", "vllm")
    assert r.code == 2 and "is request-level" in r.stderr


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 50), st.integers(1, 6), st.booleans()), min_size=1, max_size=12
    )
)
def test_convert_writes_every_request_once_in_arrival_order(
    tmp_path_factory: pytest.TempPathFactory, requests: list[tuple[int, int, bool]]
) -> None:
    # Requests run one at a time, in reverse order of arrival: the last arrived ends first.
    from schedcli.app.inprocess import run_cli_in_process

    events: list[dict[str, Any]] = [
        {"op": "arrive", "rid": f"r{i}", "prompt_tokens": p, "max_tokens": o, "t": float(i)}
        for i, (p, o, _) in enumerate(requests)
    ]
    for i in reversed(range(len(requests))):
        p, o, aborted = requests[i]
        if aborted:
            events.append({"op": "abort", "rid": f"r{i}", "t": float(len(requests) + i)})
            continue
        events.append(_step([[f"r{i}", p]], [f"r{i}"] if o == 1 else []))
        for k in range(1, o):
            events.append(_step([[f"r{i}", 1]], [f"r{i}"] if k == o - 1 else []))
    folder = tmp_path_factory.mktemp("convert")
    trace = _write(folder / "t.jsonl", events)
    run = run_cli_in_process(["convert", "auto", str(trace)])
    assert run.code == 0, run.stderr
    rows = [orjson.loads(line) for line in run.stdout.splitlines()]
    assert [r["meta"]["rid"] for r in rows] == [f"r{i}" for i in range(len(requests))]
    for row, (p, o, aborted) in zip(rows, requests, strict=True):
        assert row["prompt_tokens"] == p and row["output_tokens"] == o
        assert ("cancel_after" in row) == aborted


def test_an_update_with_no_schedule_to_answer_is_refused_alike(cli: Cli, tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "split.jsonl",
        [
            {"op": "arrive", "rid": "a", "prompt_tokens": 2, "max_tokens": 1, "t": 0.0},
            {"op": "schedule", "expect": {"batch": [["a", 2]]}},
            {"op": "update", "expect": {"finished": ["a"]}},
            {"op": "update"},
        ],
    )
    message = f"{trace}:5: update with no schedule before it to answer"
    r = cli("validate", trace, "-p", TOY)  # any request-level policy: vLLM's needs its extra
    assert r.code == 2 and r.stderr.splitlines()[0] == message
    r = cli("convert", "auto", trace)
    assert r.code == 2 and message in r.stderr


ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 10, "max_tokens": 3, "t": 0.0}


VLLM_HEADER = {"schedcli": 1, "level": "request", "policy": "vllm", "params": {}}


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"num_gpu_blocks": 20_000_000}, "num_gpu_blocks must be <= 1,048,576"),
        ({"max_model_len": 2**63 - 1}, "max_model_len must be <= 4,194,304"),
        ({"block_size": 1_048_576}, "block_size must be <= 4,096"),
        ({"max_num_seqs": 10**9}, "max_num_seqs must be <= 65,536"),
    ],
)
def test_vllm_parameters_are_bounded_and_validate_says_so(
    tmp_path: Path, params: dict[str, object], said: str
) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl", [{**REQUEST_HEADER, "policy": "vllm", "params": params}, ARRIVE]
    )
    r = run_cli("validate", str(trace))
    assert r.returncode == 2 and said in r.stderr.decode()
    assert r.stderr.decode().startswith(f"{trace}:1: ")


def test_a_request_larger_than_any_cache_is_refused_at_its_line(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl",
        [
            REQUEST_HEADER,
            {"op": "arrive", "rid": "a", "prompt_tokens": 2_000_000_000, "max_tokens": 1},
        ],
    )
    for command in ("validate", "replay"):
        r = run_cli(command, str(trace))
        assert r.returncode == 2 and r.stderr.decode().startswith(f"{trace}:2: ")
        assert "prompt_tokens must be <= 2,097,152, not 2000000000" in r.stderr.decode()


def test_a_prompt_longer_than_the_bound_is_named_as_such(tmp_path: Path) -> None:
    prompt = list(range(2**21 + 1))
    trace = write_lines(
        tmp_path / "r.jsonl",
        [REQUEST_HEADER, {"op": "arrive", "rid": "a", "tokens": prompt, "max_tokens": 1}],
    )
    r = run_cli("validate", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:2: tokens has 2,097,153 entries, more than")


def test_a_request_header_parameter_error_names_its_file_and_line(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl", [{**REQUEST_HEADER, "params": {"max_num_batched_tokens": 0}}, ARRIVE]
    )
    r = run_cli("replay", str(trace))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:1: policy 'toy-requests': max_num_batched_tokens")


def test_validate_refuses_a_request_trace_replay_cannot_run_without_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    trace = write_lines(
        tmp_path / "r.jsonl",
        [VLLM_HEADER, {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 3}],
    )
    validated = run_cli("validate", str(trace))
    replayed = run_cli("replay", str(trace))
    assert (validated.returncode, replayed.returncode) == (2, 2)
    assert b"pip install 'schedcli[vllm]'" in validated.stderr
    assert b"pip install 'schedcli[vllm]'" in replayed.stderr


def test_a_request_level_trace_refuses_follow_and_a_task_naming_the_flags(
    cli: Cli, tmp_path: Path
) -> None:
    """The level says which option it refuses as a fact; the app words it as the flag."""
    trace = _write(tmp_path / "r.jsonl", [ARRIVE], REQUEST_HEADER)
    r = cli("replay", trace, "--follow")
    assert (r.code, r.stderr) == (
        2,
        f"schedcli: {trace}: --follow reads task-level traces as they grow; a request-level "
        "trace is replayed once it is written (drop --follow)\n",
    )
    r = cli("explain", trace, "-p", TOY, "--task", "1")
    assert (r.code, r.stderr) == (
        2,
        "schedcli: a request-level trace holds requests: explain --session RID\n",
    )
