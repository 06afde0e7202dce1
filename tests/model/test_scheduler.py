"""model/scheduler.py: a policy's parameters (Param), checked wherever they are given."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import TRACES, run_cli


def test_a_parameter_of_1e30_is_refused_naming_it(tmp_path: Path) -> None:
    trace = TRACES / "rotation-fairness.jsonl"
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
