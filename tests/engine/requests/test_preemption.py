"""What preemption costs (engine/requests/preemption.py), as ``stats`` and ``report`` show
it for a request-level run: each preemption's victim, the tokens each request computes
again after losing its KV cache, and the recompute share overall."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedcli.model.requests import Slice, StepPlan
from tests.conftest import Cli
from tests.helpers import REQUEST_HEADER, ROOT, TOY, write_lines

PREEMPTS = "tests.doubles:Preempts"  # a toy KV cache of kv_tokens, preemption by recompute
KEYS = ("preemptions", "computed_tokens", "recomputed_tokens", "recompute_share")


def _step(batch: list[list[Any]], preempted: list[Any] = (), finished: list[Any] = ()) -> Any:  # type: ignore[assignment]
    expect = {"batch": batch, "preempted": list(preempted), "finished": list(finished)}
    return {"op": "step", "expect": expect}


def _one_preemption(tmp_path: Path) -> Path:
    """Two requests in a cache of 8 tokens: b is preempted at step 1 after computing its
    4 prompt tokens, and at step 3 computes those 4 again and its first output's."""
    return write_lines(
        tmp_path / "preempt.jsonl",
        [
            REQUEST_HEADER,
            {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 3},
            {"op": "arrive", "rid": "b", "prompt_tokens": 4, "max_tokens": 2},
            _step([["a", 4], ["b", 4]]),
            _step([["a", 1]], preempted=["b"]),
            _step([["a", 1]], finished=["a"]),
            _step([["b", 5]], finished=["b"]),
        ],
    )


def _stats(cli: Cli, path: Path, *args: str) -> dict[str, Any]:
    r = cli("stats", path, *args, "-f", "json")
    assert r.code == 0, r.stderr
    summary: dict[str, Any] = orjson.loads(r.stdout)
    return summary


def test_stats_shows_the_victim_and_the_tokens_it_computes_again(cli: Cli, tmp_path: Path) -> None:
    trace = _one_preemption(tmp_path)
    policy = ("-p", PREEMPTS, "-P", "kv_tokens=8")
    assert cli("replay", trace, *policy, "--check").code == 0  # the steps are as written
    s = _stats(cli, trace, *policy)
    assert [s[k] for k in KEYS] == [1, 15, 4, 4 / 15]
    assert s["victims"] == [
        {
            "step": 1,
            "rid": "b",
            "computed_tokens": 4,
            "reached": 4,
            "recomputed_tokens": 4,
            "resumed_at": 0,
        }
    ]
    assert s["preempted_requests"] == [
        {"rid": "b", "preemptions": 1, "recomputed_tokens": 4, "recomputed_after": [4]}
    ]
    table = cli("stats", trace, *policy).stdout.decode()
    assert "1 (1 request preempted)" in table
    assert "4 of 15 computed (26.67%)" in table
    assert '│    1 │ "b"     │        4 │       4 │                4 │          0 │' in table


def test_stats_of_the_replay_s_dump_gives_the_same_preemption_figures(
    cli: Cli, tmp_path: Path
) -> None:
    trace = _one_preemption(tmp_path)
    policy = ("-p", PREEMPTS, "-P", "kv_tokens=8")
    dump = tmp_path / "dump.jsonl"
    assert cli("replay", trace, *policy, "-f", "jsonl", "-o", dump).code == 0
    live, read = _stats(cli, trace, *policy), _stats(cli, dump)
    for key in (*KEYS, "victims", "preempted_requests"):
        assert read[key] == live[key], key


def test_a_run_without_preemption_says_so_with_zero_recomputed(cli: Cli, tmp_path: Path) -> None:
    trace = _one_preemption(tmp_path)
    s = _stats(cli, trace, "-p", TOY)  # no KV cache to run out of
    assert [s[k] for k in KEYS] == [0, 11, 0, 0.0]
    assert s["victims"] == [] and s["preempted_requests"] == []
    table = cli("stats", trace, "-p", TOY).stdout.decode()
    assert "0 (no request was preempted)" in table
    assert "0 of 11 computed (0.00%)" in table
    empty = write_lines(tmp_path / "empty.jsonl", [REQUEST_HEADER])
    assert [_stats(cli, empty)[k] for k in KEYS] == [0, 0, 0, 0.0]


def test_a_task_level_run_has_no_preemption_figures(cli: Cli) -> None:
    s = _stats(cli, Path("traces/rotation-fairness.jsonl"))
    assert not set(KEYS[1:]) & set(s) and "victims" not in s


def test_report_lists_each_victim_and_the_recompute_share(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report draws with matplotlib")
    trace = _one_preemption(tmp_path)
    dump = tmp_path / "dump.jsonl"
    policy = ("-p", PREEMPTS, "-P", "kv_tokens=8")
    assert cli("replay", trace, *policy, "-f", "jsonl", "-o", dump).code == 0
    pages = []
    for source, args in ((trace, ["-p", f"{PREEMPTS},kv_tokens=8", "-p", TOY]), (dump, [])):
        page = tmp_path / "report.html"
        r = cli("report", source, *args, "-o", page)
        assert r.code == 0, r.stderr
        pages.append(page.read_text())
    victim = "<tr><td>1</td><td>&quot;b&quot;</td><td>4</td><td>4</td><td>4</td><td>0</td></tr>"
    share = "<tr><td>tokens recomputed after preemption</td><td>4 of 15 computed (26.67%)</td>"
    for html in pages:
        assert victim in html and share in html
    # The toy without a KV cache, beside it: no preemptions, said.
    assert "max_num_seqs=4: no preemptions; 0 of 11 computed tokens recomputed" in pages[0]


def test_report_of_a_workload_measures_a_request_level_policy_only(
    cli: Cli, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib", reason="the report draws with matplotlib")
    workload = write_lines(
        tmp_path / "w.jsonl",
        [
            {"sid": i, "arrival": i * 0.001, "prompt_tokens": 6, "output_tokens": 4}
            for i in range(4)
        ],
    )
    page = tmp_path / "report.html"
    r = cli("report", workload, "-p", f"{PREEMPTS},kv_tokens=12", "-p", "fcfs", "-o", page)
    assert r.code == 0, r.stderr
    html = page.read_text()
    [row] = [x for x in html.split("<tr>") if x.startswith("<td>preemptions</td>")]
    assert row.endswith("<td>n/a</td></tr>")  # fcfs, a task-level policy, never preempts
    assert 'class="victims"' in html


def test_a_request_level_dump_with_a_tid_that_is_not_rid_at_position_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    entry = {"tid": "a@x", "sid": "a", "kind": "prefill", "size": 4}
    record = {"step": 0, "batch": [entry], "tokens": 4, "queued": 0, "running": 1}
    dump = write_lines(
        tmp_path / "bad.jsonl", [record | {"preempted": [], "finished": []}, {"end": {}}]
    )
    r = cli("stats", dump)
    assert r.code == 2
    assert r.stderr.startswith(f"{dump}:1: a request-level batch entry's tid is RID@POSITION")
    bad = write_lines(tmp_path / "bad2.jsonl", [record | {"preempted": 3}, {"end": {}}])
    r = cli("stats", bad)
    assert r.code == 2 and f"{bad}:1: " in r.stderr and "preempted and finished" in r.stderr


def test_a_position_computed_only_by_a_prefix_cache_hit_is_not_recomputed() -> None:
    # "a" starts past a cache hit of 64 tokens, is preempted having computed [64, 100),
    # and restarts at 0 (its blocks evicted): only [64, 100) is computed again.
    from schedcli.engine.requests.preemption import PreemptionTally

    tally = PreemptionTally()
    tally.planned(0, StepPlan([Slice("a", 36, 64, True)]))
    tally.planned(1, StepPlan([], preempted=["a"]))
    tally.planned(2, StepPlan([Slice("a", 101, 0, True)]))
    s = tally.summary()
    assert s["victims"] == [
        {
            "step": 1,
            "rid": "a",
            "computed_tokens": 36,
            "reached": 100,
            "recomputed_tokens": 36,
            "resumed_at": 0,
        }
    ]
    # "b" resumes past its cached blocks (vLLM's prefix caching keeps them): at 96 of 99.
    tally.planned(3, StepPlan([Slice("b", 99, 0, True)], preempted=[]))
    tally.planned(4, StepPlan([], preempted=["b"]))
    tally.planned(5, StepPlan([Slice("b", 4, 96, True)], finished=["b"]))
    assert tally.summary()["victims"][1]["recomputed_tokens"] == 3
    # Ended, its state goes: the same id arriving again is a new request.
    tally.planned(6, StepPlan([Slice("b", 5, 0, True)]))
    assert tally.recomputed == 36 + 3
    assert tally.summary()["recompute_share"] == 39 / (36 + 101 + 99 + 4 + 5)


def _recount(dump: bytes) -> tuple[int, int, Counter[tuple[str, Any]]]:
    """The brute force: every position each request computed, as a set; a scheduled token
    at a position already in it is recomputed. A request's set goes when it ends."""
    seen: dict[tuple[str, Any], set[int]] = {}
    total = computed = 0
    per: Counter[tuple[str, Any]] = Counter()
    for line in dump.splitlines():
        record = orjson.loads(line)
        if "batch" in record:
            for e in record["batch"]:
                key = (type(e["sid"]).__name__, e["sid"])
                position = int(e["tid"].rsplit("@", 1)[1])
                have = seen.setdefault(key, set())
                span = set(range(position, position + e["size"]))
                total += len(span & have)
                per[key] += len(span & have)
                computed += e["size"]
                have |= span
            ended = record["finished"]
        elif record.get("op") == "abort" and record["was"] is not None:
            ended = [record["rid"]]
        else:
            continue
        for rid in ended:
            seen.pop((type(rid).__name__, rid), None)
    return total, computed, per


RIDS = st.sampled_from([0, 1, 2, 3, 4, 5, "1", "a@b"])  # ids reused: a new request each time
EVENT = st.one_of(
    *[st.tuples(st.just("arrive"), RIDS, st.integers(1, 9), st.integers(1, 4))] * 3,
    st.tuples(st.just("step")),
    st.tuples(st.just("abort"), RIDS),
)


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(EVENT, max_size=40),
    kv=st.integers(13, 16),  # every request fits alone (9 + 4): each one finishes
    budget=st.integers(4, 16),
    seqs=st.integers(2, 4),
)
@example(events=[("arrive", 0, 9, 4), ("arrive", 1, 4, 4)], kv=13, budget=16, seqs=4)
def test_recomputed_tokens_equal_a_recount_of_positions_computed_twice_in_the_dump(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[tuple[Any, ...]],
    kv: int,
    budget: int,
    seqs: int,
) -> None:
    from schedcli.app.inprocess import run_cli_in_process

    lines: list[dict[str, object]] = [REQUEST_HEADER]
    for e in events:
        if e[0] == "arrive":
            lines.append({"op": "arrive", "rid": e[1], "prompt_tokens": e[2], "max_tokens": e[3]})
        else:
            lines.append({"op": e[0], **({"rid": e[1]} if e[0] == "abort" else {})})
    trace = write_lines(tmp_path_factory.mktemp("p") / "t.jsonl", lines)
    policy = [
        "-p", PREEMPTS, "-P", f"kv_tokens={kv}", "-P", f"max_num_batched_tokens={budget}",
        "-P", f"max_num_seqs={seqs}", "--drain",
    ]  # fmt: skip
    stats = run_cli_in_process(["stats", str(trace), *policy, "-f", "json"])
    assert stats.code == 0, stats.stderr
    s = orjson.loads(stats.stdout)
    dump = run_cli_in_process(["replay", str(trace), *policy, "-f", "jsonl"])
    assert dump.code == 0, dump.stderr
    total, computed, per = _recount(dump.stdout)
    assert (s["recomputed_tokens"], s["computed_tokens"]) == (total, computed)
    rows = Counter()
    for row in s["preempted_requests"]:
        rows[(type(row["rid"]).__name__, row["rid"])] += row["recomputed_tokens"]
        assert sum(row["recomputed_after"]) == row["recomputed_tokens"]
    assert +rows == +per
    assert (
        s["preemptions"]
        == len(s["victims"])
        == sum(len(orjson.loads(line).get("preempted", ())) for line in dump.stdout.splitlines())
    )
    assert sum(v["recomputed_tokens"] for v in s["victims"]) == total


@pytest.mark.needs("vllm")
def test_vllm_preempting_in_a_small_kv_cache_shows_what_it_recomputes(
    cli: Cli, tmp_path: Path
) -> None:
    # docs/policies.md's example: 24 requests of up to 420 tokens in 40 blocks of 16 tokens.
    workload = ROOT / "docs" / "examples" / "preemption.workload.jsonl"
    trace = tmp_path / "vllm.jsonl"
    params = {
        "num_gpu_blocks": 40,
        "block_size": 16,
        "max_model_len": 624,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
    }
    flags = [f"-P{k}={v}" for k, v in params.items()]
    assert cli("simulate", workload, "-p", "vllm", *flags, "-o", trace).code == 0
    s = _stats(cli, trace)
    dump = cli("replay", trace, "-f", "jsonl")
    assert dump.code == 0, dump.stderr
    total, computed, _ = _recount(dump.stdout)
    assert s["preemptions"] > 0 and s["recomputed_tokens"] > 0
    assert (s["recomputed_tokens"], s["computed_tokens"]) == (total, computed)
    assert s["recompute_share"] == total / computed
    assert computed == orjson.loads(dump.lines[-1])["end"]["tokens"]
    # Prefix caching keeps a victim's full blocks: some resume past position 0.
    assert any(v["resumed_at"] for v in s["victims"])


def test_a_dump_that_only_ends_is_request_level_by_its_end_records_mode() -> None:
    from schedcli.engine.requests.preemption import PreemptionTally
    from schedcli.formats.dump import ends_request_level

    request_end = {"end": {"steps": 0, "mode": "request"}}
    task_end = {"end": {"steps": 0, "mode": "explicit"}}
    assert ends_request_level(request_end) and not ends_request_level(task_end)
    assert not ends_request_level({"end": "request"}) and not ends_request_level({"step": 0})
    for record, level in ((request_end, True), (task_end, False)):
        tally = PreemptionTally()
        tally.record(record)
        assert tally.request_level is level
