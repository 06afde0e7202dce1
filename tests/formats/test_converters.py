"""formats/converters/: public traces' rows refused at their line with what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tests.helpers import located, run_cli, write_lines

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 4, "max_tokens": 3, "t": 1.0}


VLLM_HEADER = {"schedcli": 1, "level": "request", "policy": "vllm", "params": {}}


def test_a_csv_count_beyond_64_bits_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n6,23372036854775805185\n")
    r = run_cli("convert", "auto", str(path), "--rate", "1", "-o", str(tmp_path / "w.jsonl"))
    assert "must be at most 2,097,152 tokens" in located(r, path)


def test_an_azure_timestamp_with_a_401_digit_year_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    year = "9" * 401
    path.write_text(
        f"TIMESTAMP,ContextTokens,GeneratedTokens\n{year}-11-16 18:15:46.6805900,10,2\n"
    )
    r = run_cli("convert", "azure", str(path), "-o", str(tmp_path / "w.jsonl"))
    assert "TIMESTAMP is not a real date and time" in located(r, path)


def test_a_row_earlier_than_the_rows_above_is_unsorted_input_not_outside_the_window(
    tmp_path: Path,
) -> None:
    src = tmp_path / "a.csv"
    src.write_text(
        AZURE_HEADER
        + "2023-11-16 18:15:46.0000000,374,44\n"
        + "2023-11-16 18:15:40.0000000,396,109\n"  # six seconds before the first row
        + "2023-11-16 18:15:50.0000000,10,10\n"
    )
    r = run_cli("convert", "azure", str(src), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{src}:3: arrivals go backwards")
    r = run_cli("convert", "azure", str(src), "--skip-bad", "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 0 and b"skipped 1 bad row" in r.stderr
    assert b"before the window" not in r.stderr
    assert len((tmp_path / "w.jsonl").read_text().splitlines()) == 2


def test_mooncake_refuses_an_earlier_row_at_its_line(tmp_path: Path) -> None:
    src = tmp_path / "m.jsonl"
    rows = [(1000, 5), (200, 6), (3000, 7)]
    src.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": p, "output_length": 2}) + "\n"
            for t, p in rows
        )
    )
    r = run_cli("convert", "mooncake", str(src), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2 and r.stderr.decode().startswith(f"{src}:2: arrivals go backwards")


@pytest.mark.parametrize(
    ("abort", "said"),
    [
        ({"op": "abort", "rid": "a"}, "abort has no t"),
        ({"op": "abort", "rid": "a", "t": 0.5}, "before the request arrived"),
    ],
    ids=["no-t", "before-arrival"],
)
def test_convert_requests_refuses_an_abort_it_cannot_place(
    tmp_path: Path, abort: dict[str, object], said: str
) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl",
        [VLLM_HEADER, ARRIVE, abort],
    )  # fmt: skip
    r = run_cli("convert", "requests", str(trace), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"{trace}:3: ") and said in r.stderr.decode()


def test_an_abort_with_its_time_becomes_cancel_after(tmp_path: Path) -> None:
    trace = write_lines(
        tmp_path / "r.jsonl",
        [VLLM_HEADER, ARRIVE, {"op": "abort", "rid": "a", "t": 1.25}],
    )  # fmt: skip
    out = tmp_path / "w.jsonl"
    assert run_cli("convert", "requests", str(trace), "-o", str(out)).returncode == 0
    assert orjson.loads(out.read_bytes())["cancel_after"] == 0.25


@pytest.mark.parametrize(
    ("tokens", "said"),
    [("1_000", "plain decimal"), ("\uff11\uff12", "plain decimal"), ("+7", "plain decimal"),
     ("1e3", "plain decimal"), ("ten", "not a number")],
)  # fmt: skip
def test_csv_numbers_are_plain_ascii_decimals(tmp_path: Path, tokens: str, said: str) -> None:
    src = tmp_path / "v.csv"
    src.write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,{tokens},5\n")
    r = run_cli("convert", "vidur", str(src), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2 and said in r.stderr.decode()


def test_a_csv_row_with_an_extra_column_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "v.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5,99\n")
    r = run_cli("convert", "vidur", str(src), "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2 and b"expected 3 columns" in r.stderr
