"""compat=reference at the command line, and header params shared across policies."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import Cli

HEADER = '{"schedcli": 1, "policy": "decode-first", "params": %s}'


def trace(tmp_path: Path, params: str, *events: str) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([HEADER % params, *events]) + "\n")
    return path


def batches(stdout: bytes) -> list[list[object]]:
    recs = [orjson.loads(x) for x in stdout.splitlines()]
    return [[e["tid"] for e in r["batch"]] for r in recs if "batch" in r]


TWO_PROMPTS = (
    '{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 2}',
    '{"op": "submit", "tid": 2, "sid": 10, "kind": "prefill", "size": 2}',
    '{"op": "get_work", "expect": [1, 2]}',
)
LIMITS = '{"max_batch_tokens": 8, "max_decode_sequences": 1, "max_prefill_chunk_size": 2}'


def test_reference_recording_with_two_outputs_checks_under_compat_reference(
    cli: Cli, tmp_path: Path
) -> None:
    path = trace(tmp_path, LIMITS, *TWO_PROMPTS)
    r = cli("replay", path, "--param", "compat=reference", "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert batches(r.stdout) == [[1, 2]]
    assert "warning: step 0 (line 4): one batch owes session 10 two outputs" in r.stderr


def test_the_same_recording_differs_under_the_fixed_default(cli: Cli, tmp_path: Path) -> None:
    r = cli("replay", trace(tmp_path, LIMITS, *TWO_PROMPTS), "--check")
    assert r.code == 1
    assert "warning" not in r.stderr


def test_compat_reference_tid_release_is_reported_as_a_contract_break(
    cli: Cli, tmp_path: Path
) -> None:
    path = trace(
        tmp_path,
        LIMITS,
        '{"op": "submit", "tid": 1, "sid": 10, "kind": "decode", "size": 1}',
        '{"op": "cancel", "sid": 10}',
        '{"op": "submit", "tid": 1, "sid": 20, "kind": "decode", "size": 1}',
        '{"op": "cancel", "sid": 10}',
        '{"op": "get_work"}',
    )
    assert cli("replay", path, "-f", "jsonl").code == 0
    r = cli("replay", path, "-f", "jsonl", "-P", "compat=reference")
    assert r.code == 3
    assert "at step 0 (line 5): cancel returned task 1, which is not queued" in r.stderr


def test_header_params_apply_to_every_policy_that_declares_them(cli: Cli, tmp_path: Path) -> None:
    path = trace(
        tmp_path,
        '{"max_batch_tokens": 4, "max_decode_sequences": 1, "max_prefill_chunk_size": 2}',
        '{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 2}',
        '{"op": "submit", "tid": 2, "sid": 20, "kind": "prefill", "size": 2}',
        '{"op": "submit", "tid": 3, "sid": 30, "kind": "prefill", "size": 2}',
    )
    r = cli("replay", path, "-p", "fcfs", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert batches(r.stdout) == [[1, 2], [3]]  # fcfs under the header's budget of 4
    assert r.stderr.splitlines() == [
        "note: 'fcfs' does not take the trace header's max_decode_sequences; not applied"
    ]


def test_diff_compares_both_sides_under_the_headers_budget(cli: Cli, tmp_path: Path) -> None:
    path = trace(
        tmp_path,
        '{"max_batch_tokens": 4, "max_decode_sequences": 1, "max_prefill_chunk_size": 2}',
        '{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 2}',
    )
    r = cli("diff", path, "--b", "fcfs", "-f", "json")
    report = orjson.loads(r.stdout)
    assert r.code == 0, r.stderr
    assert report["b"]["params"]["max_batch_tokens"] == 4
    assert "not take the trace header's max_decode_sequences" in r.stderr
