"""engine/check/trace.py: one trace's check as data (a Verdict of facts), without the
command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from schedcli.engine.check.trace import (
    BROKEN,
    FAIL,
    PASS,
    UNCHECKED,
    Job,
    check_job,
    vanished,
)
from schedcli.engine.pool import Vanished

TRACES = Path(__file__).resolve().parents[3] / "traces"
TRACE = "rotation-fairness"


def _copy(tmp_path: Path, golden: bool = True) -> tuple[Path, Path]:
    trace = tmp_path / f"{TRACE}.jsonl"
    shutil.copy(TRACES / trace.name, trace)
    (tmp_path / "golden").mkdir()
    path = tmp_path / "golden" / f"{TRACE}.dump.jsonl"
    if golden:
        shutil.copy(TRACES / "golden" / path.name, path)
    return trace, path


def _job(trace: Path, golden: Path, update: bool = False, dry_run: bool = False) -> Job:
    return Job(str(trace), str(golden), None, {}, update, dry_run)


def test_a_trace_matching_its_golden_passes_with_what_was_compared(tmp_path: Path) -> None:
    trace, golden = _copy(tmp_path)
    verdict = check_job(_job(trace, golden))
    assert verdict.status == PASS and verdict.golden == str(golden)
    assert verdict.compared is not None and verdict.compared.same
    assert verdict.compared.steps == 6 and verdict.compared.first_step is None
    assert verdict.expects and verdict.checked == "checked 6 of 6 batches"
    assert (verdict.error, verdict.diff, verdict.updated) == (None, None, None)


def test_a_golden_missing_a_task_fails_at_its_step_with_the_difference_and_reasons(
    tmp_path: Path,
) -> None:
    trace, golden = _copy(tmp_path)
    records = [json.loads(line) for line in golden.read_text().splitlines()]
    first = next(r for r in records if r.get("batch"))
    first["batch"] = first["batch"][:-1]  # the golden dispatched one task fewer
    golden.write_text("".join(json.dumps(r) + "\n" for r in records))
    verdict = check_job(_job(trace, golden))
    assert verdict.status == FAIL and verdict.exit_code == 0
    assert verdict.compared is not None and not verdict.compared.same
    assert verdict.compared.steps_differing >= 1
    assert verdict.compared.first_step == first["step"]
    assert verdict.diff is not None and verdict.diff.first is not None
    assert verdict.line is not None  # the trace line being replayed when it differed


def test_no_golden_where_one_is_required_fails_for_want_of_it(tmp_path: Path) -> None:
    trace, golden = _copy(tmp_path, golden=False)
    verdict = check_job(_job(trace, golden))
    assert verdict.status == FAIL and verdict.no_golden and verdict.golden is None
    optional = Job(str(trace), str(golden), None, {}, False, False, golden_required=False)
    assert check_job(optional).status == PASS  # its expects still checked


def test_update_writes_a_new_golden_the_next_check_passes_and_dry_run_writes_nothing(
    tmp_path: Path,
) -> None:
    trace, golden = _copy(tmp_path, golden=False)
    dry = check_job(_job(trace, golden, update=True, dry_run=True))
    assert dry.updated is not None and dry.updated.dry_run and dry.updated.steps == 6
    assert not golden.exists() and list(golden.parent.iterdir()) == []
    written = check_job(_job(trace, golden, update=True))
    assert written.status == PASS and written.golden == str(golden)
    assert written.updated is not None and written.updated.steps == 6
    assert golden.read_bytes() == (TRACES / "golden" / golden.name).read_bytes()
    assert check_job(_job(trace, golden)).status == PASS


def test_a_trace_with_nothing_to_check_is_unchecked(tmp_path: Path) -> None:
    trace = tmp_path / "bare.jsonl"
    trace.write_text('{"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4}\n'
                     '{"op": "get_work"}\n')  # fmt: skip
    verdict = check_job(Job(str(trace), None, None, {}, False, False))
    assert verdict.status == UNCHECKED and verdict.checked is None


def test_bad_input_is_an_error_verdict_with_its_exit_code_not_an_exception(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "broken.jsonl"
    trace.write_text('{"op": "submit", "tid": 1}\n')
    verdict = check_job(Job(str(trace), None, None, {}, False, False))
    assert verdict.status == "error" and verdict.exit_code == 2
    assert verdict.error is not None and verdict.line == 1


def test_a_job_whose_process_ended_is_a_contract_break() -> None:
    job = Job("t.jsonl", None, None, {}, False, False)
    verdict = vanished(job, Vanished(-9))
    assert (verdict.status, verdict.exit_code, verdict.ended) == (BROKEN, 3, Vanished(-9))
