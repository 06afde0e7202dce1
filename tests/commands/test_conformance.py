"""`schedcli conformance`, and the suite it checks: ExecuTorch's own scheduler tests as
traces, shipped in the package (runtimes/executorch/conformance/, conformance/executorch in
this repository), the contract cases for any scheduler, the DecodeFirst cases for its own."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tomllib
from pathlib import Path

import orjson
import pytest

from schedcli.runtimes.executorch import conformance_dir
from tests.helpers import ROOT, run_cli

SUITE = Path(conformance_dir())
PARTS = ("contract", "decode-first")
BUILT_INS = ("decode-first", "fcfs", "prefill-first", "priority", "sjf", "fair")
# ExecuTorch's groups of cases; Concurrency's are threads, not traces (the README says where).
GROUPS = {
    "Create",
    "Classification",
    "Submit",
    "Payload",
    "Decode",
    "Prefill",
    "BatchComposition",
    "Cancel",
    "Clear",
    "HasWork",
    "Invariant",
}


def traces(part: str) -> dict[str, dict[str, object]]:
    """Each trace of a part by name, with its header."""
    return {
        path.name.removesuffix(".jsonl"): orjson.loads(path.read_bytes().splitlines()[0])
        for path in sorted((SUITE / part).glob("*.jsonl"))
    }


def all_passed(out: bytes, count: int) -> bool:
    """check's summary says every one of ``count`` traces passed."""
    said = out.decode().rstrip().splitlines()[-1]
    return said == (
        f"{count} traces: {count} passed, 0 failed, 0 broke the Scheduler contract, "
        "0 unchecked, 0 could not be read"
    )


def json_verdicts(out: bytes) -> dict[str, str]:
    """trace name -> status, from check's -f json."""
    records = [orjson.loads(line) for line in out.splitlines()]
    return {Path(r["trace"]).name.removesuffix(".jsonl"): r["status"] for r in records}


@pytest.fixture
def in_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # its pyproject.toml: goldens are optional for contract/


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project of the user's, outside this repository, whose [tool.schedcli] would fail
    the suite were it applied (goldens elsewhere, all required)."""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "mine"\n[tool.schedcli]\ngolden-dir = "goldens"\ngolden = "required"\n'
    )
    (tmp_path / "goldens").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the folder ------------------------------------------------------------------------------


def test_the_repositorys_conformance_folder_is_the_suite_the_package_ships() -> None:
    assert (ROOT / "conformance" / "executorch").resolve() == SUITE.resolve()
    assert sorted(p.name for p in SUITE.iterdir() if p.is_dir()) == sorted(PARTS)


def test_every_file_of_the_suite_is_package_data_so_a_wheel_carries_it() -> None:
    # setuptools takes package data by these globs, from the package's folder.
    package = ROOT / "schedcli"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["schedcli"]
    shipped = {p for pattern in patterns for p in package.glob(pattern) if p.is_file()}
    files = {p for p in SUITE.rglob("*") if p.is_file()}
    assert files and files <= shipped, sorted(map(str, files - shipped))


def test_the_readme_lists_exactly_the_traces_present_with_their_groups() -> None:
    readme = (SUITE / "README.md").read_text()
    listed_groups: set[str] = set()
    for part in PARTS:
        section = readme.split(f"### {part}/\n", 1)[1].split("\n#", 1)[0]
        rows = re.findall(r"^\| `([^`]+)` \| (\w+) \|", section, re.M)
        present = traces(part)
        assert [name for name, _ in rows] == list(dict.fromkeys(name for name, _ in rows))
        assert {name for name, _ in rows} == set(present), part
        for name, group in rows:
            meta = present[name]["meta"]
            assert isinstance(meta, dict) and meta["group"] == group, name
        listed_groups |= {group for _, group in rows}
    assert listed_groups == GROUPS
    not_traces = readme.split("## What is not a trace", 1)[1]
    assert "**Concurrency**" in not_traces and "**Create, the limits refused**" in not_traces


def test_contract_traces_name_no_policy_and_decode_first_traces_name_theirs() -> None:
    assert all("policy" not in header for header in traces("contract").values())
    assert {header.get("policy") for header in traces("decode-first").values()} == {"decode-first"}
    goldens = (SUITE / "decode-first" / "golden").iterdir()
    assert {p.name.removesuffix(".dump.jsonl") for p in goldens} == set(traces("decode-first"))
    assert not (SUITE / "contract" / "golden").exists()


# --- check of the folder, in this repository ------------------------------------------------


@pytest.mark.usefixtures("in_repository")
def test_check_of_the_conformance_folder_passes_under_the_headers_policies() -> None:
    r = run_cli("check", "conformance", "-j", "1")
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    count = len(traces("contract")) + len(traces("decode-first"))
    assert all_passed(r.stdout, count)


@pytest.mark.usefixtures("in_repository")
def test_decode_first_passes_as_the_reference_and_its_fixes_change_only_the_cases_marked() -> None:
    r = run_cli("check", "conformance", "-j", "1", "-p", "decode-first", "-P", "compat=reference")
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    fixed = run_cli("check", "conformance", "-j", "1", "-f", "json", "-P", "compat=fixed")
    assert fixed.returncode == 1
    failing = {name for name, status in json_verdicts(fixed.stdout).items() if status != "pass"}
    marked = {
        name
        for name, header in traces("decode-first").items()
        if isinstance(header.get("params"), dict) and header["params"].get("compat") == "reference"
    }
    assert marked and failing == marked


@pytest.mark.usefixtures("in_repository")
@pytest.mark.parametrize("policy", BUILT_INS)
def test_the_contract_cases_pass_under_every_built_in_policy(policy: str) -> None:
    r = run_cli("check", "conformance/executorch/contract", "-j", "1", "-p", policy)
    assert r.returncode == 0, r.stdout.decode()[-3000:]


# --- schedcli conformance: the shipped copy, from anywhere ------------------------------------


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize("policy", BUILT_INS)
def test_conformance_checks_the_contract_of_any_policy_with_one_command(policy: str) -> None:
    r = run_cli("conformance", "-p", policy, "-j", "1")
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    count = len(traces("contract"))
    assert all_passed(r.stdout, count)
    assert str(SUITE / "decode-first") not in r.stdout.decode()


@pytest.mark.usefixtures("elsewhere")
def test_conformance_checks_both_parts_with_the_suites_settings_not_the_projects() -> None:
    r = run_cli("conformance", "contract", "decode-first", "-j", "1", "-f", "json")
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    records = [orjson.loads(line) for line in r.stdout.splitlines()]
    assert len(records) == len(traces("contract")) + len(traces("decode-first"))
    with_golden = {Path(x["trace"]).parent.name for x in records if x["golden"]}
    assert with_golden == {"decode-first"}


@pytest.mark.usefixtures("elsewhere")
def test_a_third_partys_correct_scheduler_passes_the_contract() -> None:
    r = run_cli("conformance", "-p", "tests.plugin_policies:OnePerBatch", "-j", "1")
    assert r.returncode == 0, r.stdout.decode()[-3000:]


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize(
    ("broken", "code"),
    [("LosesTasks", 3), ("DoublesDispatch", 3), ("NewestFirst", 3), ("Forgets", 3)],
)
def test_a_broken_scheduler_fails_the_contract(broken: str, code: int) -> None:
    r = run_cli("conformance", "-p", f"tests.plugin_policies:{broken}", "-j", "1", "-f", "json")
    assert r.returncode == code, r.stderr.decode()
    statuses = json_verdicts(r.stdout)
    assert set(statuses) == set(traces("contract"))
    assert "broken" in statuses.values() and "error" not in statuses.values()
    failed = [orjson.loads(x) for x in r.stdout.splitlines() if b'"pass"' not in x]
    assert all(f"-p tests.plugin_policies:{broken}" in f["command"] for f in failed)


@pytest.mark.usefixtures("elsewhere")
def test_decode_first_cases_fail_a_policy_with_other_batches() -> None:
    r = run_cli("conformance", "decode-first", "-p", "fcfs", "-j", "1")
    assert r.returncode == 1
    assert "FAIL" in r.stdout.decode()


# --- ExecuTorch's C++, where a checkout is named ----------------------------------------------

# SCHEDCLI_TEST_EXECUTORCH=~/src/executorch pytest tests/commands/test_conformance.py
CHECKOUT = os.environ.get("SCHEDCLI_TEST_EXECUTORCH")


@pytest.mark.skipif(not CHECKOUT, reason="SCHEDCLI_TEST_EXECUTORCH not set")
@pytest.mark.skipif(not shutil.which("c++") and not shutil.which("g++"), reason="no compiler")
@pytest.mark.usefixtures("in_repository")
def test_executorchs_own_decode_first_passes_the_whole_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(tmp_path / "cxx"))
    checkout = str(Path(str(CHECKOUT)).expanduser())
    r = run_cli("check", "conformance", "-p", "cxx:decode-first", "--executorch", checkout)
    assert r.returncode == 0, r.stdout.decode()[-3000:] + r.stderr.decode()[-2000:]
    count = len(traces("contract")) + len(traces("decode-first"))
    assert all_passed(r.stdout, count)


# --- a C++ scheduler of our own, against the stand-in of every interface shape --------------

CPP = Path(__file__).resolve().parents[1] / "cpp"
FIFO = (
    f"cxx:{CPP / 'schedulers' / 'fifo_scheduler.h'}=schedcli_test::FifoScheduler::create("
    "max_batch_tokens=544, max_num_seqs=64, max_prefill_chunk_size=256)"
)
COMPILER = (
    shutil.which("g++") or shutil.which("clang++") or bool(os.environ.get("SCHEDCLI_REQUIRE_GXX"))
)


@pytest.mark.skipif(not COMPILER, reason="no C++ compiler here (CI installs g++ and clang)")
@pytest.mark.parametrize("shape", ["seed", "tid64", "later", "payload"])
def test_a_cpp_scheduler_passes_the_contract_under_every_interface_shape(
    shape: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract's cases cross the boundary as each shape has them: an opaque prompt as
    a stand-in PreparedInput under the payload shape, with no work before it."""
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(tmp_path_factory.getbasetemp() / "cxx"))
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CPP / shape / "executorch"))
    r = run_cli("conformance", "contract", "-p", FIFO, "-j", "1")
    assert r.returncode == 0, r.stdout.decode()[-3000:] + r.stderr.decode()[-2000:]
    assert all_passed(r.stdout, len(traces("contract")))


def crashing(how: int) -> str:
    """A C++ scheduler that breaks the contract at its second get_work, as ``how`` says
    (tests/cpp/schedulers/crashing_scheduler.h lists them)."""
    return (
        f"cxx:{CPP / 'schedulers' / 'crashing_scheduler.h'}=std::make_unique<"
        f"schedcli_test::CrashingScheduler>(crash_at=2, how={how})"
    )


@pytest.fixture
def checkout_given(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A checkout given with --executorch only: $EXECUTORCH_ROOT unset."""
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(tmp_path_factory.getbasetemp() / "cxx"))
    monkeypatch.delenv("EXECUTORCH_ROOT", raising=False)
    return str(CPP / "payload" / "executorch")


@pytest.mark.skipif(not COMPILER, reason="no C++ compiler here (CI installs g++ and clang)")
@pytest.mark.parametrize("how", [2, 11, 17], ids=["aborts", "ends-the-process", "changes-a-task"])
def test_a_scheduler_that_breaks_the_contract_is_said_to_have_broken_it_not_unreadable(
    how: int, checkout_given: str
) -> None:
    r = run_cli("conformance", "-p", crashing(how), "--executorch", checkout_given, "-j", "1")
    assert r.returncode == 3, r.stderr.decode()[-2000:]
    lines = r.stdout.decode().splitlines()
    broken = [line for line in lines if line.startswith("BROKEN ")]
    assert broken and not [line for line in lines if line.startswith("error ")]
    assert f" failed, {len(broken)} broke the Scheduler contract, " in lines[-1]
    assert lines[-1].endswith(", 0 could not be read")
    assert r.stdout.decode().count(": broke the Scheduler contract ---\nreproduce: ") == len(broken)


@pytest.mark.skipif(not COMPILER, reason="no C++ compiler here (CI installs g++ and clang)")
def test_a_failures_reproduce_command_repeats_the_checkout_and_parameters_it_ran_with(
    checkout_given: str,
) -> None:
    r = run_cli(
        "conformance", "-p", crashing(2), "-P", "crash_at=3", "--executorch", checkout_given,
        "-j", "1", "-f", "json",
    )  # fmt: skip
    assert r.returncode == 3
    records = [orjson.loads(line) for line in r.stdout.splitlines()]
    failing = [x for x in records if x["status"] != "pass"]
    assert {x["status"] for x in failing} == {"fail", "broken"}
    for record in failing:
        words = shlex.split(record["command"])
        checkout = Path(words[words.index("--executorch") + 1])  # shown from the root
        assert checkout.resolve() == Path(checkout_given).resolve()
        assert words[words.index("-P") + 1] == "crash_at=3"
    broken = next(x for x in failing if x["status"] == "broken")
    again = run_cli(*shlex.split(broken["command"])[1:])  # as printed, nothing else set
    assert again.returncode == 3, again.stderr.decode()
    assert broken["detail"] in again.stderr.decode()
