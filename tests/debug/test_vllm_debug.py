"""The debugger over vLLM's own scheduler, forked at checkpoints with vLLM (and torch)
loaded: the KV deadlock example shows its stuck request and vLLM's reason, and the index
ends where replay says the contract broke. Skipped without the extra, except under CI."""

from __future__ import annotations

import pytest

from schedcli.engine.explain import explain_step
from schedcli.engine.travel import Travel
from tests.conftest import Cli
from tests.helpers import ROOT

pytestmark = pytest.mark.needs("vllm")

DEADLOCK = ROOT / "docs/examples/vllm-kv-deadlock/deadlock.jsonl"


def test_the_kv_deadlock_shows_the_stuck_request_and_vllm_s_reason(cli: Cli) -> None:
    replayed = cli("replay", DEADLOCK, "-f", "jsonl")
    assert replayed.code == 3
    with Travel(str(DEADLOCK), every=1) as travel:
        assert travel.wait("indexed", 600)
        ending = travel.indexed["ending"]
        assert ending["broke"] and ending["message"] in replayed.stderr
        for step in travel.numbers:
            (held,) = travel.view(step)["queues"][0]
            want = explain_step(str(DEADLOCK), step).to_json()
            assert [q["tid"] for q in want["queue"]] == [held["tid"]] == ["r4"]
            assert (held["reason"], held["detail"]) == (
                want["left"][0]["reason"],
                want["left"][0]["detail"],
            )
            assert held["reason"] == "kv_blocks"


def test_over_a_worker_s_vllm_the_debugger_answers_as_in_process_replaying_not_forking(
    cli: Cli,
) -> None:
    # vllm@PYTHON's scheduler lives in its worker: a fork would share it, so no checkpoints.
    import sys

    from schedcli.engine.travel.verdict import judge

    remote = f"vllm@{sys.executable}"
    answers = []
    for policy in ("vllm", remote):
        with Travel(str(DEADLOCK), policy=policy, every=1) as travel:
            assert travel.wait("indexed", 600), travel.failed
            assert travel.hello["checkpoints"] is (policy == "vllm")
            ending = travel.indexed["ending"]
            views = [travel.view(step) for step in travel.numbers]
            answers.append((ending["exit"], views, ending["message"]))
    (code, views, said), (remote_code, remote_views, remote_said) = answers
    assert code == remote_code == 3 and views == remote_views
    assert said.replace("'vllm'", repr(remote)) == remote_said
    verdicts = [judge(str(DEADLOCK), policy=policy) for policy in ("vllm", remote)]
    assert verdicts[0].exit == verdicts[1].exit == 3
