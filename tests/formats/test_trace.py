"""formats/trace/: a trace's lines read and refused at FILE:LINE, its header and level."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.helpers import REQUEST_HEADER, TOY, located, run_cli, run_process, write_lines

ARRIVE = {"op": "arrive", "rid": "a", "prompt_tokens": 10, "max_tokens": 3, "t": 0.0}


def test_a_byte_order_mark_before_get_work_replays(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"op":"get_work"}\n{"op":"get\\u005fwork"}\n')
    r = run_cli("replay", str(path), "-f", "jsonl")
    assert r.returncode == 0 and r.stdout.count(b'"step"') == 2


def test_a_line_nested_980_deep_is_refused_by_replay_and_validate(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"":' + "[" * 980 + '{"":0}' + "]" * 980 + "}\n")
    for command in ("replay", "validate"):
        assert "nested deeper than 200 levels" in located(run_cli(command, str(path)), path)


def test_a_request_level_trace_is_known_from_stdin(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "r.jsonl", [REQUEST_HEADER, ARRIVE])
    data = trace.read_bytes()
    assert run_cli("replay", "-", "-f", "jsonl", input=data).returncode == 0
    r = run_cli("validate", "-", input=data)
    assert r.returncode == 0 and b"valid" in r.stderr
    import gzip

    assert run_cli("replay", "-", "-f", "jsonl", input=gzip.compress(data)).returncode == 0
    # a real pipe, in a process of its own: the toy policy given as the command line gives it
    piped = run_process("replay", "-", "-p", TOY, "-f", "jsonl", input=data)
    assert piped.returncode == 0 and b'"mode":"request"' in piped.stdout


def test_a_request_level_trace_is_known_with_a_bom_or_a_long_header(tmp_path: Path) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(
        b"\xef\xbb\xbf" + write_lines(tmp_path / "x.jsonl", [REQUEST_HEADER, ARRIVE]).read_bytes()
    )
    long = write_lines(
        tmp_path / "long.jsonl", [{**REQUEST_HEADER, "meta": {"note": "x" * 70_000}}, ARRIVE]
    )
    for trace in (bom, long):
        r = run_cli("replay", str(trace), "-f", "jsonl")
        assert r.returncode == 0, r.stderr
        assert b'"mode":"request"' in r.stdout


def test_a_partial_trace_is_refused_after_its_events_unless_allowed(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1}\n'
        '{"op": "get_work", "expect": [1]}\n'
        '{"partial": {"reason": "terminated"}}\n'
    )
    dump = tmp_path / "d.jsonl"
    r = run_cli("replay", str(trace), "-f", "jsonl", "-o", str(dump))
    assert r.returncode == 2
    assert f"{trace}:3: partial trace (terminated)" in r.stderr.decode()
    assert orjson.loads(dump.read_bytes().splitlines()[-1])["partial"]  # and so is its dump
    for argv in (["stats", str(trace)], ["diff", str(trace), "--b", "fcfs"]):
        assert run_cli(*argv).returncode == 2, argv
    ok = run_cli("replay", str(trace), "--check", "--allow-incomplete", "-o", str(dump))
    assert ok.returncode == 0, ok.stderr
    trace.write_text(trace.read_text() + '{"op": "get_work"}\n')
    r = run_cli("validate", str(trace), "--allow-incomplete")
    assert r.returncode == 2 and b":4: a line after the partial marker at line 3" in r.stderr


def test_a_size_written_as_a_float_is_called_that_not_out_of_range(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 4.0}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert r.returncode == 2
    assert "size must be an integer, not a number written with a decimal point" in (
        r.stderr.decode()
    )
    trace.write_text('{"op": "submit", "tid": 1, "sid": 1, "kind": "decode", "size": 1e30}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert b"size is beyond the 64-bit integer range" in r.stderr


def test_a_null_sid_says_null_not_missing(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "submit", "tid": 1, "sid": null, "kind": "decode", "size": 1}\n')
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "d"))
    assert r.stderr.decode().strip() == f"{trace}:1: sid must be an integer or a string, not null"


# --- a trace that begins from a state -------------------------------------------------------

FAIR_HEADER = {
    "schedcli": 1,
    "policy": "fair",
    "params": {"max_batch_tokens": 8, "max_prefill_chunk_size": 8},
}
LEDGER = {"accepted": 3, "dispatched": 2, "cancelled": 0, "rejected": 0, "rejected_tasks": 0,
          "tokens": 2}  # fmt: skip
STATE = {
    "op": "state",
    "step": 5,
    "state": {
        "version": 1,
        "policy": "fair",
        "queued": [[{"tid": 9, "sid": "a", "kind": "decode", "size": 1, "produce_output": True}]],
        "backlog": ["a"],
        "counters": [["a", 4.0]],
    },
    "ledger": LEDGER,
}


def test_a_state_line_after_the_header_is_read_as_where_the_trace_begins(tmp_path: Path) -> None:
    from schedcli.formats.trace import open_trace

    trace = write_lines(tmp_path / "t.jsonl", [FAIR_HEADER, STATE, {"op": "get_work"}])
    with open_trace(str(trace)) as reader:
        assert reader.state is not None
        assert (reader.state.line, reader.state.step) == (2, 5)
        assert reader.state.ledger == LEDGER
        assert [e.op for e in reader] == ["get_work"]


def test_a_state_line_anywhere_else_is_refused_at_its_line(tmp_path: Path) -> None:
    trace = write_lines(tmp_path / "t.jsonl", [FAIR_HEADER, {"op": "get_work"}, STATE])
    for command in ("replay", "validate"):
        err = located(run_cli(command, str(trace)), trace)
        assert err.startswith(f"{trace}:3: a state line is allowed only once, as the first line")


def test_a_state_lines_own_fields_are_checked_at_its_line(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({**STATE, "step": -1}, "step must be >= 0, not -1"),
        ({**STATE, "step": 2**63}, "step is beyond the 64-bit integer range"),
        ({**STATE, "state": [1]}, "state must be an object, not an array"),
        ({**STATE, "ledger": {**LEDGER, "tokens": "2"}}, "ledger.tokens must be an integer"),
        ({**STATE, "ledger": {**LEDGER, "extra": 1}}, "unknown field 'extra' in ledger"),
        ({k: v for k, v in STATE.items() if k != "ledger"}, "the state line has no ledger"),
        ({**STATE, "stepp": 1}, "unknown field 'stepp' in the state line (did you mean 'step'?)"),
        (
            {**STATE, "state": {**STATE["state"], "counters": [["a", 2**70]]}},  # type: ignore[dict-item]
            f"state.counters[0][1]: must be an integer from {-(2**63)} to {2**63 - 1}, not {2**70}",
        ),
        (
            {**STATE, "state": {**STATE["state"], "queued": [[{"tid": -(2**64)}]]}},  # type: ignore[dict-item]
            f"state.queued[0][0].tid: must be an integer from {-(2**63)}",
        ),
        (
            {**STATE, "ledger": {**LEDGER, "rejected": 0, "rejected_tasks": 2}},
            "ledger: rejected 0 groups hold no tasks, not rejected_tasks 2",
        ),
        (
            {**STATE, "ledger": {**LEDGER, "dispatched": 4}},
            "ledger: dispatched 4 + cancelled 0 is more than accepted 3",
        ),
    ]
    for line, said in cases:
        trace = write_lines(tmp_path / "t.jsonl", [FAIR_HEADER, line, {"op": "get_work"}])
        for command in ("replay", "validate"):
            err = located(run_cli(command, str(trace)), trace)
            assert err.startswith(f"{trace}:2: {said}"), (command, err)
