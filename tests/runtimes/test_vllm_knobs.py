"""Every knob of vLLM's scheduler (runtimes/vllm/vllm_build.py ``knobs``, policy.py): each
``SchedulerConfig``/``CacheConfig`` field the running vLLM takes is a ``-P`` parameter,
validated by vLLM's own classes, listed by ``schedcli policies``; the fields left out are
left out for a reason docs/policies.md gives.

The second path is bench/vllm_bare.py: a standalone loop over vLLM's ``Scheduler`` with the
knob set on vLLM's config directly, run under each interpreter (this one's vLLM in this
process; another release's, from SCHEDCLI_TEST_VLLM_PYTHONS, as a script).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.runtimes.vllm.vllm_build import NOT_KNOBS, RELEASE_KNOBS
from tests.conftest import Cli
from tests.helpers import ROOT
from tests.runtimes.bare_loop import answers, trace_steps

SMALL = {"max_num_batched_tokens": 256, "max_num_seqs": 8, "num_gpu_blocks": 64,
         "max_model_len": 1008}  # fmt: skip
COST = ["--cost-a", "1", "--cost-b", "0", "--cost-c", "0"]  # a step a second, as bare_case


def _requests(seed: int = 11, n: int = 24) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = [
        {
            "sid": i,
            "arrival": rng.choice([0, 0, 0, 1, 2, 3, 5, 8, 13]),
            "prompt_tokens": rng.randint(20, 300),
            "output_tokens": rng.randint(1, 30),
        }
        for i in range(n)
    ]
    return sorted(rows, key=lambda r: r["arrival"])


REQUESTS = _requests()

# Each knob, and the settings it is compared against (where it moves anything: the
# adaptive threshold only floors a threshold that is set).
KNOBS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "max_num_scheduled_tokens": ({}, {"max_num_scheduled_tokens": 100}),
    "watermark": ({}, {"watermark": 0.2}),
    "scheduler_reserve_full_isl": ({}, {"scheduler_reserve_full_isl": False}),
    "long_prefill_token_threshold_adaptive": (
        {"long_prefill_token_threshold": 16},
        {"long_prefill_token_threshold": 16, "long_prefill_token_threshold_adaptive": True},
    ),
}


def bare_case(knobs: dict[str, Any], cls: str | None = None) -> dict[str, Any]:
    """A case of the bare loop: SMALL and ``knobs`` (the rest at -p vllm's documented
    defaults, each knob set on the config class that has it), a step a second, and the
    ``MODULE:CLASS`` Scheduler subclass ``cls`` if given."""
    return {"params": SMALL | knobs, "cost": [1, 0, 0], "scheduler": cls}


def bare_steps(python: str | None, cases: list[dict[str, Any]],
               requests: list[dict[str, Any]] = REQUESTS) -> list[Any]:  # fmt: skip
    """Each case's steps under the bare loop (``{"refused": MESSAGE}`` for a case vLLM
    refuses): in this process (``python`` None), else run as a script by ``python``."""
    found = answers(python, [case | {"requests": requests} for case in cases])
    return [answer.get("steps", answer) for answer in found]


@functools.cache
def _bare_knobs(python: str | None) -> dict[str, tuple[Any, Any]]:
    """Each knob's (compared-against, with-knob) steps under ``python``'s bare loop, in
    one run of it."""
    cases = [bare_case(knobs) for pair in KNOBS.values() for knobs in pair]
    steps = bare_steps(python, cases)
    return {name: (steps[2 * i], steps[2 * i + 1]) for i, name in enumerate(KNOBS)}


def write_workload(folder: Path, requests: list[dict[str, Any]] = REQUESTS) -> Path:
    path = folder / "workload.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in requests))
    return path


def flags(params: dict[str, Any]) -> list[str]:
    text = {True: "true", False: "false"}
    return [f"-P{k}={text.get(v, v) if isinstance(v, bool) else v}" for k, v in params.items()]


def simulate(cli: Cli, workload: Path, policy: str, params: dict[str, Any]) -> Any:
    """``simulate`` with SMALL and ``params``: its result, and the steps it wrote."""
    trace = workload.with_name("sim.jsonl")
    trace.unlink(missing_ok=True)
    r = cli("simulate", workload, "-p", policy, *flags(SMALL | params), *COST, "-o", trace)
    return r, (trace_steps(trace) if r.code == 0 else None)


def simulated_steps(cli: Cli, workload: Path, policy: str, params: dict[str, Any]) -> list[Any]:
    r, steps = simulate(cli, workload, policy, params)
    assert r.code == 0, r.stderr
    found: list[Any] = steps
    return found


# --- a knob moves the batches as it moves vLLM's own ------------------------------------------


@pytest.mark.needs("vllm")
@pytest.mark.parametrize("knob", list(KNOBS))
def test_a_knob_moves_the_batches_as_it_moves_a_bare_loop_over_vllms_scheduler(
    cli: Cli, tmp_path: Path, knob: str
) -> None:
    before, after = _bare_knobs(None)[knob]
    assert before != after  # the knob moves vLLM's own batches here
    workload = write_workload(tmp_path)
    assert simulated_steps(cli, workload, "vllm", KNOBS[knob][1]) == after
    assert simulated_steps(cli, workload, "vllm", KNOBS[knob][0]) == before


@pytest.mark.parametrize("knob", list(KNOBS))
def test_a_knob_moves_another_releases_batches_as_it_moves_its_bare_loop(
    cli: Cli, tmp_path: Path, other_vllm: str, knob: str
) -> None:
    before, after = _bare_knobs(other_vllm)[knob]
    assert before != after
    workload = write_workload(tmp_path)
    policy = f"vllm@{other_vllm}"
    assert simulated_steps(cli, workload, policy, KNOBS[knob][1]) == after
    assert simulated_steps(cli, workload, policy, KNOBS[knob][0]) == before


_UNSET = -1


@pytest.mark.needs("vllm")
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    scheduled=st.sampled_from([_UNSET, 1, 17, 100, 255, 256, 4096]),
    active=st.sampled_from([_UNSET, 1, 3, 8, 9]),
    watermark=st.sampled_from([0.0, 0.05, 0.3, 0.95]),
    reserve=st.booleans(),
    threshold=st.sampled_from([0, 8, 64]),
    adaptive=st.booleans(),
    interval=st.sampled_from([1, 2]),
)
def test_any_knobs_schedule_as_vllm_configured_directly_or_are_refused_as_vllm_refuses(
    cli: Cli,
    tmp_path: Path,
    scheduled: int,
    active: int,
    watermark: float,
    reserve: bool,
    threshold: int,
    adaptive: bool,
    interval: int,
) -> None:
    """The second path to each verdict: the bare loop with the same fields set on vLLM's
    config (an unset one, -1 here, not set there); what vLLM refuses, both refuse."""
    knobs: dict[str, Any] = {
        "watermark": watermark,
        "scheduler_reserve_full_isl": reserve,
        "long_prefill_token_threshold": threshold,
        "long_prefill_token_threshold_adaptive": adaptive,
        "prefill_schedule_interval": interval,
    }
    given_here = knobs | {"max_num_scheduled_tokens": scheduled, "max_num_active_seqs": active}
    direct = knobs | {k: v for k, v in given_here.items() if v != _UNSET and k not in knobs}
    (held_out,) = bare_steps(None, [bare_case(direct)], REQUESTS[:10])
    workload = write_workload(tmp_path, REQUESTS[:10])
    r, ours = simulate(cli, workload, "vllm", given_here)
    if isinstance(held_out, dict):  # vLLM refused the settings
        assert r.code == 2, r.stderr
        assert "refuses the settings" in r.stderr
        return
    assert r.code == 0, r.stderr
    assert ours == held_out


# --- what the knobs are, and what is left out ---------------------------------------------

_FIELDS = """
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
import vllm_build as vb
v = vb.load()
fields = [f.name for c in (v.SchedulerConfig, v.CacheConfig) for f in dataclasses.fields(c)
          if not f.name.startswith("_")]
print(json.dumps({"version": vb.version(), "fields": fields,
                  "knobs": [k["name"] for k in vb.knobs(v)]}))
"""


def _fields_knobs(python: str) -> dict[str, Any]:
    folder = ROOT / "schedcli" / "runtimes" / "vllm"
    done = subprocess.run(
        [python, "-c", _FIELDS, str(folder)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def _check_partition(found: dict[str, Any]) -> None:
    """Every public field is a knob or left out for a reason (never dropped unsaid)."""
    fields, knobs = set(found["fields"]), set(found["knobs"])
    assert knobs <= fields
    assert fields - knobs == fields & set(NOT_KNOBS)


@pytest.mark.needs("vllm")
def test_every_field_of_vllms_config_classes_is_a_knob_or_left_out_for_a_reason() -> None:
    from schedcli.runtimes.vllm import vllm_build as vb

    v = vb.load()
    fields = [
        f.name
        for c in (v.SchedulerConfig, v.CacheConfig)
        for f in dataclasses.fields(c)
        if not f.name.startswith("_")
    ]
    _check_partition({"fields": fields, "knobs": [k["name"] for k in vb.knobs(v)]})


def test_another_releases_fields_are_knobs_or_left_out_and_every_left_out_field_is_one(
    other_vllm: str,
) -> None:
    other = _fields_knobs(other_vllm)
    _check_partition(other)
    here = _fields_knobs(sys.executable) if importlib.util.find_spec("vllm") else {"fields": []}
    # Nothing is left out that no release in the family has (InitVars schedcli passes).
    assert set(NOT_KNOBS) - set(other["fields"]) - set(here["fields"]) <= {
        "max_model_len",
        "is_encoder_decoder",
    }
    # The knobs one release has and the other lacks are the ones schedcli knows of, with
    # the release that has each.
    if here["fields"]:
        for name in set(other["knobs"]) ^ set(here["knobs"]):
            has = other if name in other["knobs"] else here
            assert has["version"].startswith(f"{RELEASE_KNOBS[name]}."), name
        assert set(other["knobs"]) ^ set(here["knobs"]) == set(RELEASE_KNOBS)
    assert "max_num_inflight_kv_loads" in other["knobs"]


def test_the_docs_list_every_left_out_field_with_its_reason() -> None:
    text = (ROOT / "docs" / "policies.md").read_text()
    section = text.split("### vLLM's knobs", 1)[1].split("\n### ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", section, re.M))
    assert rows == NOT_KNOBS


# --- refusals and notes -------------------------------------------------------------------


def _one_request(tmp_path: Path) -> Path:
    return write_workload(tmp_path, [{"sid": 1, "arrival": 0, "prompt_tokens": 9,
                                      "output_tokens": 2}])  # fmt: skip


@pytest.mark.needs("vllm")
def test_a_value_vllm_refuses_is_exit_2_naming_the_parameter_in_vllms_words(
    cli: Cli, tmp_path: Path
) -> None:
    workload = _one_request(tmp_path)
    r = cli("simulate", workload, "-p", "vllm", *flags(SMALL), "-P", "watermark=1.5")
    assert r.code == 2
    assert "refuses the settings: watermark: Input should be less than 1" in r.stderr
    assert "Traceback" not in r.stderr
    # vLLM's model validator, across two knobs: in its words too.
    r = cli("simulate", workload, "-p", "vllm", *flags(SMALL), "-P", "max_num_active_seqs=9")
    assert r.code == 2 and "max_num_active_seqs (9) cannot be" in r.stderr


def test_another_releases_refusal_is_exit_2_in_its_words(
    cli: Cli, tmp_path: Path, other_vllm: str
) -> None:
    workload = _one_request(tmp_path)
    policy = f"vllm@{other_vllm}"
    r = cli("simulate", workload, "-p", policy, *flags(SMALL), "-P", "watermark=1.5")
    assert r.code == 2
    assert "vLLM 0.34" in r.stderr and "watermark: Input should be less than 1" in r.stderr
    r = cli("simulate", workload, "-p", policy, *flags(SMALL), "-P", "max_num_inflight_kv_loads=4")
    assert r.code == 0, r.stderr


@pytest.mark.needs("vllm")
def test_an_unknown_knob_is_exit_2_with_the_name_meant(cli: Cli, tmp_path: Path) -> None:
    r = cli("simulate", _one_request(tmp_path), "-p", "vllm", "-P", "max_num_scheduled_token=5")
    assert r.code == 2
    assert "has no parameter 'max_num_scheduled_token'" in r.stderr
    assert "did you mean 'max_num_scheduled_tokens'?" in r.stderr


@pytest.mark.needs("vllm")
def test_a_knob_of_another_release_is_exit_2_naming_this_release(cli: Cli, tmp_path: Path) -> None:
    from importlib.metadata import version

    r = cli("simulate", _one_request(tmp_path), "-p", "vllm", "-P", "max_num_inflight_kv_loads=4")
    assert r.code == 2
    assert (
        f"has no parameter 'max_num_inflight_kv_loads': vLLM {version('vllm')} has no such "
        "SchedulerConfig or CacheConfig field (vLLM 0.34 has)" in r.stderr
    )


@pytest.mark.needs("vllm")
def test_a_field_left_out_is_exit_2_saying_why(cli: Cli, tmp_path: Path) -> None:
    r = cli("simulate", _one_request(tmp_path), "-p", "vllm", "-P", "max_num_queued_reqs=4")
    assert r.code == 2
    assert "left out of vLLM's knobs: enforced by vLLM's API server" in r.stderr


@pytest.mark.needs("vllm")
@pytest.mark.parametrize("named", [False, True])
def test_a_header_naming_knobs_this_vllm_lacks_replays_with_a_note_saying_why(
    cli: Cli, tmp_path: Path, named: bool
) -> None:
    """A recording of another release (its header's knobs): replayed here, named or not,
    with one note naming what is not applied and why."""
    from importlib.metadata import version

    header = {"schedcli": 1, "level": "request", "policy": "vllm",
              "params": SMALL | {"max_num_inflight_kv_loads": 4, "max_num_queued_reqs": 9,
                                 "watermark": 0.01}}  # fmt: skip
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [
        header,
        {"op": "arrive", "rid": "a", "prompt_tokens": 20, "max_tokens": 2},
        {"op": "step", "expect": {"batch": [["a", 20]], "preempted": [], "finished": []}},
    ]))  # fmt: skip
    r = cli("replay", trace, *(["-p", "vllm"] if named else []), "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
    assert (
        "note: 'vllm' does not take the trace header's max_num_inflight_kv_loads, "
        f"max_num_queued_reqs; not applied (max_num_inflight_kv_loads: vLLM {version('vllm')} "
        "has no such SchedulerConfig or CacheConfig field (vLLM 0.34 has); max_num_queued_reqs: "
        "left out of "
        "vLLM's knobs: enforced by vLLM's API server" in r.stderr
    )
    # Any other name in the header of its own policy is a typo, refused at the header.
    header["params"] = {"max_num_seqz": 4}
    trace.write_bytes(orjson.dumps(header) + b"\n")
    r = cli("replay", trace, *(["-p", "vllm"] if named else []))
    assert r.code == 2
    assert f"{trace}:1: header param 'max_num_seqz' is not a parameter of policy 'vllm'" in r.stderr


# --- schedcli policies --------------------------------------------------------------------


def _described(cli: Cli, *name: str) -> list[dict[str, Any]]:
    r = cli("policies", *name, "-f", "json")
    assert r.code == 0, r.stderr
    found: list[dict[str, Any]] = orjson.loads(r.stdout)
    return found


@pytest.mark.needs("vllm")
def test_policies_lists_the_knobs_of_the_vllm_here(cli: Cli) -> None:
    from importlib.metadata import version

    every = {d["name"]: d for d in _described(cli)}
    (one,) = _described(cli, "vllm")
    assert one == every["vllm"]
    params = {p["name"]: p for p in one["params"]}
    for knob in ("max_num_scheduled_tokens", "watermark", "scheduler_reserve_full_isl",
                 "long_prefill_token_threshold_adaptive"):  # fmt: skip
        assert knob in params
    assert params["max_num_scheduled_tokens"]["default"] == -1
    assert "unset, vLLM decides" in params["max_num_scheduled_tokens"]["help"]
    own = {"num_gpu_blocks", "block_size", "max_model_len", "async_scheduling"}
    assert not set(params) & (set(NOT_KNOBS) - own)
    assert one["rule"].startswith(f"vLLM {version('vllm')}'s own v1 scheduler, run as is: ")


def test_policies_names_another_interpreter_and_lists_its_vllms_knobs(
    cli: Cli, other_vllm: str
) -> None:
    (one,) = _described(cli, f"vllm@{other_vllm}")
    names = [p["name"] for p in one["params"]]
    assert "max_num_inflight_kv_loads" in names and "watermark" in names
    assert one["rule"].startswith(f"vLLM 0.34.0's own v1 scheduler (under {other_vllm})")


def test_policies_of_a_name_that_is_no_policy_is_exit_2(cli: Cli) -> None:
    r = cli("policies", "vllm-ish")
    assert r.code == 2 and "unknown policy 'vllm-ish'" in r.stderr
    (one,) = _described(cli, "fcfs")
    assert one["name"] == "fcfs" and one["params"]


# --- recordings ---------------------------------------------------------------------------


@pytest.mark.needs("vllm")
def test_a_recording_of_an_engine_with_knobs_set_carries_them_and_replays_exactly(
    cli: Cli, tmp_path: Path
) -> None:
    from tests.runtimes.test_vllm import RECORDED, _record

    knobs = {"watermark": 0.2, "max_num_scheduled_tokens": 64, "scheduler_reserve_full_isl": False}
    trace = tmp_path / "live.jsonl"
    seen = _record(trace, RECORDED | {"block_size": 16} | knobs)
    assert seen["preempted"]
    header = orjson.loads(trace.read_bytes().splitlines()[0])
    assert {k: header["params"][k] for k in knobs} == {
        **knobs,
        "scheduler_reserve_full_isl": "false",
    }
    assert header["params"]["max_num_active_seqs"] == -1  # unset in the engine: unset here
    r = cli("replay", trace, "--check", "-f", "jsonl")
    assert r.code == 0, r.stderr
