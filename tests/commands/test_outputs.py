"""Outputs mirror inputs: - is stdout, .gz compresses, and every command reads back the rest."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TRACES, run_cli

TRACE = TRACES / "long-prompts-and-chat.jsonl"
WORKLOAD = (
    "".join(
        json.dumps({"sid": i, "arrival": i * 0.01, "prompt_tokens": 40 + i, "output_tokens": 3})
        + "\n"
        for i in range(12)
    )
).encode()


def test_a_gz_name_is_gzip_and_every_reader_takes_it(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl.gz"
    w.write_bytes(gzip.compress(WORKLOAD))
    trace, dump = tmp_path / "t.jsonl.gz", tmp_path / "d.jsonl.gz"
    assert run_cli("simulate", str(w), "-o", str(trace), "-f", "json").returncode == 0
    assert gzip.decompress(trace.read_bytes()).startswith(b'{"schedcli":1')
    assert run_cli("validate", str(trace)).returncode == 0
    assert run_cli("replay", str(trace), "--check", "-o", str(dump)).returncode == 0
    assert gzip.decompress(dump.read_bytes()).endswith(b"}}\n")
    assert run_cli("stats", str(dump), "-f", "json").returncode == 0
    assert run_cli("diff", str(dump), str(dump), "-f", "json").returncode == 0
    assert run_cli("replay", str(trace), "--golden", str(dump)).returncode == 0


def test_convert_writes_gzip_that_simulate_reads(tmp_path: Path) -> None:
    src = tmp_path / "lengths.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n" + "12,3\n" * 5)
    w = tmp_path / "w.jsonl.gz"
    r = run_cli("convert", "lengths", str(src), "--rate", "4", "-o", str(w))
    assert r.returncode == 0, r.stderr.decode()
    assert run_cli("simulate", str(w), "-f", "json").returncode == 0


@pytest.mark.parametrize(
    "option", [["-o", "-"], ["--metrics", "-"], ["--perfetto", "-"]], ids=lambda o: o[0]
)
def test_dash_is_stdout_for_every_simulate_output(tmp_path: Path, option: list[str]) -> None:
    w = tmp_path / "w.jsonl"
    w.write_bytes(WORKLOAD)
    r = run_cli("simulate", str(w), *option, "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    assert not (tmp_path / "-").exists() and not Path("-").exists()
    assert r.stdout.startswith(b"{")  # the requested output, not the summary
    assert b"requests" in r.stderr  # the summary moved to stderr


def test_two_outputs_cannot_both_claim_stdout(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_bytes(WORKLOAD)
    r = run_cli("simulate", str(w), "-o", "-", "--metrics", "-")
    assert r.returncode == 2
    assert b"-o and --metrics both ask for stdout" in r.stderr


def test_report_and_perfetto_write_to_stdout_with_dash() -> None:
    r = run_cli("report", str(TRACE), "-o", "-")
    assert r.returncode == 0 and r.stdout.startswith(b"<!DOCTYPE html>")
    r = run_cli(
        "replay",
        str(TRACE),
        "--perfetto",
        "-",
        "--golden",
        str(TRACES / "golden" / f"{TRACE.stem}.dump.jsonl"),
    )
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["traceEvents"]


def test_writing_to_a_device_never_replaces_it(tmp_path: Path) -> None:
    assert run_cli("report", str(TRACE), "-o", "/dev/null").returncode == 0
    assert Path("/dev/null").is_char_device()


def test_an_option_that_does_not_apply_to_a_dump_is_a_usage_error(tmp_path: Path) -> None:
    dump = tmp_path / "d.jsonl"
    assert run_cli("replay", str(TRACE), "-f", "jsonl", "-o", str(dump)).returncode == 0
    r = run_cli("stats", str(dump), "-p", "fcfs")
    assert r.returncode == 2 and b"--policy, --param and --drain apply to traces" in r.stderr


@pytest.mark.parametrize(
    "failing",
    [
        ["-p", "nosuchpolicy"],
        ["-p", "vllm@/nonexistent/python"],
        ["-p", "fcfs", "-P", "max_num_seqz=4"],
        ["-p", "vllm"],  # a request-level policy for a task-level trace
    ],
    ids=["unknown-policy", "no-interpreter", "misspelt-param", "other-level"],
)
def test_a_run_that_fails_before_writing_leaves_an_existing_output_as_it_was(
    tmp_path: Path, failing: list[str]
) -> None:
    """Found by a new user: -o emptied yesterday's dump when the command refused its
    options. An output is opened at its first byte (or at a successful end)."""
    dump = tmp_path / "keep.dump.jsonl"
    dump.write_bytes(b'{"kept": true}\n')
    r = run_cli("replay", str(TRACE), *failing, "-f", "jsonl", "-o", str(dump))
    assert r.returncode == 2, r.stderr
    assert dump.read_bytes() == b'{"kept": true}\n'


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    r = run_cli("replay", str(TRACE), "-f", "jsonl", "-o", str(tmp_path / "no" / "d.jsonl"))
    assert r.returncode == 2
    assert b"d.jsonl: cannot write: No such file or directory" in r.stderr


def test_a_run_that_writes_nothing_still_leaves_its_empty_output(tmp_path: Path) -> None:
    out = tmp_path / "empty.txt"
    out.write_bytes(b"stale\n")
    (tmp_path / "t.jsonl").write_bytes(b'{"schedcli": 1}\n')
    r = run_cli("replay", str(tmp_path / "t.jsonl"), "-f", "jsonl", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert b"stale" not in out.read_bytes()


def _workload(path: Path) -> Path:
    path.write_text('{"sid": 1, "arrival": 0, "prompt_tokens": 8, "output_tokens": 3}\n')
    return path


@pytest.mark.parametrize(
    ("command", "make"),
    [
        (["replay", "{x}", "-o", "{x}"], "trace"),
        (["replay", "{x}", "-o", "{x}", "-f", "jsonl"], "gz"),
        (["replay", "{x}", "--perfetto", "{x}"], "trace"),
        (["replay", "{x}", "--golden", "{x}", "--update-golden"], "trace"),
        (["simulate", "{x}", "-o", "{x}"], "workload"),
        (["simulate", "{x}", "--metrics", "{x}"], "workload"),
        (["convert", "auto", "{x}", "-o", "{x}"], "workload"),
        (["shrink", "{x}", "--until", "contract", "-o", "{x}"], "trace"),
        (["sweep", "{x}", "-p", "fcfs", "-o", "{x}"], "workload"),
        (["report", "{x}", "-o", "{x}"], "trace"),
        (["fit", "{x}", "-o", "{x}"], "trace"),
        (["check", "{x}", "--junit-xml", "{x}"], "trace"),
    ],
)
def test_an_output_that_is_an_input_is_refused_before_anything_is_written(
    tmp_path: Path, command: list[str], make: str
) -> None:
    if make == "workload":
        x = _workload(tmp_path / "x.jsonl")
    elif make == "gz":
        x = tmp_path / "x.jsonl.gz"
        x.write_bytes(gzip.compress((TRACES / "rotation-fairness.jsonl").read_bytes()))
    else:
        x = tmp_path / "x.jsonl"
        shutil.copy(TRACES / "rotation-fairness.jsonl", x)
    before = x.read_bytes()
    r = run_cli(*[w.format(x=x) for w in command])
    assert r.returncode == 2, r.stderr
    assert b"is the same file as" in r.stderr or b"are the same file" in r.stderr
    assert x.read_bytes() == before


@pytest.mark.parametrize("spelling", ["symlink", "hard link", "dot-dot"])
def test_an_output_that_is_its_input_however_spelt_is_refused(
    tmp_path: Path, spelling: str
) -> None:
    x = tmp_path / "x.jsonl"
    shutil.copy(TRACES / "rotation-fairness.jsonl", x)
    before = x.read_bytes()
    (tmp_path / "d").mkdir()
    alias = tmp_path / "alias.jsonl"
    if spelling == "symlink":
        alias.symlink_to(x)
    elif spelling == "hard link":
        os.link(x, alias)
    else:
        alias = tmp_path / "d" / ".." / "x.jsonl"
    r = run_cli("replay", str(x), "-o", str(alias))
    assert r.returncode == 2 and b"is the same file as TRACE" in r.stderr
    assert x.read_bytes() == before


def test_stdout_redirected_onto_the_input_is_refused(tmp_path: Path) -> None:
    x = tmp_path / "x.jsonl"
    shutil.copy(TRACES / "rotation-fairness.jsonl", x)
    before = x.read_bytes()
    with x.open("ab") as out:  # >> x.jsonl: the replay would read its own dump
        r = subprocess.run(
            [sys.executable, "-m", "schedcli", "stats", str(x)], stdout=out, stderr=subprocess.PIPE
        )
    assert r.returncode == 2 and b"standard output is the same file as" in r.stderr
    assert x.read_bytes() == before


def test_two_outputs_into_one_file_are_refused(tmp_path: Path) -> None:
    trace = TRACES / "rotation-fairness.jsonl"
    out = tmp_path / "out.jsonl"
    r = run_cli("replay", str(trace), "-o", str(out), "--perfetto", str(out))
    assert r.returncode == 2 and b"are the same file" in r.stderr
    assert not out.exists()


def test_writing_next_to_an_input_is_fine(tmp_path: Path) -> None:
    trace = str(TRACES / "rotation-fairness.jsonl")
    assert run_cli("replay", trace, "-o", str(tmp_path / "out.jsonl")).returncode == 0
    assert run_cli("replay", trace, "-o", "/dev/null").returncode == 0
