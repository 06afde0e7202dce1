"""engine/check/suite.py: a suite as found on disk, each trace with its golden, and the
goldens no trace claims."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from schedcli.engine.check.suite import find_suite, golden_of
from schedcli.model.errors import UsageError

TRACES = Path(__file__).resolve().parents[3] / "traces"


def test_each_trace_has_its_golden_beside_it_and_an_unclaimed_golden_is_an_orphan(
    tmp_path: Path,
) -> None:
    shutil.copytree(TRACES, tmp_path / "s")
    (tmp_path / "s" / "golden" / "gone.dump.jsonl").write_text("")
    suite = find_suite([str(tmp_path / "s")], None)
    names = [Path(t).name for t, _ in suite.traces]
    assert names == sorted(p.name for p in TRACES.glob("*.jsonl"))
    assert all(g == str(golden_of(Path(t), None)) for t, g in suite.traces)
    assert suite.orphans == [str(tmp_path / "s" / "golden" / "gone.dump.jsonl")]


def test_a_golden_given_by_name_stands_for_its_trace(tmp_path: Path) -> None:
    shutil.copytree(TRACES, tmp_path / "s")
    golden = tmp_path / "s" / "golden" / "rejections.dump.jsonl"
    suite = find_suite([str(golden)], None)
    assert suite.traces == [(str(tmp_path / "s" / "rejections.jsonl"), str(golden))]


def test_a_folder_with_no_traces_is_a_usage_error_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="nothing to check"):
        find_suite([str(tmp_path)], None)
    assert find_suite([str(tmp_path)], None, require_traces=False).traces == []
