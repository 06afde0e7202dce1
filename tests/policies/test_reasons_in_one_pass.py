"""Why the other side's tasks were left out, found in the same pass that found the
difference: a --check mismatch, a golden's first differing step and diff's first
difference all show reasons even for a trace read from a pipe, which cannot be read twice."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import TRACES, run_cli

CHAT = TRACES / "long-prompts-and-chat.jsonl"


def test_a_check_mismatch_from_a_pipe_says_why(tmp_path: Path) -> None:
    trace = (
        b'{"schedcli": 1, "policy": "decode-first", "params": {"max_batch_tokens": 8, '
        b'"max_decode_sequences": 2, "max_prefill_chunk_size": 4}}\n'
        b'{"op": "submit", "tid": 1, "sid": 10, "kind": "prefill", "size": 4}\n'
        b'{"op": "submit", "tid": 2, "sid": 20, "kind": "prefill", "size": 4}\n'
        b'{"op": "submit", "tid": 3, "sid": 30, "kind": "prefill", "size": 4}\n'
        b'{"op": "get_work", "expect": [1, 3]}\n'
    )
    r = run_cli("replay", "-", "--check", input=trace)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "moved out (expected, not dispatched): [3]" in err
    assert "3: budget_spent" in err or "3: no_room" in err, err


def test_a_golden_difference_from_a_pipe_says_why(tmp_path: Path) -> None:
    golden = tmp_path / "g.jsonl"
    assert (
        run_cli("replay", str(CHAT), "-p", "fcfs", "-f", "jsonl", "-o", str(golden)).returncode == 0
    )
    r = run_cli("replay", "-", "--golden", str(golden), input=CHAT.read_bytes())
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "why the replay left out what the other side dispatched:" in err
    assert '"p1.2": no_room  256 tokens, 24 left' in err


def test_diff_of_an_explicit_trace_from_a_pipe_says_why_on_both_sides() -> None:
    # In explicit mode both sides stand at the differing step when it is compared. (A
    # stepped trace's next event has moved the first side on by then: its reasons come
    # from a replay to the step, which a file allows and a pipe does not.)
    trace = TRACES / "rotation-fairness.jsonl"
    piped = run_cli("diff", "-", "--b", "fcfs", input=trace.read_bytes())
    from_file = run_cli("diff", str(trace), "--b", "fcfs")
    assert piped.returncode == from_file.returncode == 1
    assert piped.stdout.count(b"why ") == 2
    tail = piped.stdout[piped.stdout.index(b"why ") :]
    assert tail == from_file.stdout[from_file.stdout.index(b"why ") :]
