"""The second campaign's roots (SW1-SW4, CV1-CV2, SH1-SH2, FIT1, RS1, SIM1, OPT): each a
quick exit 2 naming the file and line, the TOML key, or the option. SH1, SH2 and FIT1 are
tested with shrink and fit (test_explain_and_shrink.py, test_fit.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from schedcli.app.cli import app
from schedcli.model.limits import OPTIONS
from tests.helpers import REAL, run_cli

WORKLOAD = '{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n'
LENGTHS = REAL / "sarathi-serve" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
AZURE = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def refused(r: object, *needles: str) -> str:
    err = r.stderr.decode()  # type: ignore[attr-defined]
    assert r.returncode == 2, err  # type: ignore[attr-defined]
    assert "internal error" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    path.write_text(WORKLOAD)
    return path


def sweep_spec(tmp_path: Path, workload: Path, body: str | bytes) -> Path:
    spec = tmp_path / "s.toml"
    head = f'workloads = ["{workload}"]\npolicies = ["fcfs"]\n'
    spec.write_bytes(body if isinstance(body, bytes) else (head + body).encode())
    return spec


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
def test_sw1_a_sweep_spec_is_checked_against_its_schema(
    tmp_path: Path, workload: Path, body: str, said: str
) -> None:
    spec = sweep_spec(tmp_path, workload, body)
    refused(run_cli("sweep", "--spec", str(spec), "-j", "1"), f"{spec}: ", said)


def test_sw1_workloads_as_a_string_or_not_utf8(tmp_path: Path, workload: Path) -> None:
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
        ("time_scale=inf", "--grid time_scale must be a number"),  # SW3: it hung
        ("time_scale=nan", "--grid time_scale must be a number"),
    ],
)
def test_sw2_sw3_grid_values_of_run_settings_are_bounded(
    tmp_path: Path, workload: Path, grid: str, said: str
) -> None:
    start = time.monotonic()
    r = run_cli("sweep", str(workload), "-p", "fcfs", "--grid", grid, "-j", "1",
                "--cache", str(tmp_path / "c"))  # fmt: skip
    refused(r, said)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "options",
    [
        ["--rate", "1", "--cv", "nan"],
        ["--rate", "1", "--cv", "1e200"],
        ["--rate", "1", "--cv", "1e-200"],
    ],
)
def test_cv1_the_arrival_cv_is_bounded(tmp_path: Path, options: list[str]) -> None:
    r = run_cli("convert", "lengths", str(LENGTHS), *options, "-o", str(tmp_path / "w.jsonl"))
    refused(r, "--cv must be a number from 0.01 to 100")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--start", "nan"], "--start must be a number from 0 to"),
        (["--duration", "inf"], "--duration must be a number > 0"),
        (["--time-scale", "0"], "--time-scale must be a number from 1e-06"),
    ],
)
def test_cv2_convert_options_are_finite_and_bounded(
    tmp_path: Path, options: list[str], said: str
) -> None:
    out = tmp_path / "w.jsonl"
    refused(run_cli("convert", "azure", str(AZURE), *options, "-o", str(out)), said)
    assert not out.exists()


@pytest.mark.parametrize("rate", ["nan", "1e-320", "inf"])
def test_cv2_the_arrival_rate_is_finite_and_bounded(tmp_path: Path, rate: str) -> None:
    r = run_cli("convert", "lengths", str(LENGTHS), "--rate", rate, "-o", str(tmp_path / "w"))
    refused(r, "--rate must be a number from 1e-06 to 1000000000")


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
def test_rs1_sweep_results_are_checked_against_their_schema(
    tmp_path: Path, line: str, said: str
) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(_sweep_record() + line)
    refused(run_cli("report", str(results), "-o", str(tmp_path / "r.html")), f"{results}:2: ", said)


def test_sim1_a_chunk_size_beyond_any_prompt_is_refused(workload: Path) -> None:
    r = run_cli("simulate", str(workload), "--chunk-size", "18446744073709551616")
    refused(r, "--chunk-size must be an integer from 1 to 2097152")


@pytest.mark.parametrize("option", ["--slo-ttft", "--slo-tpot"])
def test_opt_an_slo_of_nan_is_refused(workload: Path, option: str) -> None:
    refused(run_cli("simulate", str(workload), option, "nan"), f"{option} must be a number > 0")


def test_opt_a_report_with_nothing_to_plot_says_no_library_warning(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(_sweep_record(metrics={}))
    r = run_cli("report", str(results), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert b"Warning" not in r.stderr
    assert "no point has both a throughput and a TTFT p99" in (tmp_path / "r.html").read_text()


def test_every_numeric_option_of_every_command_has_a_bound() -> None:
    import inspect
    import typing

    missing, numeric = [], 0
    for info in app.registered_commands:
        fn = inspect.unwrap(info.callback)  # type: ignore[arg-type]
        for name, hint in typing.get_type_hints(fn).items():
            kinds = set(typing.get_args(hint)) | {hint}
            if kinds & {int, float} and bool not in kinds:
                numeric += 1
                if "--" + name.replace("_", "-") not in OPTIONS:
                    missing.append(f"{fn.__name__} {name}")
    assert numeric > 15 and not missing, missing
