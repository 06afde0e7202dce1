"""Perfetto timelines and the HTML report, from the real commands, checked as a person sees them."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.helpers import REAL, REQUIRE_REAL, ROOT, TRACES, needs_real, refused, run_cli

SCHEMA = json.loads((ROOT / "tests" / "schemas" / "trace_event.schema.json").read_text())
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
AZURE_CONV = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def check_timeline(path: Path) -> dict[str, Any]:
    """The trace-event schema, plus what the format leaves to us: no overlaps, time order."""
    data = json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)
    events = data["traceEvents"]
    last_ts = -1.0
    per_track: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "M":
            continue
        assert e["ts"] >= last_ts, f"timestamps go backwards at {e}"
        last_ts = e["ts"]
        if e["ph"] == "X":
            per_track[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for track, slices in per_track.items():
        for (_, end), (start, _) in itertools.pairwise(slices):
            assert start >= end, f"overlapping slices on track {track}"
    return data


def test_replay_timeline_has_a_track_per_session_and_a_slice_per_task(tmp_path: Path) -> None:
    trace = TRACES / "long-prompts-and-chat.jsonl"
    out = tmp_path / "t.json"
    dump = tmp_path / "d.jsonl"
    r = run_cli("replay", str(trace), "--perfetto", str(out), "-o", str(dump))
    assert r.returncode == 0, r.stderr.decode()
    data = check_timeline(out)
    events = data["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    records = [json.loads(x) for x in dump.read_text().splitlines()]
    sessions = {e["sid"] for rec in records if "batch" in rec for e in rec["batch"]}
    assert tracks == {"scheduler"} | {f'session "{s}"' for s in sessions}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == records[-1]["end"]["dispatched"]
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"queued tasks", "batch tokens", "waiting by reason"}
    waiting = [e["args"] for e in events if e["name"] == "waiting by reason"]
    assert waiting[0] == {"no_room": 3, "behind_own_chunk": 3}  # step 0's reasons
    passed = [e["args"] for e in events if e["ph"] == "X" and "passed_over" in e["args"]]
    assert {
        "tid": "p1.3",
        "size": 188,
        "step": 2,
        "passed_over": {"behind_own_chunk": 1, "no_room": 1},
    } in passed
    budget = {e["args"]["budget"] for e in events if e["name"] == "batch tokens"}
    assert budget == {544}
    again = tmp_path / "t2.json"
    run_cli("replay", str(trace), "--perfetto", str(again), "-o", os.devnull)
    assert again.read_bytes() == out.read_bytes()


def test_simulate_timeline_uses_simulated_time(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text(
        "".join(
            json.dumps(
                {"sid": i, "arrival": i * 0.01, "prompt_tokens": 300 + i, "output_tokens": 4}
            )
            + "\n"
            for i in range(12)
        )
    )
    out = tmp_path / "t.json"
    r = run_cli(
        "simulate",
        str(w),
        "--perfetto",
        str(out),
        "-f",
        "json",
        "--cost-a",
        "0.01",
        "--cost-b",
        "0",
        "--cost-c",
        "0",
    )
    assert r.returncode == 0, r.stderr.decode()
    data = check_timeline(out)
    summary = json.loads(r.stdout)
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    steps = [e for e in events if e["name"] == "batch tokens"]
    assert len(steps) == summary["steps"]
    # Each step lasts 10 ms (the cost model), so each step's slices fill 10 ms exactly.
    by_step: dict[int, float] = defaultdict(float)
    for e in slices:
        by_step[e["args"]["step"]] += e["dur"]
    assert all(
        total
        == pytest.approx(10_000 * len({e["tid"] for e in slices if e["args"]["step"] == step}))
        for step, total in by_step.items()
    )
    assert slices[0]["ts"] == 0
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(
        summary["simulated_seconds"] * 1e6
    )


def _make_report(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "report.html"
    r = run_cli("report", *args, "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    return out


def check_self_contained(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "fetches something"
    assert "<script" not in page
    assert "@import" not in page


def test_report_on_a_trace_compares_policies_and_is_deterministic(tmp_path: Path) -> None:
    trace = str(TRACES / "long-prompts-and-chat.jsonl")
    out = _make_report(tmp_path, trace, "-p", "decode-first", "-p", "fcfs,max_num_seqs=16")
    page = out.read_text()
    check_self_contained(page)
    for chart in ("tokens", "queue", "waits"):
        assert f'id="{chart}"' in page
    assert "fcfs max_num_seqs=16" in page
    again = _make_report(tmp_path / "..", trace, "-p", "decode-first", "-p", "fcfs,max_num_seqs=16")
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.slow
def test_report_on_a_dump_explains_what_it_cannot_show(tmp_path: Path) -> None:
    out = _make_report(tmp_path, str(TRACES / "golden" / "rotation-fairness.dump.jsonl"))
    page = out.read_text()
    check_self_contained(page)
    assert 'id="tokens"' in page and 'id="queue"' in page
    assert "a dump does not hold" in page
    r = run_cli(
        "report",
        str(TRACES / "golden" / "rotation-fairness.dump.jsonl"),
        "-p",
        "fcfs",
        "-o",
        str(tmp_path / "x.html"),
    )
    assert r.returncode == 2


def test_report_bad_policy_config_is_exit_2(tmp_path: Path) -> None:
    r = run_cli(
        "report",
        str(TRACES / "rejections.jsonl"),
        "-p",
        "fcfs,oops",
        "-o",
        str(tmp_path / "x.html"),
    )
    assert r.returncode == 2 and b"NAME,KEY=VALUE" in r.stderr


REQUESTS = 150


def _workload(tmp_path: Path) -> Path:
    w = tmp_path / "w.jsonl"
    if AZURE_CONV.is_file() or REQUIRE_REAL:
        assert (
            run_cli(
                "convert", "auto", str(AZURE_CONV), "--limit", f"{REQUESTS}", "-o", f"{w}"
            ).returncode
            == 0
        )
    else:  # pragma: no cover - CI always has the real traces
        w.write_text(
            "".join(
                json.dumps(
                    {
                        "sid": i,
                        "arrival": i * 0.2,
                        "prompt_tokens": 100 + 37 * i % 900,
                        "output_tokens": 5 + i % 60,
                    }
                )
                + "\n"
                for i in range(REQUESTS)
            )
        )
    return w


@pytest.mark.slow
def test_report_on_a_converted_real_trace_has_latency_distributions(tmp_path: Path) -> None:
    w = _workload(tmp_path)
    out = _make_report(tmp_path, str(w), "-p", "decode-first", "-p", "sjf", "-p", "fair")
    page = out.read_text()
    check_self_contained(page)
    for chart in ("tokens", "queue", "waits", "ttft", "tpot"):
        assert f'id="{chart}"' in page
    assert "TTFT p99" in page


@pytest.mark.slow
@pytest.mark.needs("browser")
def test_report_renders_in_headless_chromium_without_errors(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM is not None  # the marker saw it on PATH
    w = _workload(tmp_path)
    pages = {
        "workload": _make_report(tmp_path, str(w), "-p", "decode-first", "-p", "sjf"),
    }
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    pages["trace"] = _make_report(
        trace_dir, str(TRACES / "long-prompts-and-chat.jsonl"), "-p", "decode-first", "-p", "fcfs"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            for kind, path in pages.items():
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                problems: list[str] = []
                page.on(
                    "console",
                    lambda m, problems=problems: (
                        problems.append(m.text) if m.type in ("error", "warning") else None
                    ),
                )
                page.on("pageerror", lambda e, problems=problems: problems.append(str(e)))
                requests: list[str] = []
                page.on("request", lambda r, requests=requests: requests.append(r.url))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                charts = ["tokens", "queue", "waits"] + (
                    ["ttft", "tpot"] if kind == "workload" else []
                )
                for chart in charts:
                    svg = page.locator(f"figure#{chart} svg")
                    assert svg.count() == 1, chart
                    box = svg.bounding_box()
                    assert box is not None and box["width"] > 300 and box["height"] > 100, chart
                    drawn = page.locator(f"figure#{chart} svg path").count()
                    assert drawn > 10, f"{chart} has only {drawn} paths"
                assert page.locator("table#summary tbody tr").count() >= 5
                page.screenshot(path=str(ARTIFACTS / f"report-{kind}.png"), full_page=True)
                assert problems == [], problems
                assert all(u.startswith("file://") for u in requests), requests
                page.close()
        finally:
            browser.close()
    assert (ARTIFACTS / "report-workload.png").stat().st_size > 10_000


@pytest.mark.slow
@needs_real
def test_timeline_of_a_converted_real_trace(tmp_path: Path) -> None:
    w = _workload(tmp_path)
    out = tmp_path / "azure.json"
    r = run_cli("simulate", str(w), "--perfetto", str(out), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    data = check_timeline(out)
    tracks = [e for e in data["traceEvents"] if e["name"] == "thread_name"]
    assert len(tracks) == REQUESTS + 1  # a track per request and the scheduler's own


@pytest.mark.parametrize("trace", sorted(TRACES.glob("*.jsonl")), ids=lambda p: p.name)
def test_a_reports_charts_of_a_trace_are_those_of_its_replays_dump(
    tmp_path: Path, trace: Path
) -> None:
    # The report bins each batch as the replay runs; read back from the dump, the same
    # batches must fill the same bins (tokens by kind, and the queue after each batch).
    from schedcli.app.report.runs import from_dump as _from_dump
    from schedcli.app.report.runs import from_trace as _from_trace

    dump = tmp_path / "dump.jsonl"
    assert run_cli("replay", str(trace), "-f", "jsonl", "-o", str(dump)).returncode == 0
    [live] = _from_trace(str(trace), [])
    [read] = _from_dump(str(dump), False)
    assert live.bins.bins == read.bins.bins and live.bins.bins


def _sweep_record(**changes: object) -> str:
    record: dict[str, object] = {"workload": "w.jsonl", "policy": "fcfs", "params": {}}
    record["metrics"] = {"throughput_output_tokens_per_s": 1.0, "ttft": {"p99": 0.1}}
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None}) + "\n"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (_sweep_record(workload=None), "field workload is missing"),
        (_sweep_record(params=5), "field params must be an object, not an integer"),
        (_sweep_record(metrics={"ttft": {"p99": "x"}}), "field metrics.ttft.p99 must be a number"),
        (_sweep_record(capacity=3), "field capacity must be an object, not an integer"),
        (_sweep_record(metrics={"rejected": "many"}), "field metrics.rejected must be an integer"),
    ],
)
def test_sweep_results_are_checked_against_their_schema(
    tmp_path: Path, line: str, said: str
) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(_sweep_record() + line)
    refused(run_cli("report", str(results), "-o", str(tmp_path / "r.html")), f"{results}:2: ", said)


def test_a_report_with_nothing_to_plot_says_no_library_warning(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(_sweep_record(metrics={}))
    r = run_cli("report", str(results), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert b"Warning" not in r.stderr
    assert "no point has both a throughput and a TTFT p99" in (tmp_path / "r.html").read_text()


FINDINGS = ROOT / "docs" / "examples" / "findings"


@pytest.mark.parametrize("kind", ["starvation", "hol_blocking", "decode_gap"])
def test_a_report_marks_each_finding_on_the_timeline_with_a_legend_and_lists_it(
    tmp_path: Path, kind: str
) -> None:
    trace = FINDINGS / f"{kind}.jsonl"
    listed = [json.loads(x) for x in (FINDINGS / f"{kind}.findings.jsonl").read_text().splitlines()]
    page = _make_report(tmp_path, str(trace), "--findings").read_text()
    tokens = page[page.index('id="tokens"') : page.index('id="queue"')]
    group = re.search(rf'<g id="findings-{kind}">(.*?)\n   </g>', tokens, re.S)
    assert group is not None, "no marks of the kind on the tokens chart"
    assert group[1].count("<use ") == len(listed)  # one mark a finding
    assert f"{kind} ({len(listed)})" in tokens  # the legend names the kind, counted
    assert tokens.count('<g id="findings-') == 1  # no other kind marked
    rows = re.findall(r"<tr><td>(\d+)</td><td>([a-z_]+)</td>", page.split("<h2>Findings")[1])
    assert rows == [(str(f["step"]), f["kind"]) for f in listed]


def test_a_reports_findings_are_those_findings_gives_at_both_levels(level_trace: Path) -> None:
    from schedcli.app.report.runs import from_trace as _from_trace
    from schedcli.engine.findings import find

    [run] = _from_trace(str(level_trace), [], findings=True)
    assert run.findings == find(str(level_trace))[0]
    [plain] = _from_trace(str(level_trace), [])
    assert plain.findings is None and plain.summary == run.summary


def test_a_report_marks_findings_only_when_asked_and_refuses_them_for_a_dump(
    tmp_path: Path,
) -> None:
    page = _make_report(tmp_path, str(FINDINGS / "hol_blocking.jsonl")).read_text()
    assert '<g id="findings-' not in page and "<h2>Findings" not in page
    assert "Findings are marked with --findings" in page
    dump = str(TRACES / "golden" / "rotation-fairness.dump.jsonl")
    r = run_cli("report", dump, "--findings", "-o", str(tmp_path / "d.html"))
    assert r.returncode == 2 and not (tmp_path / "d.html").exists()
    assert r.stderr.decode().startswith("schedcli: --findings needs a trace: a dump")
