"""The eight crashes coverage-guided fuzzing found (F01-F08), each now a clear exit 2."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from tests.helpers import run_cli

DUMP_LINE = (
    '{"step":0,"batch":[{"tid":1,"sid":1,"kind":"decode","size":SIZE}],"tokens":1,"queued":0}'
)


def located(r: object, path: Path) -> str:
    err = r.stderr.decode()  # type: ignore[attr-defined]
    assert r.returncode == 2, err  # type: ignore[attr-defined]
    assert err.startswith(f"{path}:"), err
    assert "internal error" not in err and "Traceback" not in err
    return err


def test_f01_a_gzip_trace_cut_short_is_a_located_error(tmp_path: Path) -> None:
    data = gzip.compress(b'{"op": "get_work"}\n' * 5000, mtime=0)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "gzip data ends early" in located(run_cli("replay", str(path)), path)


def test_f01_a_byte_order_mark_before_get_work_replays(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"op":"get_work"}\n{"op":"get\\u005fwork"}\n')
    r = run_cli("replay", str(path), "-f", "jsonl")
    assert r.returncode == 0 and r.stdout.count(b'"step"') == 2


def test_f02_a_line_nested_980_deep_is_refused_by_replay_and_validate(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"":' + "[" * 980 + '{"":0}' + "]" * 980 + "}\n")
    for command in ("replay", "validate"):
        assert "nested deeper than 200 levels" in located(run_cli(command, str(path)), path)


def test_f03_a_dump_with_a_negative_size_is_refused_by_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(DUMP_LINE.replace("SIZE", "-1") + "\n")
    for argv in (["diff", str(path), str(path)], ["stats", str(path)], ["report", str(path)]):
        err = located(
            run_cli(*argv, "-o", str(tmp_path / "r.html"))
            if argv[0] == "report"
            else run_cli(*argv),
            path,
        )
        assert "a size >= 0" in err, argv


def test_f04_a_request_of_nine_quintillion_tokens_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"sid":0,"arrival":0,"prompt_tokens":9000000000000000000,"output_tokens":1}\n')
    start = time.monotonic()
    err = located(run_cli("simulate", str(path)), path)
    assert "prompt_tokens must be between 1 and 2,097,152" in err
    assert time.monotonic() - start < 10


def test_f04_a_long_prompt_is_submitted_a_window_at_a_time_and_replays(tmp_path: Path) -> None:
    w, trace = tmp_path / "w.jsonl", tmp_path / "t.jsonl"
    w.write_text('{"sid":0,"arrival":0,"prompt_tokens":20000,"output_tokens":2}\n')
    r = run_cli("simulate", str(w), "--chunk-size", "64", "-o", str(trace), "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    groups = [json.loads(x)["tasks"] for x in trace.read_text().splitlines() if '"tasks"' in x]
    assert [len(g) for g in groups] == [64, 64, 64, 64, 57]  # 313 chunks, 64 at a time
    assert sum(t["size"] for g in groups for t in g) == 20000
    assert run_cli("replay", str(trace), "--check", "-o", str(tmp_path / "d")).returncode == 0


def test_f05_a_csv_count_beyond_64_bits_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n6,23372036854775805185\n")
    r = run_cli("convert", "auto", str(path), "--rate", "1", "-o", str(tmp_path / "w.jsonl"))
    assert "must be at most 2,097,152 tokens" in located(r, path)


def test_f06_meta_nested_300_deep_is_refused_everywhere(tmp_path: Path) -> None:
    deep = "[" * 300 + "]" * 300
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        '{"sid":0,"arrival":0,"prompt_tokens":5,"output_tokens":1,"meta":' + deep + "}\n"
    )
    assert "meta is nested deeper than 200 levels" in located(
        run_cli("simulate", str(workload)), workload
    )
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(
        '{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":' + deep + "}\n"
    )
    r = run_cli("convert", "auto", str(mooncake), "-o", str(tmp_path / "out.jsonl"))
    assert "hash_ids is nested deeper than 200 levels" in located(r, mooncake)
    dump = tmp_path / "d.jsonl"
    entry = '{"tid":1,"sid":1,"kind":"decode","size":1,"meta":' + deep + "}"
    dump.write_text('{"step":0,"batch":[' + entry + '],"tokens":1,"queued":0}\n')
    assert "nested deeper than 200 levels" in located(
        run_cli("diff", str(dump), str(dump), "-f", "json"), dump
    )


def test_f07_an_azure_timestamp_with_a_401_digit_year_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    year = "9" * 401
    path.write_text(
        f"TIMESTAMP,ContextTokens,GeneratedTokens\n{year}-11-16 18:15:46.6805900,10,2\n"
    )
    r = run_cli("convert", "azure", str(path), "-o", str(tmp_path / "w.jsonl"))
    assert "TIMESTAMP is not a real date and time" in located(r, path)


def test_f08_a_parameter_of_1e30_is_refused_naming_it(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parent.parent / "traces" / "rotation-fairness.jsonl"
    w = tmp_path / "w.jsonl"
    w.write_text('{"sid":0,"arrival":0,"prompt_tokens":5,"output_tokens":1}\n')
    for argv in (
        ["diff", str(trace), "--b-param", "max_batch_tokens=1e30"],
        [
            "replay",
            str(trace),
            "--perfetto",
            str(tmp_path / "p.json"),
            "-P",
            "max_batch_tokens=1e30",
        ],
        ["simulate", str(w), "-P", "max_batch_tokens=1e30"],
    ):
        r = run_cli(*argv)
        err = r.stderr.decode()
        assert r.returncode == 2, (argv, err)
        assert "max_batch_tokens must fit in 64 bits" in err, (argv, err)


def test_every_fuzz_target_loads_and_runs_an_input_in_the_default_suite() -> None:
    # The harness is outside the package: a module it names that moved broke only the
    # fuzz step of CI (#40). Each target but vLLM's runs on bundled inputs here.
    import importlib.util
    import sys

    from tests.helpers import ROOT, TRACES

    spec = importlib.util.spec_from_file_location("fuzz_targets", ROOT / "fuzz" / "fuzz_targets.py")
    assert spec is not None and spec.loader is not None
    from schedcli.runtimes.vllm import policy

    module = importlib.util.module_from_spec(spec)
    saved, available = list(sys.path), policy.available  # the harness replaces both
    try:
        spec.loader.exec_module(module)
        inputs = [b"", (TRACES / "rotation-fairness.jsonl").read_bytes()[:2000]]
        for name, target in module.TARGETS.items():
            if name in ("requests-vllm", "compiled-pure"):  # vLLM's import; two subprocesses
                continue
            for data in inputs:
                target(data)
    finally:
        sys.path[:] = saved
        policy.available = available  # type: ignore[method-assign]
