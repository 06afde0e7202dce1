"""``schedcli findings``: the shipped examples' goldens, --fail-on's exit codes, and the
same bytes from the compiled core and pure Python."""

from __future__ import annotations

import pytest

from tests.conftest import Cli
from tests.helpers import ROOT, UPDATE_GOLDENS, run_process

EXAMPLES = ROOT / "docs" / "examples" / "findings"
KINDS_SHOWN = ["priority_inversion", "hol_blocking", "starvation", "decode_gap"]


@pytest.mark.parametrize("kind", KINDS_SHOWN)
def test_each_shipped_example_shows_its_kind_as_its_golden_says(cli: Cli, kind: str) -> None:
    trace, golden = EXAMPLES / f"{kind}.jsonl", EXAMPLES / f"{kind}.findings.jsonl"
    r = cli("findings", trace, "-f", "json")
    assert r.code == 0, r.stderr
    if UPDATE_GOLDENS:
        golden.write_bytes(r.stdout)
    assert r.stdout == golden.read_bytes()
    assert {line.split(b'"')[3].decode() for line in r.lines} == {kind}


def test_fail_on_exits_1_only_for_a_kind_that_was_found(cli: Cli) -> None:
    trace = EXAMPLES / "hol_blocking.jsonl"
    assert cli("findings", trace, "--fail-on", "hol_blocking").code == 1
    assert cli("findings", trace, "--fail-on", "starvation,decode_gap").code == 0
    r = cli("findings", trace, "--fail-on", "starvation,hol")
    assert r.code == 2 and "--fail-on" in r.stderr and "'hol'" in r.stderr


def test_a_threshold_out_of_bounds_is_usage_naming_the_option(cli: Cli) -> None:
    r = cli("findings", EXAMPLES / "starvation.jsonl", "--hol-unused", "0")
    assert r.code == 2 and "--hol-unused" in r.stderr and "Traceback" not in r.stderr


def test_the_table_names_each_finding(cli: Cli) -> None:
    r = cli("findings", EXAMPLES / "priority_inversion.jsonl")
    assert r.code == 0 and b"priority_inversion" in r.stdout and b"1 finding" in r.stdout


def test_json_is_byte_identical_compiled_and_pure() -> None:
    args = ["findings", str(EXAMPLES / "starvation.jsonl"), "--starve-after", "2", "-f", "json"]
    fast = run_process(*args, env={"PYTHONHASHSEED": "1"})
    pure = run_process(*args, env={"SCHEDCLI_PURE_PYTHON": "1", "PYTHONHASHSEED": "2"})
    assert fast.returncode == pure.returncode == 0, fast.stderr
    assert fast.stdout == pure.stdout and fast.stdout


@pytest.mark.parametrize("given", ["", ",", " , "])
def test_fail_on_with_no_kind_says_none_was_given_and_lists_the_kinds(cli: Cli, given: str) -> None:
    r = cli("findings", EXAMPLES / "hol_blocking.jsonl", "--fail-on", given)
    assert r.code == 2 and r.stdout == b""
    assert r.stderr.strip() == (
        "schedcli: --fail-on: no kind given; kinds: priority_inversion, starvation, "
        "hol_blocking, preemption_thrash, skipped_running, decode_gap"
    )


def test_a_threshold_error_writes_its_bounds_in_full_and_the_value_as_given(cli: Cli) -> None:
    trace = EXAMPLES / "starvation.jsonl"
    r = cli("findings", trace, "--starve-after", "-1")
    assert r.code == 2
    assert r.stderr.strip() == (
        "schedcli: --starve-after must be an integer from 0 to 9223372036854775807, not -1"
    )
    r = cli("findings", trace, "--hol-unused", "-0")
    assert r.code == 2
    assert r.stderr.strip() == "schedcli: --hol-unused must be a number > 0 and <= 100, not -0"


def test_a_threshold_error_has_the_prefix_of_replays_option_errors(cli: Cli) -> None:
    replay = cli("replay", EXAMPLES / "starvation.jsonl", "--max-line-bytes", "0")
    findings = cli("findings", EXAMPLES / "starvation.jsonl", "--thrash-after", "0")
    assert replay.code == findings.code == 2
    assert replay.stderr.startswith("schedcli: --max-line-bytes must be ")
    assert findings.stderr.startswith("schedcli: --thrash-after must be ")


def test_gap_after_0_is_taken_like_starve_after_0(cli: Cli) -> None:
    """Both bound a "more than N steps": 0 is the strictest, never bad usage."""
    trace = EXAMPLES / "decode_gap.jsonl"
    for option in ("--gap-after", "--starve-after"):
        r = cli("findings", trace, option, "0", "-f", "json")
        assert r.code == 0, r.stderr
    assert b'"bound":0' in cli("findings", trace, "--gap-after", "0", "-f", "json").stdout


def test_allow_incomplete_help_says_what_findings_reads(cli: Cli) -> None:
    """findings reads traces only: its help speaks of a partial trace, not of a dump."""
    r = cli("findings", "--help")
    assert r.code == 0
    text = " ".join(r.stdout.decode().split())
    assert "--allow-incomplete Read a trace marked partial anyway" in text
    assert "dump" not in text


# Kinds only a preempting, chunking policy shows: their examples run vLLM 0.33 (`-p vllm`),
# whose other findings (a KV-blocked head, a preempted request's gap) are in the golden too.
VLLM_KINDS = ["preemption_thrash", "skipped_running"]


@pytest.mark.needs("vllm")
@pytest.mark.parametrize("kind", VLLM_KINDS)
def test_each_vllm_example_shows_its_kind_as_its_golden_says(cli: Cli, kind: str) -> None:
    trace, golden = EXAMPLES / f"{kind}.jsonl", EXAMPLES / f"{kind}.findings.jsonl"
    r = cli("findings", trace, "-f", "json")
    assert r.code == 0, r.stderr
    if UPDATE_GOLDENS:
        golden.write_bytes(r.stdout)
    assert r.stdout == golden.read_bytes()
    assert kind in {line.split(b'"')[3].decode() for line in r.lines}
    assert cli("findings", trace, "--fail-on", kind).code == 1


INVERSION = ROOT / "docs" / "examples" / "vllm-priority-inversion"
VICTIM = ROOT / "docs" / "examples" / "vllm-49097"


@pytest.mark.needs("vllm")
def test_vllm_priority_policy_keeps_a_first_request_waiting_behind_max_num_seqs(cli: Cli) -> None:
    """vllm#40004, shrunk: at max_num_seqs a priority-0 request waits while a priority-5
    one decodes; the finding is the golden's, and the replay is its golden's."""
    trace, golden = INVERSION / "inversion.jsonl", INVERSION / "golden" / "inversion.findings.jsonl"
    r = cli("findings", trace, "-f", "json", "--fail-on", "priority_inversion")
    assert r.code == 1, r.stderr
    if UPDATE_GOLDENS:
        golden.write_bytes(r.stdout)
    assert r.stdout == golden.read_bytes()
    assert cli("check", INVERSION).code == 0


@pytest.mark.needs("vllm")
def test_vllm_schedules_the_next_request_when_its_victim_sat_before_it(cli: Cli) -> None:
    """vllm#49097 does not reproduce: the request after the one a preemption made room for
    still runs in that step (the trace's expects and golden), and nothing is skipped."""
    trace = VICTIM / "victim-before-cursor.jsonl"
    assert b'"batch":[["b",1],["c",1]],"preempted":["low"]' in trace.read_bytes()
    assert cli("check", VICTIM).code == 0
    r = cli("findings", trace, "-f", "json", "--fail-on", "skipped_running")
    assert r.code == 0 and r.stdout == b"", r.stdout
