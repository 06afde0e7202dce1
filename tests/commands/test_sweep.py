"""schedcli sweep: points in a fixed order, each equal to a direct simulate, whatever the
backend; cached; failures reported without stopping the rest; capacity searched."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.helpers import TRACES, refused, run_cli

WORKLOAD = "".join(
    json.dumps({"sid": i, "arrival": i * 0.01, "prompt_tokens": 60 + 23 * i, "output_tokens": 8})
    + "\n"
    for i in range(30)
)


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    path.write_text(WORKLOAD)
    return path


def sweep(tmp_path: Path, *args: str, name: str = "res.jsonl") -> list[dict[str, object]]:
    out = tmp_path / name
    r = run_cli("sweep", *args, "-o", str(out), "--cache", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr.decode()
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


GRID = ["--grid", "max_batch_tokens=288,544", "--grid", "max_decode_sequences=8,32"]


@pytest.mark.slow
def test_points_come_in_order_and_a_grid_key_applies_where_declared(
    tmp_path: Path, workload: Path
) -> None:
    records = sweep(tmp_path, str(workload), "-p", "decode-first", "-p", "fcfs", *GRID, "-j", "1")
    got = [
        (r["policy"], r["params"]["max_batch_tokens"], r["params"].get("max_decode_sequences"))
        for r in records
    ]  # type: ignore[index, union-attr]
    assert got == [
        ("decode-first", 288, 8),
        ("decode-first", 288, 32),
        ("decode-first", 544, 8),
        ("decode-first", 544, 32),
        ("fcfs", 288, None),  # fcfs has no max_decode_sequences: its points collapse
        ("fcfs", 544, None),
    ]


def test_each_point_equals_a_direct_simulate(tmp_path: Path, workload: Path) -> None:
    records = sweep(tmp_path, str(workload), "-p", "fcfs", "--grid", "max_num_seqs=4,16", "-j", "1")
    for record in records:
        params = [f"-P{k}={v}" for k, v in record["params"].items()]  # type: ignore[union-attr]
        metrics = tmp_path / "m.json"
        r = run_cli("simulate", str(workload), "-p", "fcfs", *params, "--metrics", str(metrics))
        assert r.returncode == 0, r.stderr.decode()
        assert record["metrics"] == orjson.loads(metrics.read_bytes())
        assert record["cost_model"] == {"a": 0.005, "b": 0.00002, "c": 0.0001}


@pytest.mark.slow
def test_the_pool_gives_the_records_one_worker_gives(tmp_path: Path, workload: Path) -> None:
    args = [str(workload), "-p", "decode-first", "-p", "sjf", *GRID, "--fresh"]
    serial = sweep(tmp_path, *args, "-j", "1", name="serial.jsonl")
    pooled = sweep(tmp_path, *args, "-j", "2", name="pooled.jsonl")
    assert serial == pooled and len(serial) == 8


@pytest.mark.slow
def test_a_rerun_takes_finished_points_from_the_cache(tmp_path: Path, workload: Path) -> None:
    args = ["sweep", str(workload), "-p", "fcfs", "--grid", "max_num_seqs=4,16", "-j", "1"]
    cache = ["--cache", str(tmp_path / "cache"), "-o", str(tmp_path / "r.jsonl")]
    first = run_cli(*args, *cache)
    assert b"2 points: 0 from the cache" in first.stderr
    again = run_cli(*args, *cache)
    assert b"2 points: 2 from the cache" in again.stderr
    fresh = run_cli(*args, *cache, "--fresh")
    assert b"2 points: 0 from the cache" in fresh.stderr
    workload.write_text(WORKLOAD.replace('"output_tokens": 8', '"output_tokens": 9'))
    changed = run_cli(*args, *cache)
    assert b"2 points: 0 from the cache" in changed.stderr  # the content is the key


def test_a_failing_point_is_reported_and_the_others_finish(tmp_path: Path, workload: Path) -> None:
    out = tmp_path / "r.jsonl"
    r = run_cli(
        "sweep",
        str(workload),
        "-p",
        "fcfs",
        "-p",
        "tests.plugin_policies:RaisesInGetWork",
        "-j",
        "1",
        "-o",
        str(out),
        "--cache",
        str(tmp_path / "c"),
    )
    assert r.returncode == 2
    assert b"point failed:" in r.stderr and b"RuntimeError: boom" in r.stderr
    assert [orjson.loads(x)["policy"] for x in out.read_bytes().splitlines()] == ["fcfs"]


def test_a_spec_file_is_the_same_sweep(tmp_path: Path, workload: Path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text(
        f'workloads = ["{workload}"]\npolicies = ["fcfs"]\n[grid]\nmax_num_seqs = [4, 16]\n'
    )
    from_spec = sweep(tmp_path, "--spec", str(spec), "-j", "1", name="a.jsonl")
    from_options = sweep(
        tmp_path, str(workload), "-p", "fcfs", "--grid", "max_num_seqs=4,16", name="b.jsonl"
    )
    assert from_spec == from_options


def test_capacity_is_the_highest_rate_that_meets_the_goodput_target(
    tmp_path: Path, workload: Path
) -> None:
    (record,) = sweep(
        tmp_path,
        str(workload),
        "-p",
        "decode-first",
        "--capacity",
        "--slo-ttft",
        "0.2",
        "--slo-tpot",
        "0.02",
        "-j",
        "1",
    )
    cap = record["capacity"]
    assert cap["rate_multiplier"] == pytest.approx(1 / cap["time_scale"])  # type: ignore[index]
    scale = cap["time_scale"]  # type: ignore[index]
    for factor, meets in ((1.0, True), (0.8, False)):
        w = tmp_path / f"w{factor}.jsonl"
        run_cli(
            "convert",
            "mooncake",
            str(_as_mooncake(tmp_path, workload)),
            "-o",
            str(w),
            "--time-scale",
            str(scale * factor),
        )
        r = run_cli("simulate", str(w), "--slo-ttft", "0.2", "--slo-tpot", "0.02", "-f", "json")
        fraction = orjson.loads(r.stdout)["goodput"]["fraction"]
        assert (fraction >= 0.9) is meets, (factor, fraction)


def _as_mooncake(tmp_path: Path, workload: Path) -> Path:
    """The workload as a Mooncake trace, so convert can compress its arrivals."""
    rows = [json.loads(x) for x in workload.read_text().splitlines()]
    path = tmp_path / "m.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": round(r["arrival"] * 1000),
                    "input_length": r["prompt_tokens"],
                    "output_length": r["output_tokens"],
                }
            )
            + "\n"
            for r in rows
        )
    )
    return path


def test_a_trace_is_swept_by_replaying_it(tmp_path: Path) -> None:
    (record,) = sweep(
        tmp_path, str(TRACES / "long-prompts-and-chat.jsonl"), "-p", "fcfs", "-j", "1"
    )
    stats = orjson.loads(
        run_cli(
            "stats", str(TRACES / "long-prompts-and-chat.jsonl"), "-p", "fcfs", "-f", "json"
        ).stdout
    )
    assert record["metrics"] == stats


def test_usage_errors_name_the_option(tmp_path: Path, workload: Path) -> None:
    r = run_cli("sweep", str(workload), "-p", "fcfs", "--grid", "max_decode_sequences=8")
    assert r.returncode == 2
    assert b"--grid max_decode_sequences: no swept policy ('fcfs') has such a parameter" in (
        r.stderr
    )
    r = run_cli("sweep", str(workload), "-p", "fcfs", "--capacity")
    assert r.returncode == 2 and b"--capacity needs --slo-ttft and --slo-tpot" in r.stderr
    r = run_cli("sweep", str(workload))
    assert r.returncode == 2 and b"at least one workload and one policy" in r.stderr


@pytest.mark.slow
@pytest.mark.needs("ray")
def test_ray_gives_the_records_the_local_pool_gives(tmp_path: Path, workload: Path) -> None:
    args = [
        str(workload),
        "-p",
        "decode-first",
        "-p",
        "fcfs",
        "--grid",
        "max_batch_tokens=288,544",
        "--fresh",
    ]
    local = sweep(tmp_path, *args, "-j", "2", name="local.jsonl")
    on_ray = sweep(tmp_path, *args, "--backend", "ray", "-j", "2", name="ray.jsonl")
    assert on_ray == local and len(local) == 4


@pytest.mark.slow
def test_report_draws_a_sweep_as_a_pareto_plot_and_capacity(tmp_path: Path, workload: Path) -> None:
    sweep(
        tmp_path,
        str(workload),
        "-p",
        "decode-first",
        "-p",
        "fcfs",
        "--grid",
        "max_batch_tokens=288,544",
        "--capacity",
        "--slo-ttft",
        "0.2",
        "--slo-tpot",
        "0.02",
        "-j",
        "1",
    )
    page = tmp_path / "r.html"
    r = run_cli("report", str(tmp_path / "res.jsonl"), "-o", str(page))
    assert r.returncode == 0, r.stderr.decode()
    text = page.read_text()
    assert 'id="pareto"' in text and 'id="capacity"' in text and "<svg" in text
    assert "decode-first max_batch_tokens=288" in text


PLUGIN = """
from schedcli import QueueScheduler, Param


class Slow(QueueScheduler):
    name = "slow"
    PARAMS = (Param("max_batch_tokens", int, 544, "budget", minimum=1),)

    def __init__(self, max_batch_tokens=544):
        super().__init__(max_batch_tokens=max_batch_tokens)
        self._queue = []

    def enqueue(self, task):
        self._queue.append(task)

    def take_batch(self):
        batch, spent, seen = [], 0, set()
        for t in self._queue:  # each session's oldest task, if it fits
            if t.sid in seen:
                continue
            seen.add(t.sid)
            if len(batch) < PER_BATCH and spent + t.size <= self.max_batch_tokens:
                batch.append(t)
                spent += t.size
        self._queue = [t for t in self._queue if t not in batch]
        return batch

    def remove_session(self, sid):
        mine = [t for t in self._queue if t.sid == sid]
        self._queue = [t for t in self._queue if t.sid != sid]
        return mine

    def reset(self):
        self._queue.clear()


PER_BATCH = %d
"""


def test_an_edited_plugin_is_a_cache_miss_with_new_numbers(tmp_path: Path, workload: Path) -> None:
    plugin = tmp_path / "slowpolicy.py"
    args = ["sweep", str(workload), "-p", "slowpolicy:Slow", "-j", "1", "--cache", "cache"]

    def run(per_batch: int, out: str) -> tuple[str, dict[str, object]]:
        plugin.write_text(PLUGIN % per_batch)
        r = run_cli(*args, "-o", out, cwd=tmp_path, env={})
        assert r.returncode == 0, r.stderr.decode()
        (record,) = [orjson.loads(x) for x in (tmp_path / out).read_bytes().splitlines()]
        return r.stderr.decode(), record["metrics"]  # type: ignore[return-value]

    _, one = run(1, "a.jsonl")
    again, same = run(1, "b.jsonl")
    assert "1 points: 1 from the cache" in again and same == one
    edited, other = run(8, "c.jsonl")
    assert "1 points: 0 from the cache" in edited
    assert other["steps"] != one["steps"]  # type: ignore[index]


def test_the_cache_key_covers_source_params_workload_cost_and_runner(workload: Path) -> None:
    from schedcli.engine.cost import CostModel
    from schedcli.engine.sweep import Plan, points

    base = points(Plan([str(workload)], ["fcfs"]))[0]
    changed = [
        points(Plan([str(workload)], ["fcfs"], {"max_num_seqs": ["8"]}))[0],
        points(Plan([str(workload)], ["fcfs"], {"chunk_size": ["64"]}))[0],
        points(Plan([str(workload)], ["fcfs"], {"time_scale": ["0.5"]}))[0],
        points(Plan([str(workload)], ["fcfs"], cost=CostModel(a=0.001)))[0],
        points(Plan([str(workload)], ["sjf"]))[0],
    ]
    keys = {p.key("v") for p in [base, *changed]}
    assert len(keys) == 6 and base.key("v") != base.key("w")
    assert base.source is not None
    import dataclasses

    assert dataclasses.replace(base, source="edited").key("v") != base.key("v")
    assert dataclasses.replace(base, workload_sha256="0").key("v") != base.key("v")
    assert dataclasses.replace(base, source=None).key("v") is None  # unknown: not cached


def test_a_grid_key_no_swept_policy_declares_is_a_usage_error_with_a_suggestion(
    tmp_path: Path, workload: Path
) -> None:
    r = run_cli(
        "sweep", str(workload), "-p", "decode-first", "-p", "fcfs",
        "--grid", "max_batch_token=288,544", "-o", str(tmp_path / "r.jsonl"),
    )  # fmt: skip
    assert r.returncode == 2
    assert b"--grid max_batch_token: no swept policy ('decode-first', 'fcfs')" in r.stderr
    assert b"did you mean 'max_batch_tokens'?" in r.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_a_grid_key_some_policies_lack_is_named_for_them(tmp_path: Path, workload: Path) -> None:
    r = run_cli(
        "sweep", str(workload), "-p", "decode-first", "-p", "fcfs", "-j", "1",
        "--grid", "max_decode_sequences=8,16", "-o", str(tmp_path / "r.jsonl"),
        "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert r.returncode == 0
    assert (
        b"note: --grid max_decode_sequences applies to decode-first; fcfs has no such "
        b"parameter and runs without it" in r.stderr
    )


def test_a_point_that_rejects_requests_is_marked_with_its_reasons(
    tmp_path: Path, workload: Path
) -> None:
    out = tmp_path / "r.jsonl"
    r = run_cli(
        "sweep", str(workload), "-p", "fcfs", "-j", "1", "--grid", "chunk_size=256,512",
        "-o", str(out), "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode()
    records = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    bad = records[1]["metrics"]
    assert bad["rejected"] > 0 and sum(bad["rejected_by_reason"].values()) == bad["rejected"]
    assert f"{bad['rejected']} request(s) rejected" in err
    assert "exceeds max_prefill_chunk_size 256" in err
    table = r.stdout.decode()
    assert f"(of {bad['finished']})" in table  # the latencies say of how many
    assert f"{bad['finished']} of {bad['requests']}" in table
    html = tmp_path / "rep.html"
    assert run_cli("report", str(out), "-o", str(html)).returncode == 0
    page = html.read_text()
    assert '<tr class="rejected">' in page and "chunk_size=512" in page
    assert f"(of {bad['finished']} finished)" in page


def sweep_spec(tmp_path: Path, workload: Path, body: str | bytes) -> Path:
    spec = tmp_path / "s.toml"
    head = f'workloads = ["{workload}"]\npolicies = ["fcfs"]\n'
    spec.write_bytes(body if isinstance(body, bytes) else (head + body).encode())
    return spec


SHORTEST_PLUGIN = """
import helper
from schedcli import Param, QueueScheduler


class Shortest(QueueScheduler):
    name = "shortest"
    PARAMS = (Param("max_batch_tokens", int, 544, "tokens one batch may hold", minimum=1),)

    def __init__(self, max_batch_tokens=544):
        super().__init__(max_batch_tokens=max_batch_tokens)
        self._queue = []

    def enqueue(self, task):
        self._queue.append(task)

    def take_batch(self):
        oldest = {}
        for t in self._queue:
            oldest.setdefault(t.sid, t)
        batch, spent = [], 0
        limit = int(self.max_batch_tokens * helper.SHARE)
        for t in sorted(oldest.values(), key=lambda t: t.size):
            if spent + t.size <= limit:
                batch.append(t)
                spent += t.size
        self._queue = [t for t in self._queue if t not in batch]
        return batch

    def remove_session(self, sid):
        mine = [t for t in self._queue if t.sid == sid]
        self._queue = [t for t in self._queue if t.sid != sid]
        return mine

    def reset(self):
        self._queue.clear()
"""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("grid = 5\n", "key grid must be a table, not an integer"),
        ('[cost]\na = "x"\n', "key cost.a must be a number, not a string"),
        ("[capacity]\nslo_ttft = 1\n", "key capacity.slo_tpot is missing"),
        (
            "[capacity]\nslo_ttft = 1\nslo_tpot = 1\niterations = 1000000\n",
            "unknown key 'iterations' in [capacity]",
        ),
        ('jobs = "x"\n', "key jobs must be an integer, not a string"),
        ("jobs = 0\n", "jobs must be an integer from 1 to 1024, not 0"),
        ("[cost]\na = nan\n", "cost.a must be a number from 0 to"),
        ("[capacity]\nslo_ttft = inf\nslo_tpot = 1\n", "capacity.slo_ttft must be a number > 0"),
        ('backend = "k8s"\n', "key backend must be one of local, ray, not 'k8s'"),
    ],
)
def test_a_sweep_spec_is_checked_against_its_schema(
    tmp_path: Path, workload: Path, body: str, said: str
) -> None:
    spec = sweep_spec(tmp_path, workload, body)
    refused(run_cli("sweep", "--spec", str(spec), "-j", "1"), f"{spec}: ", said)


def test_a_sweep_spec_whose_workloads_are_a_string_or_not_utf8_is_refused(
    tmp_path: Path, workload: Path
) -> None:
    spec = sweep_spec(
        tmp_path, workload, f'workloads = "{workload}"\npolicies = ["fcfs"]\n'.encode()
    )
    refused(run_cli("sweep", "--spec", str(spec)), "key workloads must be an array, not a string")
    spec.write_bytes(b'workloads = ["\xff"]\npolicies = ["fcfs"]\n')
    refused(run_cli("sweep", "--spec", str(spec)), f"{spec}: not UTF-8")


@pytest.mark.parametrize(
    ("grid", "said"),
    [
        ("time_scale=x", "--grid time_scale must be a number from 1e-06 to 1000000, not 'x'"),
        ("chunk_size=1.5", "--grid chunk_size must be an integer from 1 to 2097152, not '1.5'"),
        ("cost_a=x", "--grid cost_a must be a number"),
        ("time_scale=inf", "--grid time_scale must be a number"),  # refused, never run forever
        ("time_scale=nan", "--grid time_scale must be a number"),
    ],
)
def test_grid_values_of_run_settings_are_bounded(
    tmp_path: Path, workload: Path, grid: str, said: str
) -> None:
    start = time.monotonic()
    r = run_cli("sweep", str(workload), "-p", "fcfs", "--grid", grid, "-j", "1",
                "--cache", str(tmp_path / "c"))  # fmt: skip
    refused(r, said)
    assert time.monotonic() - start < 5


def test_editing_a_helper_the_plugin_imports_invalidates_the_sweep_cache(tmp_path: Path) -> None:
    (tmp_path / "shortest.py").write_text(SHORTEST_PLUGIN)
    (tmp_path / "helper.py").write_text("SHARE = 1.0\n")
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            json.dumps({"sid": i, "arrival": i / 100, "prompt_tokens": 100 * (i + 1),
                        "output_tokens": 5}) + "\n"
            for i in range(4)
        )
    )  # fmt: skip
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, paths))}

    def sweep(out: str) -> subprocess.CompletedProcess[bytes]:
        r = run_cli(
            "sweep", str(workload), "-p", "shortest:Shortest", "-j", "1", "-o", str(tmp_path / out),
            "--cache", str(tmp_path / "cache"), env=env, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r

    sweep("a.jsonl")
    assert b"1 from the cache" in sweep("b.jsonl").stderr
    (tmp_path / "helper.py").write_text("SHARE = 0.5\n")
    again = sweep("c.jsonl")
    assert b"0 from the cache" in again.stderr and b"helper.py changed" in again.stderr
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()


def test_a_knob_whose_every_value_gave_one_schedule_is_said_to_have_changed_nothing(
    tmp_path: Path, workload: Path
) -> None:
    # 30 requests never make 32 decodes: max_decode_sequences 32 or 64 is one schedule.
    out = tmp_path / "res.jsonl"
    args = ["-p", "decode-first", "-p", "fcfs", "--grid", "max_batch_tokens=400,544"]
    r = run_cli("sweep", str(workload), *args, "--grid", "max_decode_sequences=32,64",
                "-j", "1", "-o", str(out), "--cache", str(tmp_path / "cache"),
                env={"COLUMNS": "250"})  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    said = {(x["policy"], tuple(x["changed_nothing"])) for x in records}
    assert said == {("decode-first", ("max_decode_sequences",)), ("fcfs", ())}
    digests = {x["params"]["max_batch_tokens"]: set() for x in records}
    for x in records:
        digests[x["params"]["max_batch_tokens"]].add(x["schedule_sha256"])
    assert len(digests[400] & digests[544]) == 0  # the budget changed the schedule
    err = r.stderr.decode()
    assert "--grid max_decode_sequences changed nothing for decode-first on w.jsonl" in err
    table = r.stdout.decode()
    assert table.count("(changed nothing)") == 4, table  # decode-first's four rows
    assert "max_batch_tokens changed nothing" not in err


def test_a_knob_given_one_value_or_a_trace_point_without_digest_is_never_said_idle(
    tmp_path: Path, workload: Path
) -> None:
    from schedcli.engine.schedules import changed_nothing
    from schedcli.engine.sweep import Outcome, Point

    records = sweep(tmp_path, str(workload), "-p", "fcfs", "--grid", "max_num_seqs=8", "-j", "1")
    assert [x["changed_nothing"] for x in records] == [[]]

    def outcome(seqs: int, tokens: int, digest: str | None) -> Outcome:
        params = {"max_num_seqs": seqs, "max_batch_tokens": tokens}
        point = Point("w", "x", "workload", "fcfs", params, {})
        return Outcome(point, {"schedule_sha256": digest} if digest else {})

    full = [outcome(8, 64, "a"), outcome(16, 64, "a"), outcome(8, 128, "b"), outcome(16, 128, "b")]
    keys = ["max_num_seqs", "max_batch_tokens"]
    assert changed_nothing(full, keys) == {("w", "fcfs"): ["max_num_seqs"]}
    # A value not tried with the other fixed, a point without its digest: not said.
    assert changed_nothing(full[:3], keys) == {("w", "fcfs"): []}
    assert changed_nothing([*full[:3], outcome(16, 128, None)], keys) == {}
