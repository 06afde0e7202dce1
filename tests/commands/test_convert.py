"""`schedcli convert` on the real public traces, checked against independent computations."""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import math
import statistics
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import REAL, needs_real, refused, run_cli

AZURE_CONV = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE_CONV = REAL / "mooncake" / "conversation_trace.jsonl"
MOONCAKE_SYN = REAL / "mooncake" / "synthetic_trace.jsonl"
VIDUR_CONV = REAL / "vidur" / "splitwise_conv.csv"
VIDUR_CODE = REAL / "vidur" / "splitwise_code.csv"
ARXIV = REAL / "vidur" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
SHAREGPT = REAL / "sarathi-serve" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def convert(tmp_path: Path, *args: str) -> tuple[list[dict[str, object]], str]:
    out = tmp_path / "w.jsonl"
    r = run_cli("convert", *args, "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    return [json.loads(line) for line in out.read_text().splitlines()], r.stderr.decode()


def csv_columns(path: Path, *names: str) -> list[list[str]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [[row[n] for n in names] for row in rows]


def check_workload_shape(rows: list[dict[str, object]]) -> None:
    arrivals = [r["arrival"] for r in rows]
    assert arrivals == sorted(arrivals)  # type: ignore[type-var]
    assert [r["sid"] for r in rows] == list(range(len(rows)))
    assert all(r["prompt_tokens"] >= 1 and r["output_tokens"] >= 1 for r in rows)  # type: ignore[operator]


@needs_real
@pytest.mark.parametrize("path", [AZURE_CONV, AZURE_CODE], ids=["conv", "code"])
def test_azure_rows_tokens_and_rebased_arrivals(tmp_path: Path, path: Path) -> None:
    rows, _ = convert(tmp_path, "azure", str(path))
    expected = csv_columns(path, "TIMESTAMP", "ContextTokens", "GeneratedTokens")
    assert len(rows) == len(expected) == (19366 if path == AZURE_CONV else 8819)
    assert sum(r["prompt_tokens"] for r in rows) == sum(int(e[1]) for e in expected)  # type: ignore[misc]
    assert sum(r["output_tokens"] for r in rows) == sum(int(e[2]) for e in expected)  # type: ignore[misc]
    t0 = datetime.fromisoformat(expected[0][0][:26])
    for row, e in zip(rows[:: len(rows) // 50], expected[:: len(rows) // 50], strict=True):
        seconds = (datetime.fromisoformat(e[0][:26]) - t0).total_seconds()
        assert abs(row["arrival"] - seconds) < 1e-6  # type: ignore[operator]
    check_workload_shape(rows)


@needs_real
def test_azure_span_matches_the_documented_span(tmp_path: Path) -> None:
    rows, _ = convert(tmp_path, "azure", str(AZURE_CONV))
    assert rows[-1]["arrival"] == pytest.approx(3501.7, abs=0.05)


@needs_real
@pytest.mark.parametrize("path", [MOONCAKE_CONV, MOONCAKE_SYN], ids=["conversation", "synthetic"])
def test_mooncake_ms_timestamps_and_hash_ids(tmp_path: Path, path: Path) -> None:
    rows, _ = convert(tmp_path, "mooncake", str(path))
    source = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == len(source) == (12031 if path == MOONCAKE_CONV else 3993)
    assert sum(r["prompt_tokens"] for r in rows) == sum(s["input_length"] for s in source)  # type: ignore[misc]
    assert sum(r["output_tokens"] for r in rows) == sum(s["output_length"] for s in source)  # type: ignore[misc]
    for row, s in zip(rows, source, strict=True):
        assert row["arrival"] == pytest.approx((s["timestamp"] - source[0]["timestamp"]) / 1000)
        assert row["meta"] == {"hash_ids": s["hash_ids"]}
        assert len(s["hash_ids"]) == math.ceil(s["input_length"] / 512)
    check_workload_shape(rows)


@needs_real
def test_vidur_copy_agrees_with_the_azure_original(tmp_path: Path) -> None:
    vidur, _ = convert(tmp_path, "vidur", str(VIDUR_CONV))
    azure, _ = convert(tmp_path, "azure", str(AZURE_CONV))
    assert len(vidur) == len(azure) == 19366
    for v, a in zip(vidur, azure, strict=True):
        assert (v["prompt_tokens"], v["output_tokens"]) == (a["prompt_tokens"], a["output_tokens"])
        assert abs(v["arrival"] - a["arrival"]) < 1e-5  # type: ignore[operator]
    code, _ = convert(tmp_path, "vidur", str(VIDUR_CODE))
    assert len(code) == 8819


@needs_real
@pytest.mark.parametrize(
    ("path", "count"), [(ARXIV, 28257), (SHAREGPT, 30731)], ids=["arxiv", "sharegpt"]
)
def test_lengths_get_seeded_poisson_arrivals(tmp_path: Path, path: Path, count: int) -> None:
    rows, _ = convert(tmp_path, "lengths", str(path), "--rate", "4", "--seed", "7")
    expected = csv_columns(path, "num_prefill_tokens", "num_decode_tokens")
    assert len(rows) == len(expected) == count
    assert sum(r["prompt_tokens"] for r in rows) == sum(int(e[0]) for e in expected)  # type: ignore[misc]
    assert sum(r["output_tokens"] for r in rows) == sum(int(e[1]) for e in expected)  # type: ignore[misc]
    gaps = [b["arrival"] - a["arrival"] for a, b in itertools.pairwise(rows)]  # type: ignore[operator]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)
    again, _ = convert(tmp_path, "lengths", str(path), "--rate", "4", "--seed", "7")
    assert again == rows
    other, _ = convert(tmp_path, "lengths", str(path), "--rate", "4", "--seed", "8")
    assert other != rows


@needs_real
def test_lengths_gamma_arrivals_have_the_requested_burstiness(tmp_path: Path) -> None:
    rows, _ = convert(tmp_path, "lengths", str(SHAREGPT), "--rate", "2", "--cv", "3", "--seed", "1")
    gaps = [b["arrival"] - a["arrival"] for a, b in itertools.pairwise(rows)]  # type: ignore[operator]
    assert statistics.fmean(gaps) == pytest.approx(0.5, rel=0.1)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(3.0, rel=0.1)


@needs_real
@pytest.mark.parametrize(
    ("path", "fmt"),
    [(AZURE_CODE, "azure"), (MOONCAKE_SYN, "mooncake"), (VIDUR_CODE, "vidur")],
)
def test_auto_recognises_the_format(tmp_path: Path, path: Path, fmt: str) -> None:
    auto, err = convert(tmp_path, "auto", str(path))
    named, _ = convert(tmp_path, fmt, str(path))
    assert auto == named
    assert f"({fmt})" in err


@needs_real
def test_limit_window_and_time_scale(tmp_path: Path) -> None:
    full, _ = convert(tmp_path, "azure", str(AZURE_CONV))
    limited, _ = convert(tmp_path, "azure", str(AZURE_CONV), "--limit", "10")
    assert limited == full[:10]
    window, _ = convert(tmp_path, "azure", str(AZURE_CONV), "--start", "100", "--duration", "60")
    inside = [r for r in full if 100 <= r["arrival"] < 160]  # type: ignore[operator]
    assert len(window) == len(inside)
    assert [w["prompt_tokens"] for w in window] == [r["prompt_tokens"] for r in inside]
    assert window[0]["arrival"] == pytest.approx(inside[0]["arrival"] - 100)  # type: ignore[operator]
    fast, _ = convert(tmp_path, "azure", str(AZURE_CONV), "--limit", "100", "--time-scale", "0.5")
    assert [f["arrival"] for f in fast] == pytest.approx([r["arrival"] / 2 for r in full[:100]])  # type: ignore[operator]


@needs_real
def test_gzip_source_converts_the_same(tmp_path: Path) -> None:
    gz = tmp_path / "azure.csv.gz"
    gz.write_bytes(gzip.compress(AZURE_CODE.read_bytes()))
    a, _ = convert(tmp_path, "auto", str(gz))
    b, _ = convert(tmp_path, "azure", str(AZURE_CODE))
    assert a == b


BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,276,693,API log\n"
)


def test_burstgpt_drops_failed_requests_with_a_count(tmp_path: Path) -> None:
    src = tmp_path / "burst.csv"
    src.write_text(BURSTGPT)
    rows, err = convert(tmp_path, "auto", str(src))
    assert [(r["arrival"], r["prompt_tokens"], r["output_tokens"]) for r in rows] == [
        (0.0, 472, 18),
        (113.0, 417, 276),
    ]
    assert rows[1]["meta"] == {"model": "GPT-4", "log_type": "API log"}
    assert "dropped 1 failed request" in err
    kept, _ = convert(tmp_path, "burstgpt", str(src), "--keep-failed")
    assert len(kept) == 3
    assert kept[1]["meta"] == {"model": "ChatGPT", "log_type": "Conversation log", "failed": True}


def test_bad_row_is_file_line_and_exit_2_unless_skipped(tmp_path: Path) -> None:
    src = tmp_path / "v.csv"
    src.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n1.0,ten,5\n2.0,7,3\n"
    )
    r = run_cli("convert", "vidur", str(src), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{src}:3: num_prefill_tokens is not a number: 'ten'")
    assert not (tmp_path / "w.jsonl").exists(), "no half-written workload"
    rows, err = convert(tmp_path, "vidur", str(src), "--skip-bad")
    assert len(rows) == 2
    assert "skipped 1 bad row(s)" in err


def test_unrecognised_source_and_missing_rate_are_clear_errors(tmp_path: Path) -> None:
    src = tmp_path / "x.csv"
    src.write_text("a,b,c\n1,2,3\n")
    r = run_cli("convert", "auto", str(src))
    assert r.returncode == 2 and b"cannot tell the format" in r.stderr
    lengths = tmp_path / "l.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n")
    r = run_cli("convert", "lengths", str(lengths))
    assert r.returncode == 2 and b"give --rate" in r.stderr


def test_a_new_format_is_one_converter_record_and_one_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """docs/architecture.md's recipe for an input format, followed: a module's CONVERTER,
    its name in NAMES; conversion and auto-detection then take it."""
    import io
    import types
    from collections.abc import Iterator

    from schedcli.app.commandline.convert import ConvertFormat
    from schedcli.formats import converters
    from schedcli.formats.convert import ConvertOptions, convert
    from schedcli.formats.converters._common import (
        Converter,
        Row,
        csv_header,
        int_field,
        read_csv,
    )

    def read(lines, name, options, report) -> Iterator[Row]:  # type: ignore[no-untyped-def]
        def make(f: dict[str, str]) -> tuple[float, int, int, None]:
            return float(f["t"]), int_field(f["p"], "in", 1), int_field(f["o"], "out", 1), None

        return read_csv(lines, name, {"t": "when", "p": "in", "o": "out"}, make)

    example = Converter(
        "example", detect=lambda first: {"when", "in", "out"} <= csv_header(first), read=read
    )
    module = types.ModuleType("schedcli.formats.converters.example")
    module.CONVERTER = example  # type: ignore[attr-defined]
    imported = converters._modules
    monkeypatch.setattr(converters, "_modules", lambda: {**imported(), "example": module})
    monkeypatch.setattr(converters, "NAMES", (*converters.NAMES, "example"))
    converters.converters.cache_clear()
    request.addfinalizer(converters.converters.cache_clear)
    src = tmp_path / "x.csv"
    src.write_text("when,in,out\n0.5,10,2\n1.5,20,3\n")
    out = io.BytesIO()
    report = convert("auto", str(src), out, ConvertOptions(), lambda _: None)
    assert report.format == "example" and report.written == 2
    assert out.getvalue().splitlines()[1] == (
        b'{"sid":1,"arrival":1.0,"prompt_tokens":20,"output_tokens":3}'
    )
    assert [f.value for f in ConvertFormat][1:6] == [
        "azure",
        "mooncake",
        "vidur",
        "lengths",
        "burstgpt",
    ]


def test_every_converter_module_is_named_and_declares_its_name() -> None:
    from schedcli.formats import converters

    here = Path(converters.__file__).parent
    modules = {p.stem for p in here.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(converters.NAMES)
    assert [c.name for c in converters.converters().values()] == list(converters.NAMES)


LENGTHS = REAL / "sarathi-serve" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


AZURE = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


@pytest.mark.parametrize(
    "options",
    [
        ["--rate", "1", "--cv", "nan"],
        ["--rate", "1", "--cv", "1e200"],
        ["--rate", "1", "--cv", "1e-200"],
    ],
)
def test_the_arrival_cv_is_bounded(tmp_path: Path, options: list[str]) -> None:
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
def test_convert_options_are_finite_and_bounded(
    tmp_path: Path, options: list[str], said: str
) -> None:
    out = tmp_path / "w.jsonl"
    refused(run_cli("convert", "azure", str(AZURE), *options, "-o", str(out)), said)
    assert not out.exists()


@pytest.mark.parametrize("rate", ["nan", "1e-320", "inf"])
def test_the_arrival_rate_is_finite_and_bounded(tmp_path: Path, rate: str) -> None:
    r = run_cli("convert", "lengths", str(LENGTHS), "--rate", rate, "-o", str(tmp_path / "w"))
    refused(r, "--rate must be a number from 1e-06 to 1000000000")


@needs_real
def test_convert_with_a_window_does_not_undercount_what_it_left_out(tmp_path: Path) -> None:
    from tests.helpers import REAL

    azure = REAL / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    r = run_cli(
        "convert", "azure", str(azure), "--start", "10", "--duration", "5",
        "-o", str(tmp_path / "w.jsonl"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    said = r.stderr.decode()
    assert "outside the window" not in said  # the rows after the window were never read
    assert "before the window (--start)" in said
    assert "stopped at the window's end (line" in said and "rest not read" in said
