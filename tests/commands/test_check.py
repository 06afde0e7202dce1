"""`schedcli check`: a suite of traces and goldens, a verdict each, for CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Cli
from tests.helpers import EXAMPLES, ROOT, TOY, TRACES, run_cli, run_process

GOLDENS = TRACES / "golden"


def held_out_suite(root: Path) -> Path:
    """Some passing, one golden off by one batch, one wrong expect, one unchecked, one
    orphaned golden."""
    suite = root / "suite"
    (suite / "golden").mkdir(parents=True)
    for name in ("rotation-fairness", "clear-shutdown", "deferral-order"):
        shutil.copy(TRACES / f"{name}.jsonl", suite / f"{name}.jsonl")
        shutil.copy(GOLDENS / f"{name}.dump.jsonl", suite / "golden" / f"{name}.dump.jsonl")
    # decode-beside-prefill: its golden's step 1 loses a task.
    shutil.copy(TRACES / "decode-beside-prefill.jsonl", suite / "decode-beside-prefill.jsonl")
    lines = (GOLDENS / "decode-beside-prefill.dump.jsonl").read_bytes().splitlines()
    for i, raw in enumerate(lines):
        record = orjson.loads(raw)
        if record.get("step") == 1 and "batch" in record:
            record["batch"] = record["batch"][:-1]
            lines[i] = orjson.dumps(record)
    (suite / "golden" / "decode-beside-prefill.dump.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    # cancel-and-rejoin: its second expect is wrong (no golden: the expect decides).
    lines = (TRACES / "cancel-and-rejoin.jsonl").read_bytes().splitlines()
    expects = [i for i, raw in enumerate(lines) if b'"expect"' in raw]
    wrong = orjson.loads(lines[expects[1]])
    wrong["expect"] = [*wrong["expect"], 999]
    lines[expects[1]] = orjson.dumps(wrong)
    (suite / "cancel-and-rejoin.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    # long-prompts-and-chat: no expect and no golden.
    shutil.copy(TRACES / "long-prompts-and-chat.jsonl", suite / "long-prompts-and-chat.jsonl")
    shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / "ghost.dump.jsonl")
    return suite


def verdicts(suite: Path, *options: str) -> tuple[int, dict[str, dict[str, object]]]:
    r = run_cli("check", str(suite), "-f", "json", "-j", "1", *options)
    records = [orjson.loads(line) for line in r.stdout.splitlines()]
    return r.returncode, {Path(x["trace"] or x["golden"]).name: x for x in records}


def test_check_gives_each_trace_its_verdict_and_exits_1_on_any_failure(tmp_path: Path) -> None:
    code, found = verdicts(held_out_suite(tmp_path))
    assert code == 1
    assert {name: v["status"] for name, v in found.items()} == {
        "rotation-fairness.jsonl": "pass",
        "clear-shutdown.jsonl": "pass",
        "deferral-order.jsonl": "pass",
        "decode-beside-prefill.jsonl": "fail",
        "cancel-and-rejoin.jsonl": "fail",
        "long-prompts-and-chat.jsonl": "fail",  # no golden
        "ghost.dump.jsonl": "orphaned",
    }
    assert found["long-prompts-and-chat.jsonl"]["coverage"] == "no golden"
    assert found["rotation-fairness.jsonl"]["coverage"] == (
        "checked 6 of 6 batches; golden: 6 steps compared"
    )
    assert "step 1" in str(found["decode-beside-prefill.jsonl"]["detail"])
    assert found["cancel-and-rejoin.jsonl"]["coverage"].startswith("expect differs at step")
    assert isinstance(found["cancel-and-rejoin.jsonl"]["line"], int)


def test_the_text_report_shows_a_line_each_then_each_first_divergence_then_a_summary(
    tmp_path: Path,
) -> None:
    r = run_cli("check", str(held_out_suite(tmp_path)), "-j", "1")
    out = r.stdout.decode()
    assert r.returncode == 1
    lines = out.splitlines()
    assert lines[0].startswith("FAIL") and "cancel-and-rejoin.jsonl" in lines[0]
    assert "--- " in out and "first divergence" in out
    assert lines[-1] == (
        "6 traces: 3 passed, 3 failed, 0 broke the Scheduler contract, 0 unchecked, "
        "0 could not be read; "
        "1 orphaned golden (failing)"
    )


def test_unchecked_fails_unless_allowed_and_an_orphan_unless_not_strict(tmp_path: Path) -> None:
    suite = tmp_path / "s"
    (suite / "golden").mkdir(parents=True)
    shutil.copy(TRACES / "long-prompts-and-chat.jsonl", suite)
    assert verdicts(suite)[1]["long-prompts-and-chat.jsonl"]["status"] == "fail"  # no golden
    code, found = verdicts(suite, "--allow-missing-golden")
    assert code == 1 and found["long-prompts-and-chat.jsonl"]["status"] == "unchecked"
    assert verdicts(suite, "--allow-missing-golden", "--allow-unchecked")[0] == 0
    shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / "ghost.dump.jsonl")
    allowed = ("--allow-missing-golden", "--allow-unchecked")
    assert verdicts(suite, *allowed)[0] == 1
    assert verdicts(suite, *allowed, "--strict")[0] == 1
    assert verdicts(suite, *allowed, "--no-strict")[0] == 0


def test_update_rewrites_only_the_failing_and_missing_goldens_and_the_next_run_passes(
    tmp_path: Path,
) -> None:
    suite = held_out_suite(tmp_path)
    (suite / "cancel-and-rejoin.jsonl").unlink()  # a failing expect is never blessed
    goldens = suite / "golden"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in goldens.iterdir()}
    dry = run_cli("check", str(suite), "--update", "--dry-run", "-j", "1")
    assert dry.returncode == 1 and b"would write" in dry.stdout
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in goldens.iterdir()} == before
    r = run_cli("check", str(suite), "--update", "-j", "1", "--no-strict")
    assert r.returncode == 0, r.stdout.decode()
    assert b"1 step and 0 other records differ" in r.stdout
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in goldens.iterdir()}
    changed = {name for name in after if after[name] != before.get(name)}
    assert changed == {"decode-beside-prefill.dump.jsonl", "long-prompts-and-chat.dump.jsonl"}
    assert (
        after["decode-beside-prefill.dump.jsonl"][0]
        == (GOLDENS / "decode-beside-prefill.dump.jsonl").read_bytes()
    )
    code, found = verdicts(suite)
    assert code == 1 and found["ghost.dump.jsonl"]["status"] == "orphaned"
    (goldens / "ghost.dump.jsonl").unlink()
    assert verdicts(suite)[0] == 0


def test_the_junit_report_counts_and_explains_each_outcome(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    r = run_cli("check", str(held_out_suite(tmp_path)), "--junit-xml", str(report), "-j", "1")
    assert r.returncode == 1
    root = ET.parse(report).getroot()
    assert root.tag == "testsuites"
    (suite,) = root
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "4", "0")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {p + ".jsonl" for p in (
        "rotation-fairness", "clear-shutdown", "deferral-order", "decode-beside-prefill",
        "cancel-and-rejoin", "long-prompts-and-chat")} | {"ghost.dump.jsonl"}  # fmt: skip
    ghost = cases.pop("ghost.dump.jsonl")
    assert ghost.get("classname") == str(tmp_path / "suite" / "golden")
    assert ghost.find("failure") is not None
    assert all(c.get("classname") == str(tmp_path / "suite") for c in cases.values())
    failure = cases["decode-beside-prefill.jsonl"].find("failure")
    assert failure is not None and "differ" in (failure.get("message") or "")
    assert "step 1" in (failure.text or "")
    assert cases["rotation-fairness.jsonl"].find("failure") is None
    missing = cases["long-prompts-and-chat.jsonl"].find("failure")
    assert missing is not None and "no golden" in (missing.get("message") or "")


def test_github_actions_gets_an_annotation_at_the_line_of_each_divergence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = held_out_suite(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    r = run_cli("check", str(suite), "--allow-unchecked", "-j", "1")
    annotations = [x for x in r.stderr.decode().splitlines() if x.startswith("::error ")]
    assert len(annotations) == 4  # two divergences, a missing golden, an orphan
    _, found = verdicts(suite)
    line = found["cancel-and-rejoin.jsonl"]["line"]
    trace = str(suite / "cancel-and-rejoin.jsonl")
    assert any(a.startswith(f"::error file={trace},line={line},") for a in annotations)
    assert all("\n" not in a for a in annotations)


def test_parallel_jobs_give_the_same_report_as_one(tmp_path: Path) -> None:
    suite = held_out_suite(tmp_path)
    one = run_cli("check", str(suite), "-j", "1")
    two = run_cli("check", str(suite), "-j", "2")
    assert (one.returncode, one.stdout) == (two.returncode, two.stdout)


# A worker that never sees its SIGTERM (as when the signal lands just before the worker
# blocks on the pool's queue lock): the check must still end, as the workers are told there
# is no more work rather than signalled.
_DEAF_WORKERS = """
import signal, sys
from schedcli.engine import pool
from schedcli.app.entry import run
def deaf():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pool._worker_signals = deaf
codes = []
for _ in range(3):  # the lost signal is a race: give it three chances to bite
    sys.argv = ["schedcli", "check", sys.argv[1], "-j", "6", "--allow-missing-golden"]
    try:
        run()
    except SystemExit as e:
        codes.append(e.code)
sys.exit(max(codes))
"""


def test_a_parallel_check_ends_though_its_workers_never_see_a_stop_signal(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for i in range(12):
        shutil.copy(TRACES / "rotation-fairness.jsonl", suite / f"copy-{i}.jsonl")
    r = subprocess.run(
        [sys.executable, "-c", _DEAF_WORKERS, str(suite)],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().count("copy-") >= 12


def test_a_trace_that_cannot_be_read_is_bad_input_and_the_rest_still_checked(
    tmp_path: Path,
) -> None:
    suite = held_out_suite(tmp_path)
    (suite / "broken.jsonl").write_text('{"op": "submit", "tid": 1}\n')
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 2
    out = r.stdout.decode()
    assert "error" in out and "broken.jsonl" in out and "rotation-fairness.jsonl" in out


def test_nothing_to_check_is_bad_input(tmp_path: Path) -> None:
    r = run_cli("check", str(tmp_path))
    assert r.returncode == 2 and b"nothing to check" in r.stderr
    r = run_cli("check", str(tmp_path / "missing"))
    assert r.returncode == 2 and b"no such file or folder" in r.stderr
    r = run_cli("check", str(TRACES), "--dry-run")
    assert r.returncode == 2 and b"--dry-run applies to --update" in r.stderr


def test_the_examples_pass(tmp_path: Path) -> None:
    r = run_cli("check", str(TRACES))
    assert r.returncode == 0, r.stdout.decode()
    assert r.stdout.decode().splitlines()[-1] == (
        "7 traces: 7 passed, 0 failed, 0 broke the Scheduler contract, 0 unchecked, "
        "0 could not be read"
    )


def project(tmp_path: Path, section: str) -> Path:
    """A repository: pyproject.toml with ``section`` under [tool.schedcli], and the
    example traces with their goldens in checks/."""
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.schedcli]\n{section}')
    shutil.copytree(TRACES, tmp_path / "checks")
    return tmp_path


def test_check_with_no_arguments_reads_the_projects_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project(tmp_path, 'traces = ["checks"]\n'))
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # the nearest pyproject.toml above is the project's
    r = run_cli("check", "-j", "1")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().count("pass ") == 7


def test_a_folder_configured_with_another_policy_replays_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = 'traces = ["checks"]\n[tool.schedcli.folders."checks"]\npolicy = "fcfs"\n'
    monkeypatch.chdir(project(tmp_path, section))
    code, found = verdicts(Path("checks"))
    assert code == 1  # the goldens were made under decode-first
    assert found["rotation-fairness.jsonl"]["status"] == "fail"
    r = run_cli("check", "checks", "-j", "1", "-f", "json")
    assert b"replay under fcfs" in r.stdout


def test_command_line_options_override_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project(tmp_path, 'traces = ["nowhere"]\nstrict = false\n'))
    assert run_cli("check", "checks", "-j", "1").returncode == 0
    assert run_cli("check", "-j", "1").returncode == 2  # the configured folder is missing


def test_a_policy_given_to_check_replays_every_trace_under_it_in_place_of_its_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The folder's fcfs and its fcfs-only parameter give way to -p: the goldens (made under
    # decode-first) pass again, and max_num_seqs, which decode-first lacks, is not applied.
    section = (
        'traces = ["checks"]\n[tool.schedcli.folders."checks"]\npolicy = "fcfs"\n'
        "params = { max_num_seqs = 2 }\n"
    )
    monkeypatch.chdir(project(tmp_path, section))
    assert run_cli("check", "checks", "-j", "1").returncode == 1
    r = run_cli("check", "checks", "-j", "1", "-p", "decode-first")
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    code, found = verdicts(Path("checks"), "-p", "fcfs", "-P", "max_num_seqs=1")
    assert code == 1
    failed = found["rotation-fairness.jsonl"]
    assert failed["status"] == "fail"
    assert " -p fcfs -P max_num_seqs=1 --check " in str(failed["command"])


def test_a_param_given_to_check_goes_over_the_headers_and_the_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project(tmp_path, 'traces = ["checks"]\n'))
    code, found = verdicts(Path("checks"), "-P", "max_decode_sequences=1")
    assert code == 1
    assert found["decode-beside-prefill.jsonl"]["status"] == "fail"
    assert "-P max_decode_sequences=1" in str(found["decode-beside-prefill.jsonl"]["command"])
    bad = run_cli("check", "checks", "-j", "1", "-P", "nonsense")
    assert bad.returncode == 2 and b"--param 'nonsense': expected KEY=VALUE" in bad.stderr


@pytest.mark.slow
def test_a_policy_on_the_command_line_gives_the_verdicts_of_a_folder_configured_with_it(
    tmp_path: Path,
) -> None:
    # Two ways to one verdict: `check DIR -p P -P K=V`, and DIR's folder settings saying
    # the same (policy = P, params = {K = V}); every record, reproduce command included.
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    stems = ["rotation-fairness", "rejections", "cancel-and-rejoin", "decode-beside-prefill"]
    policies = ["decode-first", "fcfs", "prefill-first", "priority", "sjf", "fair"]
    budgets = st.sampled_from([None, 9, 10, 12, 64])

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(policies), budgets, st.sets(st.sampled_from(stems), min_size=1))
    def alike(policy: str, budget: int | None, chosen: set[str]) -> None:
        here = Path(tempfile.mkdtemp(dir=tmp_path))
        (here / "checks" / "golden").mkdir(parents=True)
        for stem in chosen:
            shutil.copy(TRACES / f"{stem}.jsonl", here / "checks")
            shutil.copy(GOLDENS / f"{stem}.dump.jsonl", here / "checks" / "golden")
        params = {} if budget is None else {"max_batch_tokens": budget}
        given_ = ["-p", policy, *[f"-P{k}={v}" for k, v in params.items()]]
        (here / "pyproject.toml").write_text('[project]\nname = "x"\n')
        by_option = run_cli("check", "checks", "-j", "1", "-f", "json", *given_, cwd=here)
        table = ", ".join(f"{k} = {v}" for k, v in params.items())
        (here / "pyproject.toml").write_text(
            f'[project]\nname = "x"\n[tool.schedcli.folders."checks"]\npolicy = "{policy}"\n'
            f"params = {{ {table} }}\n"
        )
        by_folder = run_cli("check", "checks", "-j", "1", "-f", "json", cwd=here)
        assert by_option.returncode == by_folder.returncode, (policy, params)
        assert by_option.stdout == by_folder.stdout, (policy, params)

    alike()


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ("strcit = true\n", "has no key 'strcit' (did you mean 'strict'?)"),
        ("jobs = 0\n", "jobs must be an integer from 1 to 1024"),
        ('traces = "checks"\n', "traces must be a list of folders or files"),
        ('[tool.schedcli.folders."checks"]\npolicy = 3\n', "policy must be a string"),
        ('[tool.schedcli.folders."checks"]\npolcy = "x"\n', "(did you mean 'policy'?)"),
        ("strict = 1\n", "strict must be true or false"),
    ],
)
def test_a_bad_configuration_is_bad_input_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, said: str
) -> None:
    monkeypatch.chdir(project(tmp_path, section))
    r = run_cli("check", "checks")
    assert r.returncode == 2
    err = r.stderr.decode()
    assert said in err and "pyproject.toml" in err and "Traceback" not in err


def test_pytest_schedcli_gives_the_verdicts_of_check_a_test_each(pytester: pytest.Pytester) -> None:
    suite = held_out_suite(pytester.path)
    result = pytester.runpytest_subprocess("--schedcli=suite", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=4)
    out = result.stdout.str()
    assert "suite/decode-beside-prefill.jsonl::check FAILED" in out or (
        "FAILED suite/decode-beside-prefill.jsonl::check" in out
    )
    assert "first divergence" in out and "Traceback" not in out
    assert "only in B" in out  # the step-aligned view, not a Python traceback
    code, _ = verdicts(suite)
    assert code == 1


def test_pytest_schedcli_works_across_xdist_workers_and_updates_goldens(
    pytester: pytest.Pytester,
) -> None:
    suite = held_out_suite(pytester.path)
    (suite / "cancel-and-rejoin.jsonl").unlink()
    result = pytester.runpytest_subprocess("--schedcli=suite", "-n", "2")
    result.assert_outcomes(passed=3, failed=3)  # a divergence, a missing golden, an orphan
    result = pytester.runpytest_subprocess("--schedcli=suite", "--schedcli-update", "-n", "2")
    result.assert_outcomes(passed=5, failed=1)  # the orphan is still there
    assert verdicts(suite)[0] == 1
    (suite / "golden" / "ghost.dump.jsonl").unlink()
    result = pytester.runpytest_subprocess("--schedcli=suite")
    result.assert_outcomes(passed=5)


def test_the_plugin_is_idle_unless_asked(pytester: pytest.Pytester) -> None:
    held_out_suite(pytester.path)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    pytester.makepyprojecttoml('[tool.schedcli]\ntraces = ["suite"]\npytest = true\n')
    pytester.runpytest_subprocess().assert_outcomes(passed=4, failed=4)
    # Test files named on the command line: only they run.
    pytester.runpytest_subprocess("test_plain.py").assert_outcomes(passed=1)


def test_traces_the_plugin_checks_count_among_the_collected_when_m_deselects(
    pytester: pytest.Pytester,
) -> None:
    held_out_suite(pytester.path)
    pytester.makepyfile(
        test_plain="import pytest\n\n@pytest.mark.slow\ndef test_one():\n    pass\n"
    )
    pytester.makepyprojecttoml(
        '[tool.schedcli]\ntraces = ["suite"]\npytest = true\n'
        '[tool.pytest.ini_options]\nmarkers = ["slow"]\n'
    )
    result = pytester.runpytest_subprocess("-m", "not slow", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["7/8 tests collected (1 deselected)*"])
    result = pytester.runpytest_subprocess("-m", "slow", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["1/8 tests collected (7 deselected)*"])


def pre_commit_hook() -> dict[str, str]:
    """The hook's settings (``.pre-commit-hooks.yaml`` holds one hook of plain keys)."""
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    pairs = [line.lstrip("- ").split(": ", 1) for line in text.splitlines() if ": " in line]
    return {key.strip(): value.strip() for key, value in pairs if not key.startswith("#")}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _repository(tmp_path: Path) -> Path:
    """A git repository holding a passing suite (traces/ and their goldens), committed."""
    repo = tmp_path / "repo"
    (repo / "traces" / "golden").mkdir(parents=True)
    for name in ("rotation-fairness", "deferral-order"):
        shutil.copy(TRACES / f"{name}.jsonl", repo / "traces")
        shutil.copy(GOLDENS / f"{name}.dump.jsonl", repo / "traces" / "golden")
    (repo / "notes.jsonl").write_text('{"not": "a trace"}\n')
    (repo / "pyproject.toml").write_text('[tool.schedcli]\ntraces = ["traces"]\n')
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "suite")
    return repo


def test_the_pre_commit_hook_runs_on_every_commit_and_sees_deletions_and_renames(
    tmp_path: Path,
) -> None:
    hook = pre_commit_hook()
    assert hook["id"] == "schedcli-check" and hook["entry"] == "schedcli check --staged"
    # pre-commit hands a hook no deleted file: this one asks git, on every commit.
    assert (hook["pass_filenames"], hook["always_run"]) == ("false", "true")
    assert hook["require_serial"] == "true"  # check spreads the files over cores itself
    repo = _repository(tmp_path)
    entry = hook["entry"].split()[1:]

    def staged() -> subprocess.CompletedProcess[bytes]:
        return run_cli(*entry, "-j", "1", cwd=repo)

    r = staged()
    assert r.returncode == 0 and b"touches no trace or golden" in r.stderr
    _git(repo, "rm", "-q", "traces/deferral-order.jsonl")  # its golden is left orphaned
    r = staged()
    assert r.returncode == 1 and b"orphaned   traces/golden/deferral-order.dump.jsonl" in r.stdout
    _git(repo, "reset", "-q", "--hard")
    _git(repo, "rm", "-q", "traces/golden/deferral-order.dump.jsonl")  # its trace has none
    r = staged()
    assert r.returncode == 1 and b"FAIL       traces/deferral-order.jsonl" in r.stdout
    assert b"reproduce: schedcli check --update traces/deferral-order.jsonl" in r.stdout
    _git(repo, "reset", "-q", "--hard")
    _git(repo, "mv", "traces/deferral-order.jsonl", "traces/renamed.jsonl")
    r = staged()
    assert r.returncode == 1 and b"no golden" in r.stdout and b"orphaned" in r.stdout
    _git(repo, "mv", "traces/golden/deferral-order.dump.jsonl", "traces/golden/renamed.dump.jsonl")
    r = staged()
    assert r.returncode == 0 and r.stdout.startswith(b"pass       traces/renamed.jsonl")
    # A changed golden checks its trace; a .jsonl outside the configured folders is no trace.
    golden = repo / "traces" / "golden" / "rotation-fairness.dump.jsonl"
    golden.write_bytes(golden.read_bytes().replace(b'"tokens":8', b'"tokens":9', 1))
    (repo / "notes.jsonl").write_text('{"still": "not a trace"}\n')
    _git(repo, "add", "-A")
    r = staged()
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("pass") and "renamed.jsonl" in lines[0]
    assert lines[1].startswith("FAIL") and "rotation-fairness.jsonl" in lines[1]
    assert b"notes.jsonl" not in r.stdout


def test_a_junit_reader_reads_the_report_with_its_counts_and_failure_texts(
    tmp_path: Path,
) -> None:
    # junitparser reads JUnit XML as CI systems' report pages do.
    from junitparser import Failure, JUnitXml, Skipped

    report = tmp_path / "junit.xml"
    suite = held_out_suite(tmp_path)
    run_cli("check", str(suite), "--junit-xml", str(report), "--strict", "-j", "1")
    xml = JUnitXml.fromfile(str(report))
    (read,) = list(xml)
    assert (read.tests, read.failures, read.errors, read.skipped) == (7, 4, 0, 0)
    results = {case.name: case.result for case in read}
    assert results["rotation-fairness.jsonl"] == []
    (failure,) = results["decode-beside-prefill.jsonl"]
    assert isinstance(failure, Failure) and "1 step and 0 other records differ" in failure.message
    assert "only in B" in (failure.text or "")
    (orphan,) = results["ghost.dump.jsonl"]
    assert isinstance(orphan, Failure) and orphan.message == "a golden no trace claims"
    allowed = ("--allow-unchecked", "--allow-missing-golden")
    run_cli("check", str(suite), "--junit-xml", str(report), *allowed, "-j", "1")
    (read,) = list(JUnitXml.fromfile(str(report)))
    (skipped,) = {case.name: case.result for case in read}["long-prompts-and-chat.jsonl"]
    assert isinstance(skipped, Skipped) and read.skipped == 1


def test_update_never_blesses_a_failing_expect_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    suite = held_out_suite(tmp_path)
    r = run_cli("check", str(suite), "--update", "-j", "1")
    assert r.returncode == 1  # cancel-and-rejoin's expect still fails
    goldens = suite / "golden"
    assert not (goldens / "cancel-and-rejoin.dump.jsonl").exists()
    assert [p.name for p in goldens.iterdir() if p.name.startswith(".")] == []


def test_a_golden_failure_says_why_the_replay_left_out_what_the_golden_has(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "s"
    (suite / "golden").mkdir(parents=True)
    shutil.copy(TRACES / "decode-beside-prefill.jsonl", suite)
    records = [
        orjson.loads(x)
        for x in (GOLDENS / "decode-beside-prefill.dump.jsonl").read_bytes().splitlines()
    ]
    batches = [r for r in records if "batch" in r]
    batches[0]["batch"].append(batches[1]["batch"][-1])  # the golden dispatches it a step early
    (suite / "golden" / "decode-beside-prefill.dump.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in records)
    )
    code, found = verdicts(suite)
    assert code == 1
    detail = str(found["decode-beside-prefill.jsonl"]["detail"])
    assert "why the replay left out what the other side dispatched" in detail, detail


def test_the_plugin_refuses_a_bad_path_or_configuration_as_pytest_refuses_usage(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess("--schedcli=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "nowhere: no such file or folder" in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    pytester.makepyprojecttoml("[tool.schedcli]\npytset = true\n")
    result = pytester.runpytest_subprocess("--schedcli")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "did you mean 'pytest'?" in result.stderr.str()


def test_folders_below_are_searched_and_their_goldens_found_beside_them(tmp_path: Path) -> None:
    suite = held_out_suite(tmp_path)
    deeper = suite / "more" / "deeper"
    (deeper / "golden").mkdir(parents=True)
    shutil.copy(TRACES / "rejections.jsonl", deeper)
    shutil.copy(GOLDENS / "rejections.dump.jsonl", deeper / "golden")
    (suite / ".hidden").mkdir()
    shutil.copy(TRACES / "rejections.jsonl", suite / ".hidden")
    _, found = verdicts(suite)
    assert found["rejections.jsonl"]["status"] == "pass"
    assert found["rejections.jsonl"]["trace"] == str(deeper / "rejections.jsonl")
    assert len([v for v in found.values() if v["trace"]]) == 7


def test_an_interrupted_check_stops_soon_and_leaves_no_partial_golden(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from bench.replay_bench import generate

    suite = tmp_path / "s"
    suite.mkdir()
    for i in range(12):
        generate(suite / f"t{i:02d}.jsonl", 40_000, seed=i)
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "check", str(suite), "--update", "-j", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    goldens = suite / "golden"
    deadline = time.monotonic() + 60
    while not any(goldens.glob("*.dump.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.01)
    before = len(list(goldens.glob("*.dump.jsonl")))
    proc.send_signal(signal.SIGINT)  # to the command alone, as a supervisor's stop is
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    written = len(list(goldens.glob("*.dump.jsonl")))
    assert written <= before + 1  # the workers stopped; no queued trace was begun
    assert [p.name for p in goldens.iterdir() if p.name.startswith(".")] == []


# --- traces reached through links ------------------------------------------------------------


def _wrong_expect(data: bytes) -> bytes:
    """A trace with its second expect wrong (one more tid than it dispatched)."""
    lines = data.splitlines()
    expects = [i for i, raw in enumerate(lines) if b'"expect"' in raw]
    wrong = orjson.loads(lines[expects[1]])
    wrong["expect"] = [*wrong["expect"], 999]
    lines[expects[1]] = orjson.dumps(wrong)
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_trace_reached_through_a_link_is_checked_against_the_golden_of_its_own_name(
    tmp_path: Path, suffix: str
) -> None:
    import gzip

    elsewhere = tmp_path / "recordings"
    elsewhere.mkdir()
    data = (TRACES / "rotation-fairness.jsonl").read_bytes()
    target = elsewhere / f"rf{suffix}"
    target.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    suite = tmp_path / "suite"
    (suite / "golden").mkdir(parents=True)
    (suite / f"linked{suffix}").symlink_to(target)  # to a file outside the suite
    (suite / f"beside{suffix}").symlink_to(f"linked{suffix}")  # a link beside a link
    (suite / "more").symlink_to(elsewhere)  # a folder through a link: its golden folder too
    (elsewhere / "golden").mkdir()
    golden = GOLDENS / "rotation-fairness.dump.jsonl"
    for where in (suite / "golden" / "linked", elsewhere / "golden" / "rf"):
        shutil.copy(golden, f"{where}.dump.jsonl")
    # beside's golden is another trace's: a link is compared with its own golden.
    shutil.copy(GOLDENS / "deferral-order.dump.jsonl", suite / "golden" / "beside.dump.jsonl")
    code, found = verdicts(suite)
    assert {n: v["status"] for n, v in found.items()} == {
        f"linked{suffix}": "pass",
        f"rf{suffix}": "pass",
        f"beside{suffix}": "fail",
    }
    assert code == 1 and found[f"rf{suffix}"]["trace"] == str(suite / "more" / f"rf{suffix}")
    assert found[f"beside{suffix}"]["golden"] == str(suite / "golden" / "beside.dump.jsonl")
    (suite / "golden" / "beside.dump.jsonl").unlink()
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 1 and b"orphaned" not in r.stdout  # beside has no golden: FAIL
    assert b"FAIL " in r.stdout and b"no golden" in r.stdout


@pytest.mark.parametrize("kind", ["dangling", "loop", "folder", "fifo"])
def test_a_link_that_leads_to_no_trace_fails_naming_the_link_and_keeps_its_golden(
    tmp_path: Path, kind: str
) -> None:
    suite = tmp_path / "suite"
    (suite / "golden").mkdir(parents=True)
    shutil.copy(TRACES / "rotation-fairness.jsonl", suite)
    shutil.copy(GOLDENS / "rotation-fairness.dump.jsonl", suite / "golden")
    link = suite / "gone.jsonl.gz"
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "x.jsonl").write_bytes((TRACES / "rejections.jsonl").read_bytes())
    os.mkfifo(tmp_path / "fifo")  # reading it would wait for a writer forever
    targets = {"dangling": "nowhere.jsonl", "loop": "gone.jsonl.gz", "fifo": "../fifo"}
    link.symlink_to(targets.get(kind, "../folder"))
    shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / "gone.dump.jsonl")
    r = run_cli("check", str(suite), "-j", "1", "-f", "json")
    assert r.returncode == 2, r.stdout
    records = {orjson.loads(x)["trace"]: orjson.loads(x) for x in r.stdout.splitlines()}
    assert set(records) == {str(link), str(suite / "rotation-fairness.jsonl")}  # no orphan
    said = records[str(link)]
    assert said["status"] == "error" and str(said["detail"]).startswith(f"{link}: a link ")
    why = {"dangling": "does not exist", "loop": "loop", "folder": "folder"}.get(
        kind, "not a regular file"
    )
    assert why in str(said["detail"])
    r = run_cli("check", str(link), "-j", "1")  # named on the command line: the same
    assert r.returncode == 2 and f"{link}: a link ".encode() in r.stdout


def test_pytest_schedcli_checks_a_linked_trace_under_the_links_name(
    pytester: pytest.Pytester,
) -> None:
    suite = pytester.path / "suite"
    (suite / "golden").mkdir(parents=True)
    shutil.copy(TRACES / "rotation-fairness.jsonl", pytester.path / "real.jsonl")
    (suite / "linked.jsonl").symlink_to(pytester.path / "real.jsonl")
    shutil.copy(GOLDENS / "rotation-fairness.dump.jsonl", suite / "golden" / "linked.dump.jsonl")
    (suite / "broken.jsonl").symlink_to("nowhere.jsonl")
    result = pytester.runpytest_subprocess("--schedcli=suite", "-p", "no:randomly", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "PASSED suite/linked.jsonl::check" in out
    assert "FAILED suite/broken.jsonl::check" in out and "a link to nowhere.jsonl" in out
    assert "orphaned" not in out
    assert run_cli("check", str(suite), "-j", "1").returncode == 2  # check: the same verdicts


# The property: a trace reached through a link gets the verdict a copy of the file it leads
# to gets in the link's place, over generated suites of links (beside their target, out of
# the suite, in a chain, gzipped, to a folder) and goldens (matching, another's, none).
_LINKS = ("file", "beside", "outside", "chain", "gz", "folder")


def _linked_suite(root: Path, entries: list[tuple[str, str, str]], copies: bool) -> Path:
    import gzip

    suite, elsewhere = root / "suite", root / "recordings"
    (suite / "golden").mkdir(parents=True)
    elsewhere.mkdir()
    for i, (kind, stem, golden) in enumerate(entries):
        name = f"t{i}.jsonl.gz" if kind == "gz" else f"t{i}.jsonl"
        data = (TRACES / f"{_STEMS[stem]}.jsonl").read_bytes()
        data = gzip.compress(data, mtime=0) if kind == "gz" else data
        folder = suite / f"d{i}" if kind == "folder" else suite
        names = [name, f"base{i}.jsonl"] if kind == "beside" else [name]
        if kind == "folder":
            (elsewhere / f"d{i}" / "golden").mkdir(parents=True)
            (elsewhere / f"d{i}" / name).write_bytes(data)
            if copies:
                shutil.copytree(elsewhere / f"d{i}", folder)
            else:
                folder.symlink_to(elsewhere / f"d{i}")
        elif kind == "file" or copies:
            for each in names:
                (suite / each).write_bytes(data)
        elif kind == "beside":
            (suite / names[1]).write_bytes(data)
            (suite / name).symlink_to(names[1])
        else:
            (elsewhere / name).write_bytes(data)
            if kind == "chain":
                (elsewhere / f"via-{name}").symlink_to(name)
            (suite / name).symlink_to(elsewhere / (f"via-{name}" if kind == "chain" else name))
        source = {"match": _STEMS[stem], "other": _STEMS["b" if stem != "b" else "a"]}
        if golden in source:
            for each in names:
                stem_of = each.removesuffix(".gz").removesuffix(".jsonl")
                shutil.copy(
                    GOLDENS / f"{source[golden]}.dump.jsonl",
                    folder / "golden" / f"{stem_of}.dump.jsonl",
                )
    return suite


def test_a_linked_trace_gets_the_verdict_of_a_copy_in_its_place(tmp_path: Path) -> None:
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    entry = st.tuples(
        st.sampled_from(_LINKS),
        st.sampled_from(sorted(_STEMS)),
        st.sampled_from(["match", "other", "none"]),
    )

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(entry, min_size=1, max_size=4))
    def as_a_copy(entries: list[tuple[str, str, str]]) -> None:
        here = Path(tempfile.mkdtemp(dir=tmp_path))
        linked = _linked_suite(here / "L", entries, copies=False)
        copied = _linked_suite(here / "C", entries, copies=True)
        got, expected = verdicts(linked), verdicts(copied)
        assert got[0] == expected[0], entries
        said = orjson.dumps(expected[1])
        mirrored = said.replace(str(here / "C").encode(), str(here / "L").encode())
        assert got[1] == orjson.loads(mirrored), entries  # no orphan a copy would not have

    as_a_copy()


# --- check --staged judges the index, not the working tree -----------------------------------


def _staged(repo: Path, *options: str) -> subprocess.CompletedProcess[bytes]:
    return run_cli("check", "--staged", "-j", "1", *options, cwd=repo)


def test_staged_checks_the_staged_copy_of_a_trace_not_the_working_trees(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    trace = repo / "traces" / "deferral-order.jsonl"
    right = trace.read_bytes()
    trace.write_bytes(_wrong_expect(right))
    _git(repo, "add", "traces/deferral-order.jsonl")
    trace.write_bytes(right)  # only the working tree's copy is right
    r = _staged(repo)
    assert r.returncode == 1, r.stderr
    assert r.stdout.startswith(b"FAIL       traces/deferral-order.jsonl  expect differs at step")
    assert b"--- traces/deferral-order.jsonl:" in r.stdout  # the repository's path, not a copy's
    assert b"reproduce: schedcli replay traces/deferral-order.jsonl --check" in r.stdout
    assert b"note: traces/deferral-order.jsonl is checked as staged" in r.stderr
    assert b"schedcli-staged" not in r.stdout + r.stderr
    # The other way round: a right staged trace passes whatever the working tree holds.
    _git(repo, "add", "traces/deferral-order.jsonl")
    fresh = repo / "traces" / "fresh.jsonl"
    shutil.copy(TRACES / "rotation-fairness.jsonl", fresh)
    shutil.copy(GOLDENS / "rotation-fairness.dump.jsonl", repo / "traces/golden/fresh.dump.jsonl")
    _git(repo, "add", "traces")
    fresh.write_bytes(_wrong_expect(fresh.read_bytes()))  # unstaged edits that would fail
    (repo / "traces" / "golden" / "fresh.dump.jsonl").unlink()
    r = _staged(repo)
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith(b"pass       traces/fresh.jsonl")


@pytest.mark.slow
def test_staged_untracking_a_golden_or_trace_is_a_deletion_and_untracked_files_do_not_count(
    tmp_path: Path,
) -> None:
    repo = _repository(tmp_path)
    _git(repo, "rm", "-q", "--cached", "traces/golden/deferral-order.dump.jsonl")  # still on disk
    r = _staged(repo)
    assert r.returncode == 1 and b"FAIL       traces/deferral-order.jsonl" in r.stdout
    assert b"no golden" in r.stdout
    _git(repo, "reset", "-q")
    _git(repo, "rm", "-q", "--cached", "traces/deferral-order.jsonl")
    r = _staged(repo)
    assert r.returncode == 1 and b"orphaned   traces/golden/deferral-order.dump.jsonl" in r.stdout
    _git(repo, "reset", "-q")
    # A golden staged for a trace left untracked: the commit holds a golden no trace claims.
    shutil.copy(TRACES / "clear-shutdown.jsonl", repo / "traces")
    shutil.copy(GOLDENS / "clear-shutdown.dump.jsonl", repo / "traces" / "golden")
    _git(repo, "add", "traces/golden/clear-shutdown.dump.jsonl")
    assert run_cli("check", "-j", "1", cwd=repo).returncode == 0  # the working tree passes
    r = _staged(repo)
    assert r.returncode == 1 and b"orphaned   traces/golden/clear-shutdown.dump.jsonl" in r.stdout
    # [tool.schedcli] as staged: strict = false in the working tree alone excuses nothing.
    project = repo / "pyproject.toml"
    project.write_text('[tool.schedcli]\ntraces = ["traces"]\nstrict = false\n')
    assert _staged(repo).returncode == 1
    _git(repo, "add", "pyproject.toml")
    r = _staged(repo)
    assert r.returncode == 0 and b"(not failing: --no-strict)" in r.stdout
    # --update would write the working tree, not the commit checked.
    r = _staged(repo, "--update")
    assert r.returncode == 2 and b"--update writes the working tree" in r.stderr


def test_staged_checks_a_staged_link_to_a_trace_and_what_a_link_leads_to(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    (repo / "recordings").mkdir()
    shutil.copy(TRACES / "rotation-fairness.jsonl", repo / "recordings" / "rf.jsonl")
    (repo / "traces" / "linked.jsonl").symlink_to("../recordings/rf.jsonl")
    shutil.copy(GOLDENS / "rotation-fairness.dump.jsonl", repo / "traces/golden/linked.dump.jsonl")
    (repo / "traces" / "broken.jsonl").symlink_to("nowhere.jsonl")
    _git(repo, "add", "-A")
    r = _staged(repo)
    assert r.returncode == 2, r.stdout
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("error      traces/broken.jsonl")
    assert "a link to nowhere.jsonl, which does not exist" in lines[0]
    assert lines[1].startswith("pass       traces/linked.jsonl")
    _git(repo, "rm", "-q", "--cached", "traces/broken.jsonl")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "links")
    # A change to what the link leads to checks the link, as staged.
    target = repo / "recordings" / "rf.jsonl"
    target.write_bytes(_wrong_expect(target.read_bytes()))
    _git(repo, "add", "recordings/rf.jsonl")
    target.write_bytes((TRACES / "rotation-fairness.jsonl").read_bytes())
    r = _staged(repo)
    assert r.returncode == 1 and r.stdout.startswith(b"FAIL       traces/linked.jsonl")


# The property: --staged on a repository gives, for each trace and golden it reports, what
# `check` gives on a checkout of the index (`git checkout-index -a`), and its exit code;
# over generated edits, staged and unstaged, of traces, goldens, links and the configuration.
_STEMS = {"a": "rotation-fairness", "b": "deferral-order", "c": "rejections"}
_EDITS = ("right", "wrong", "other", "delete", "untrack", "link", "config")


def _edit(repo: Path, edit: str, stem: str, golden: bool, staged: bool) -> None:
    original = _STEMS.get(stem, "rotation-fairness")
    other = _STEMS["b" if stem != "b" else "a"]
    if edit == "config":
        path = repo / "pyproject.toml"
        extra = {"a": "strict = false\n", "b": 'golden = "optional"\n'}.get(stem, "")
        path.write_text(f'[tool.schedcli]\ntraces = ["traces"]\n{extra}')
    elif golden:
        path = repo / "traces" / "golden" / f"{stem}.dump.jsonl"
        source = GOLDENS / f"{other if edit in ('wrong', 'other') else original}.dump.jsonl"
    else:
        path = repo / "traces" / f"{stem}.jsonl"
        source = TRACES / f"{other if edit == 'other' else original}.jsonl"
    rel = str(path.relative_to(repo))
    if edit == "untrack":
        _git(repo, "rm", "-q", "--cached", "--ignore-unmatch", rel)
        return
    if edit != "config":
        if path.is_symlink() or path.exists():
            path.unlink()
        if edit == "link":
            to = {"a": "b", "b": "new", "c": "a"}.get(stem, "c")  # new: often not there
            path.symlink_to(f"{to}{''.join(path.suffixes)}")
        elif edit == "wrong" and not golden:
            path.write_bytes(_wrong_expect((TRACES / "rotation-fairness.jsonl").read_bytes()))
        elif edit != "delete":
            path.write_bytes(source.read_bytes())
    if staged:
        _git(repo, "update-index", "--add", "--remove", "--", rel)  # as `git add -A` would


def _json_check(where: Path, *options: str) -> tuple[int, dict[str, dict[str, object]], bytes]:
    import contextlib

    from tests.helpers import run_in_process

    with contextlib.chdir(where):
        r = run_in_process("check", "-f", "json", "-j", "1", *options)
    records = [orjson.loads(line) for line in r.stdout.splitlines()]
    return r.returncode, {str(x["trace"] or x["golden"]): x for x in records}, r.stderr


@pytest.mark.slow
def test_staged_gives_the_verdicts_of_check_on_a_checkout_of_the_index(tmp_path: Path) -> None:
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = tmp_path / "base" / "repo"
    (base / "traces" / "golden").mkdir(parents=True)
    for stem, name in _STEMS.items():
        shutil.copy(TRACES / f"{name}.jsonl", base / "traces" / f"{stem}.jsonl")
        shutil.copy(GOLDENS / f"{name}.dump.jsonl", base / "traces/golden" / f"{stem}.dump.jsonl")
    (base / "pyproject.toml").write_text('[tool.schedcli]\ntraces = ["traces"]\n')
    _git(base, "init", "-q")
    _git(base, "add", "-A")
    _git(base, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "suite")
    edits = st.tuples(
        st.sampled_from(_EDITS),
        st.sampled_from(["a", "b", "c", "new"]),
        st.booleans(),  # the golden, else the trace
        st.booleans(),  # staged, else left in the working tree
    )

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(edits, min_size=1, max_size=4))
    def staged_is_the_checkout(steps: list[tuple[str, str, bool, bool]]) -> None:
        here = Path(tempfile.mkdtemp(dir=tmp_path))
        repo, copy = here / "repo", here / "copy"  # one length: rich wraps both alike
        shutil.copytree(base, repo, symlinks=True)
        for step in steps:
            _edit(repo, *step)
        _git(repo, "checkout-index", "-a", f"--prefix={copy}/")
        code, staged, said = _json_check(repo, "--staged")
        if not staged and code == 0:  # nothing the commit touches to check
            assert b"touches no trace or golden" in said
            assert _json_check(copy)[0] == 0
            return
        clone_code, clone, _ = _json_check(copy)
        assert code == clone_code, (steps, staged, clone)
        if code == 2 and not staged:
            return  # a suite neither could read (no traces left): the same refusal
        same = orjson.dumps(clone).replace(str(copy).encode(), str(repo).encode())
        mirrored: dict[str, dict[str, object]] = orjson.loads(same)
        for key, record in staged.items():
            assert mirrored.get(key) == record, (steps, key)
        failing = {k for k, v in mirrored.items() if v["status"] != "pass"}
        assert failing <= set(staged), (steps, failing)

    staged_is_the_checkout()


def _suite(root: Path, *names: str) -> Path:
    """Example traces with their goldens in ROOT/suite."""
    suite = root / "suite"
    (suite / "golden").mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(TRACES / f"{name}.jsonl", suite)
        shutil.copy(GOLDENS / f"{name}.dump.jsonl", suite / "golden")
    return suite


def _build(root: Path, spec: dict[str, object]) -> None:
    suite = root / "suite"
    (suite / "golden").mkdir(parents=True)
    goldens: dict[str, str] = spec["goldens"]  # type: ignore[assignment]
    for name, state in goldens.items():
        shutil.copy(TRACES / f"{name}.jsonl", suite)
        golden = suite / "golden" / f"{name}.dump.jsonl"
        if state == "right":
            shutil.copy(GOLDENS / f"{name}.dump.jsonl", golden)
        elif state == "off":
            lines = (GOLDENS / f"{name}.dump.jsonl").read_bytes().splitlines(keepends=True)
            golden.write_bytes(b"".join(lines[1:]))  # its first step lost
    for i in range(spec["orphans"]):  # type: ignore[call-overload]
        shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / f"ghost{i}.dump.jsonl")
    if spec["twin"]:
        first = next(iter(goldens))
        shutil.copy(TRACES / f"{first}.jsonl", suite / f"{first}.jsonl.gz")
    section = ['traces = ["suite"]']
    if spec["strict"] is not None:
        section.append(f"strict = {str(spec['strict']).lower()}")
    if spec["golden"]:
        section.append(f'golden = "{spec["golden"]}"')
    if spec["allow_unchecked"]:
        section.append("allow-unchecked = true")
    text = "[tool.schedcli]\n" + "\n".join(section) + "\n"
    if spec["override"]:
        text += '[tool.schedcli.folders."suite"]\npolicy = "fcfs"\n'
    (root / "pyproject.toml").write_text(text)


NAMES = ("rotation-fairness", "deferral-order", "clear-shutdown", "long-prompts-and-chat")


@st.composite
def suites(draw: st.DrawFn) -> dict[str, object]:
    """A suite: which examples, each golden right, off or missing, orphans, a twin that
    claims another's golden, and the configuration's rules."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    return {
        "goldens": {n: draw(st.sampled_from(["right", "off", "missing"])) for n in names},
        "orphans": draw(st.integers(0, 2)),
        "twin": draw(st.booleans()) and draw(st.booleans()),
        "strict": draw(st.sampled_from([None, True, False])),
        "golden": draw(st.sampled_from([None, "optional"])),
        "allow_unchecked": draw(st.booleans()),
        "override": draw(st.booleans()),
    }


@pytest.mark.slow
def test_check_walks_a_folder_a_thousand_levels_deep(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    levels = [folder]
    for _ in range(1100):  # past the interpreter's recursion limit; one level at a time
        levels.append(levels[-1] / "d")
    for level in levels:
        level.mkdir()
    shutil.copy(TRACES / "rotation-fairness.jsonl", levels[-1])
    try:
        r = run_cli("check", str(folder), "-j", "1", "--allow-missing-golden")
        assert r.returncode == 0, r.stderr
    finally:  # removed bottom up: pytest's own clean-up would recurse past the limit
        (levels[-1] / "rotation-fairness.jsonl").unlink()
        for level in reversed(levels):
            level.rmdir()


def test_the_junit_report_is_well_formed_whatever_the_names(tmp_path: Path) -> None:
    suite = tmp_path / "s"
    suite.mkdir()
    for name in ("ctl\x01\x1b.jsonl", "nul\x7f.jsonl", "bad-\udcff.jsonl".encode(
        "utf-8", "surrogateescape").decode("utf-8", "surrogateescape")):  # fmt: skip
        try:
            shutil.copy(TRACES / "rotation-fairness.jsonl", suite / name)
        except UnicodeEncodeError:
            continue
    report = tmp_path / "r.xml"
    allowed = ("-j", "1", "--allow-missing-golden")
    r = run_cli("check", str(suite), *allowed, "--junit-xml", str(report))
    assert r.returncode == 0, r.stdout
    cases = list(ET.parse(report).getroot().iter("testcase"))
    assert len(cases) >= 2
    json_run = run_cli("check", str(suite), "-j", "1", "--allow-missing-golden", "-f", "json")
    for line in json_run.stdout.splitlines():
        orjson.loads(line)


def test_check_never_starts_more_workers_than_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedcli.engine.check import runner as checking

    started: list[int] = []

    def answers(fn: object, jobs: object, workers: int, setup: object = None) -> None:
        started.append(workers)
        raise SystemExit(0)

    monkeypatch.setattr(checking, "answers", answers)
    suite = tmp_path / "s"
    suite.mkdir()
    for i in range(8):
        shutil.copy(TRACES / "rotation-fairness.jsonl", suite / f"t{i}.jsonl")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    r = run_cli("check", str(suite), "-j", "1024", "--allow-missing-golden")
    assert started == [2], (started, r.stderr)
    assert b"--jobs 1024: checking on the 2 cores" in r.stderr
    assert checking  # imported for the monkeypatch's sake


def test_links_to_the_folder_itself_neither_hang_nor_count_twice(tmp_path: Path) -> None:
    suite = tmp_path / "s"
    suite.mkdir()
    shutil.copy(TRACES / "rotation-fairness.jsonl", suite)
    (suite / "a").symlink_to(".")
    (suite / "b").symlink_to(".")
    r = run_cli("check", str(suite), "-j", "1", "--allow-missing-golden")
    assert r.returncode == 0 and r.stdout.decode().splitlines()[-1].startswith("1 trace:")


def test_check_the_plugin_and_report_take_request_level_traces(
    tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        "".join(
            json.dumps({"sid": i, "arrival": i / 10, "prompt_tokens": 20 + i, "output_tokens": 3})
            + "\n"
            for i in range(4)
        )
    )
    suite = pytester.path / "suite"
    suite.mkdir()
    trace = suite / "t.jsonl"
    simulated = run_cli("simulate", str(workload), "-p", TOY, "-o", str(trace), "-f", "json")
    assert simulated.returncode == 0
    assert run_cli("replay", str(trace), "--check", "-o", os.devnull).returncode == 0
    assert run_cli("check", str(suite), "--update", "-j", "1").returncode == 0
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 0 and b"golden: " in r.stdout
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # where the toy policy is
    # In a process of its own the toy has no name a header may give: its folder names it.
    (pytester.path / "pyproject.toml").write_text(
        f'[tool.schedcli.folders."suite"]\npolicy = "{TOY}"\n'
    )
    pytester.runpytest_subprocess("--schedcli=suite").assert_outcomes(passed=1)
    assert run_cli("report", str(trace), "-o", str(tmp_path / "r.html")).returncode == 0


def test_check_update_refuses_a_golden_that_is_a_trace(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    golden = suite / "golden" / "rotation-fairness.dump.jsonl"
    golden.unlink()
    golden.symlink_to(suite / "rotation-fairness.jsonl")
    before = (suite / "rotation-fairness.jsonl").read_bytes()
    r = run_cli("check", str(suite), "--update", "-j", "1")
    assert r.returncode == 2 and b"is the same file as trace" in r.stderr
    assert (suite / "rotation-fairness.jsonl").read_bytes() == before


def test_two_traces_claiming_one_golden_are_refused_naming_both(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    shutil.copy(suite / "rotation-fairness.jsonl", suite / "rotation-fairness.jsonl.gz")
    for options in ([], ["--update"]):
        r = run_cli("check", str(suite), "-j", "1", *options)
        err = r.stderr.decode()
        assert r.returncode == 2, err
        assert "rotation-fairness.jsonl and " in err and "rotation-fairness.jsonl.gz" in err
        assert "both claim the golden" in err
    plugin = pytester.runpytest_subprocess(f"--schedcli={suite}")
    assert plugin.ret == pytest.ExitCode.USAGE_ERROR
    assert "both claim the golden" in plugin.stderr.str()


def test_two_folders_claiming_one_golden_dir_are_refused(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(TRACES / "deferral-order.jsonl", tmp_path / folder / "x.jsonl")
    goldens = tmp_path / "goldens"
    r = run_cli("check", str(tmp_path / "a"), str(tmp_path / "b"), "--golden-dir", str(goldens))
    assert r.returncode == 2 and b"both claim the golden" in r.stderr
    assert b"a/x.jsonl" in r.stderr and b"b/x.jsonl" in r.stderr


def test_a_trace_without_a_golden_fails_unless_the_folder_opts_out(
    tmp_path: Path, cli: Cli
) -> None:
    suite = _suite(tmp_path, "rotation-fairness", "deferral-order")
    (suite / "golden" / "deferral-order.dump.jsonl").unlink()  # the trace has expects too
    r = cli("check", "suite", "-j", "1", "-f", "json", cwd=tmp_path)
    assert r.code == 1
    found = {orjson.loads(x)["trace"]: orjson.loads(x) for x in r.lines}
    missing = found["suite/deferral-order.jsonl"]
    assert (missing["status"], missing["coverage"]) == ("fail", "checked 2 of 2 batches; no golden")
    assert missing["command"] == "schedcli check --update suite/deferral-order.jsonl"
    assert cli("check", "suite", "-j", "1", "--allow-missing-golden", cwd=tmp_path).code == 0
    (tmp_path / "pyproject.toml").write_text('[tool.schedcli]\ngolden = "optional"\n')
    assert cli("check", "suite", "-j", "1", cwd=tmp_path).code == 0
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli.folders."suite"]\ngolden = "optional"\n'
    )
    assert cli("check", "suite", "-j", "1", cwd=tmp_path).code == 0


def test_renaming_a_trace_orphans_its_golden_and_fails(tmp_path: Path, cli: Cli) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    (suite / "rotation-fairness.jsonl").rename(suite / "renamed.jsonl")
    r = cli("check", "suite", "-j", "1", cwd=tmp_path)
    assert r.code == 1
    out = r.stdout.decode()
    assert "orphaned   suite/golden/rotation-fairness.dump.jsonl" in out
    assert "FAIL       suite/renamed.jsonl" in out
    (tmp_path / "pyproject.toml").write_text("[tool.schedcli]\nstrict = false\n")
    r = cli("check", "suite", "-j", "1", "--allow-missing-golden", cwd=tmp_path)
    assert r.code == 0 and "(not failing: --no-strict)" in r.stdout.decode()


def test_a_symlink_loop_is_noted_and_never_counted(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "rotation-fairness", "deferral-order")
    (suite / "loop").symlink_to("..")
    (suite / "again").symlink_to(suite)
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 0, r.stdout
    assert r.stdout.decode().splitlines()[-1].startswith("2 traces: 2 passed")
    assert r.stderr.decode().count("(a loop): not followed") == 2


def test_a_folder_linked_twice_is_searched_once(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    (tmp_path / "link").symlink_to(suite)
    r = run_cli("check", str(suite), str(tmp_path / "link"), "-j", "1")
    assert r.returncode == 0 and r.stdout.decode().splitlines()[-1].startswith("1 trace: 1 passed")


def test_a_configured_folder_that_does_not_exist_is_refused(tmp_path: Path, cli: Cli) -> None:
    _suite(tmp_path, "rotation-fairness")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli]\ntraces = ["suite"]\n[tool.schedcli.folders."nonexist"]\npolicy = "fcfs"\n'
    )
    r = cli("check", cwd=tmp_path)
    assert r.code == 2 and 'folders."nonexist": no such folder' in r.stderr


def test_an_empty_folder_listed_in_traces_is_refused(tmp_path: Path, cli: Cli) -> None:
    _suite(tmp_path, "rotation-fairness")
    (tmp_path / "empty").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.schedcli]\ntraces = ["suite", "empty"]\n')
    r = cli("check", cwd=tmp_path)
    assert r.code == 2 and "empty: no traces" in r.stderr


def test_check_has_allow_incomplete_and_update_repairs_a_truncated_golden(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    golden = suite / "golden" / "rotation-fairness.dump.jsonl"
    golden.write_bytes(b"".join(golden.read_bytes().splitlines(keepends=True)[:3]))  # cut short
    r = run_cli("check", str(suite), "-j", "1")
    assert r.returncode == 2 and b"--allow-incomplete" in r.stdout
    assert run_cli("check", str(suite), "-j", "1", "--allow-incomplete").returncode == 1
    r = run_cli("check", str(suite), "-j", "1", "--update")
    assert r.returncode == 0 and b"in place of one that could not be read" in r.stdout
    assert golden.read_bytes() == (GOLDENS / "rotation-fairness.dump.jsonl").read_bytes()


def test_pytest_schedcli_runs_the_traces_alone_where_testpaths_are_set(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester.path, "rotation-fairness")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    pytester.runpytest_subprocess("--schedcli", "suite").assert_outcomes(passed=1)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)  # the plain run: its tests


def test_pytest_schedcli_of_an_empty_folder_says_so(pytester: pytest.Pytester) -> None:
    (pytester.path / "empty").mkdir()
    r = pytester.runpytest_subprocess("--schedcli=empty")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "no traces" in r.stderr.str()


def test_check_of_stdin_says_it_reads_files() -> None:
    r = run_cli("check", "-")
    assert r.returncode == 2 and b"not standard input" in r.stderr


def test_every_check_failure_prints_the_command_that_reproduces_it(
    tmp_path: Path, cli: Cli
) -> None:
    _suite(tmp_path, "rotation-fairness", "deferral-order")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.schedcli.folders."suite"]\npolicy = "fcfs"\nparams = { max_batch_tokens = 8 }\n'
    )
    r = cli("check", "suite", "-j", "1", "-f", "json", cwd=tmp_path)
    assert r.code == 1
    commands = [orjson.loads(x)["command"] for x in r.lines]
    assert all(c and "-p fcfs -P max_batch_tokens=8" in c for c in commands), commands
    for command in commands:  # each, run as printed from the root, fails the same way
        words = command.split()[1:]
        again = cli(*words, cwd=tmp_path)
        assert again.code == 1, (command, again.stderr)
    assert all(orjson.loads(x)["golden"] for x in r.lines)  # shown for expect failures too


def test_check_paths_are_relative_to_the_root_and_orphans_are_annotated(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = _suite(tmp_path, "rotation-fairness")
    shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / "ghost.dump.jsonl")
    (tmp_path / "pyproject.toml").write_text('[tool.schedcli]\ntraces = ["suite"]\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    report = tmp_path / "junit.xml"
    r = cli("check", "--junit-xml", str(report), "-j", "1", cwd=tmp_path / "sub")
    assert r.code == 1
    assert "pass       suite/rotation-fairness.jsonl" in r.stdout.decode()
    assert "::error file=suite/golden/ghost.dump.jsonl," in r.stderr
    xml = report.read_text()
    assert 'classname="suite"' in xml and 'classname="suite/golden"' in xml


def test_checks_summary_is_said_once_on_a_terminal(tmp_path: Path) -> None:
    import pty

    _suite(tmp_path, "rotation-fairness")
    (tmp_path / "suite" / "golden" / "rotation-fairness.dump.jsonl").unlink()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedcli", "check", "suite", "-j", "1"],
        stdout=follower, stderr=follower, cwd=tmp_path,
    )  # fmt: skip
    os.close(follower)
    said = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        said += chunk
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == 1
    assert said.count(b"1 trace: 0 passed, 1 failed") == 1, said.decode()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_check_with_the_default_options(example: Path) -> None:
    r = run_cli("check", str(example), "-j", "1")
    assert r.returncode == 0, r.stdout


def test_the_plugin_fails_an_orphaned_golden_as_check_does_under_strict(
    pytester: pytest.Pytester,
) -> None:
    suite = _suite(pytester.path, "rotation-fairness")
    shutil.copy(GOLDENS / "rejections.dump.jsonl", suite / "golden" / "ghost.dump.jsonl")
    pytester.makepyprojecttoml(
        '[tool.schedcli]\ntraces = ["suite"]\nstrict = true\npytest = true\n'
    )
    assert run_cli("check", str(suite)).returncode == 1
    pytester.runpytest_subprocess().assert_outcomes(passed=1, failed=1)  # plain pytest
    pytester.runpytest_subprocess("--schedcli").assert_outcomes(passed=1, failed=1)
    pytester.makepyprojecttoml('[tool.schedcli]\ntraces = ["suite"]\nstrict = false\n')
    pytester.runpytest_subprocess("--schedcli").assert_outcomes(passed=1, skipped=1)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=suites())
def test_check_and_the_pytest_plugin_give_the_same_verdicts(
    pytester: pytest.Pytester, spec: dict[str, object]
) -> None:
    root = pytester.mkdir(f"s{len(list(pytester.path.iterdir()))}")
    _build(root, spec)
    checked = run_process("check", "-f", "json", "-j", "1", cwd=root)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(root), "-c", str(root / "pyproject.toml"), "--schedcli"],
        cwd=root, capture_output=True, timeout=300,
    )  # fmt: skip
    if checked.returncode == 2:  # a suite check refuses, the plugin refuses as usage
        assert ran.returncode == pytest.ExitCode.USAGE_ERROR, ran.stdout
        return
    verdicts = {}
    for line in checked.stdout.splitlines():
        v = orjson.loads(line)
        name = Path(v["trace"] or v["golden"]).name
        status = v["status"]
        allowed = spec["allow_unchecked"] if status == "unchecked" else spec["strict"] is False
        verdicts[name] = (
            "passed"
            if status == "pass"
            else ("skipped" if status in ("unchecked", "orphaned") and allowed else "failed")
        )
    said = ran.stdout.decode()
    outcomes = {}
    for line in said.splitlines():  # -v: "suite/NAME.jsonl::check PASSED [ 50%]"
        words = line.split()
        if len(words) >= 2 and "::" in words[0] and words[1] in ("PASSED", "FAILED", "SKIPPED"):
            outcomes[Path(words[0].split("::")[0]).name] = words[1].lower()
    assert outcomes == verdicts, said
    assert (checked.returncode == 0) == (ran.returncode == 0)
