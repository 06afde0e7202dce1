"""The debugger's verdict is the one-shot command's for every kind of record: under
``--golden`` ``replay --golden``'s, under ``--against`` ``diff``'s, whether a batch, a
submit's outcome, a cancel's dropped tasks or the end's counts differ; and each record
that differs is marked where the timeline shows it. ``judge`` (the session the server runs,
judged as the app judges the index) is checked against the commands over generated pairs;
the server itself (``Travel``) for the marks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.app.usage import worded
from schedcli.engine.travel import Compare, Travel
from schedcli.engine.travel.verdict import Verdict
from schedcli.engine.travel.verdict import judge as judged
from schedcli.model.errors import Said
from tests.conftest import Cli
from tests.helpers import write_lines

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
GOLDENS = ROOT / "traces/golden"
LOSES_TASKS = "tests.plugin_policies:LosesTasks"

Records = list[dict[str, Any]]


def records(path: Path) -> Records:
    return [json.loads(x) for x in path.read_text().splitlines()]


@dataclass(frozen=True)
class Heard:
    """The verdict as ``schedcli debug`` says it: the exit code, and its line worded by
    the app (the options the engine names, as flags)."""

    exit: int
    said: str | None


def judge(path: str, **given: Any) -> Heard:
    found: Verdict = judged(path, **given)
    return Heard(found.exit, None if found.said is None else worded(found.said))


def div_marks(path: Path, compare: Compare, policy: str | None = None) -> list[tuple[int, str]]:
    """The divergence marks the server's index gives, with the verdict's end."""
    with Travel(str(path), policy=policy, compare=compare, every=1) as travel:
        assert travel.wait("indexed", 60) and travel.indexed is not None
        return sorted((s, worded(text)) for s, kind, text in travel.marks if kind == "div")


# --- each kind of record, against a golden ---------------------------------------------


def golden_without_a_rejection(tmp_path: Path) -> tuple[Path, Path, int, str]:
    """rejections.jsonl and its golden with the rejection of line 5 gone (the golden says
    that submit was accepted); everything else the same."""
    golden = [r for r in records(GOLDENS / "rejections.dump.jsonl") if r.get("line") != 5]
    return TRACES / "rejections.jsonl", write_lines(tmp_path / "g.jsonl", golden), 0, "line 5"


def golden_with_a_cancel_changed(tmp_path: Path) -> tuple[Path, Path, int, str]:
    """cancel-and-rejoin.jsonl and its golden whose first cancel dropped nothing."""
    golden = records(GOLDENS / "cancel-and-rejoin.dump.jsonl")
    cancel = next(r for r in golden if r.get("op") == "cancel" and r["dropped"])
    cancel["dropped"] = []
    trace = TRACES / "cancel-and-rejoin.jsonl"
    return trace, write_lines(tmp_path / "g.jsonl", golden), 0, f"line {cancel['line']}"


def golden_with_an_end_count_changed(tmp_path: Path) -> tuple[Path, Path, int, str]:
    """cancel-and-rejoin.jsonl and its golden whose end counts one more cancelled task."""
    golden = records(GOLDENS / "cancel-and-rejoin.dump.jsonl")
    golden[-1]["end"]["cancelled"] += 1
    last = max(r["step"] for r in golden if "batch" in r)
    trace = TRACES / "cancel-and-rejoin.jsonl"
    return trace, write_lines(tmp_path / "g.jsonl", golden), last, "the end's counts"


@pytest.mark.parametrize(
    "make",
    [golden_without_a_rejection, golden_with_a_cancel_changed, golden_with_an_end_count_changed],
    ids=["submit-outcome", "cancel", "end"],
)
def test_a_golden_that_differs_only_in_a_submit_cancel_or_end_is_exit_1_and_marked(
    cli: Cli, tmp_path: Path, make: Any
) -> None:
    trace, golden, step, said = make(tmp_path)
    assert cli("replay", trace, "--golden", golden, "-f", "jsonl").code == 1
    found = judge(str(trace), compare=Compare(golden=str(golden)))
    assert found.exit == 1
    assert found.said == f"debug: 1 other record differs from the golden, the first at step {step}"
    marks = div_marks(trace, Compare(golden=str(golden)))
    assert len(marks) == 1
    assert marks[0][0] == step and said in marks[0][1], marks


def test_a_golden_the_replay_matches_in_every_record_is_exit_0_unmarked(cli: Cli) -> None:
    for name in ("rejections", "cancel-and-rejoin", "clear-shutdown"):
        trace, golden = TRACES / f"{name}.jsonl", GOLDENS / f"{name}.dump.jsonl"
        assert cli("replay", trace, "--golden", golden, "-f", "jsonl").code == 0
        assert judge(str(trace), compare=Compare(golden=str(golden))).exit == 0
        assert div_marks(trace, Compare(golden=str(golden))) == []


def test_a_golden_without_its_end_record_is_replay_s_exit_2(cli: Cli, tmp_path: Path) -> None:
    cut = records(GOLDENS / "cancel-and-rejoin.dump.jsonl")[:-1]
    golden = write_lines(tmp_path / "cut.dump.jsonl", cut)
    trace = TRACES / "cancel-and-rejoin.jsonl"
    replayed = cli("replay", trace, "--golden", golden, "-f", "jsonl")
    assert replayed.code == 2
    found = judge(str(trace), compare=Compare(golden=str(golden)))
    assert found.exit == 2 and found.said is not None and str(golden) in found.said


def test_a_golden_that_pins_the_contract_break_is_exit_0_and_one_that_pins_another_1(
    cli: Cli, tmp_path: Path
) -> None:
    trace = TRACES / "long-prompts-and-chat.jsonl"
    golden = tmp_path / "pins.dump.jsonl"
    written = cli("replay", trace, "-p", LOSES_TASKS, "--golden", golden, "--update-golden")
    assert written.code == 0
    assert cli("replay", trace, "-p", LOSES_TASKS, "--golden", golden).code == 0
    pinned = judge(str(trace), policy=LOSES_TASKS, compare=Compare(golden=str(golden)))
    assert pinned.exit == 0 and pinned.said is not None and "it pins" in pinned.said
    other = records(golden)
    other[-1]["partial"]["steps"] += 1
    elsewhere = write_lines(tmp_path / "other.dump.jsonl", other)
    assert cli("replay", trace, "-p", LOSES_TASKS, "--golden", elsewhere).code == 1
    assert judge(str(trace), policy=LOSES_TASKS, compare=Compare(golden=str(elsewhere))).exit == 1
    plain = GOLDENS / "long-prompts-and-chat.dump.jsonl"  # pins no break: exit 3
    assert cli("replay", trace, "-p", LOSES_TASKS, "--golden", plain).code == 3
    assert judge(str(trace), policy=LOSES_TASKS, compare=Compare(golden=str(plain))).exit == 3


def test_at_the_request_level_an_abort_or_the_end_that_differs_is_exit_1(
    cli: Cli, tmp_path: Path
) -> None:
    lines: Records = [
        {
            "schedcli": 1,
            "level": "request",
            "policy": "tests.doubles:ToyRequests",
            "params": {"max_num_batched_tokens": 16, "max_num_seqs": 2},
        }
    ]
    for i in range(4):
        lines.append({"op": "arrive", "rid": f"r{i}", "prompt_tokens": 9 + 5 * i, "max_tokens": 2})
        lines += [{"op": "step"}, {"op": "step"}]
    lines.append({"op": "abort", "rid": "r3"})
    lines += [{"op": "step"} for _ in range(8)]
    trace = write_lines(tmp_path / "r.jsonl", lines)
    toy = "tests.doubles:ToyRequests"
    dump = [json.loads(x) for x in cli("replay", trace, "-p", toy, "-f", "jsonl").lines]
    for edit in ("abort", "end"):
        golden = json.loads(json.dumps(dump))
        if edit == "abort":
            next(r for r in golden if r.get("op") == "abort")["was"] = "waiting"
        else:
            golden[-1]["end"]["aborted"] += 1
        path = write_lines(tmp_path / f"{edit}.dump.jsonl", golden)
        assert cli("replay", trace, "-p", toy, "--golden", path, "-f", "jsonl").code == 1, edit
        assert judge(str(trace), policy=toy, compare=Compare(golden=str(path))).exit == 1, edit


# --- each kind of record, against a second policy ----------------------------------------


def cancel_before_any_step(tmp_path: Path, size: int) -> Path:
    """Three tasks of one session cancelled before the only get_work: every batch empty."""
    lines: Records = [
        {"schedcli": 1, "policy": "decode-first", "params": {"max_prefill_chunk_size": 4}},
        {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": size},
        {"op": "submit", "tid": 2, "sid": 1, "kind": "decode", "size": 1},
        {"op": "submit", "tid": 3, "sid": 1, "kind": "prefill", "size": 2},
        {"op": "cancel", "sid": 1},
        {"op": "get_work"},
    ]
    return write_lines(tmp_path / "t.jsonl", lines)


def test_against_a_policy_that_drops_in_another_order_the_cancel_is_exit_1_and_marked(
    cli: Cli, tmp_path: Path
) -> None:
    trace = cancel_before_any_step(tmp_path, 4)  # decode-first drops [1, 3, 2]; fcfs [1, 2, 3]
    assert cli("diff", trace, "--b", "fcfs").code == 1
    found = judge(str(trace), compare=Compare(against="fcfs"))
    assert found.exit == 1
    assert found.said == (
        "debug: 1 other record differs from the --against policy, the first at step 0"
    )
    marks = div_marks(trace, Compare(against="fcfs"))
    assert [(s, text.split(":")[0]) for s, text in marks] == [(0, "line 5")]
    assert "cancel differs" in marks[0][1]


def test_against_a_policy_that_accepts_what_the_replay_rejects_is_exit_1_and_marked(
    cli: Cli, tmp_path: Path
) -> None:
    trace = cancel_before_any_step(tmp_path, 6)  # rejected under a chunk of 4, not of 8
    wider = {"max_prefill_chunk_size": 8}
    assert cli("diff", trace, "--b-param", "max_prefill_chunk_size=8").code == 1
    found = judge(str(trace), compare=Compare(against="decode-first", against_params=wider))
    assert found.exit == 1
    marks = div_marks(trace, Compare(against="decode-first", against_params=wider))
    assert (0, "line 2: submit rejected by the replay, accepted by decode-first (--against)") in (
        marks
    )


# --- the property: the debugger's verdict is the command's, over generated pairs ---------

SMALL = {"max_batch_tokens": 8, "max_decode_sequences": 2}
CONFIGS: list[tuple[str, dict[str, object]]] = [
    ("decode-first", {**SMALL, "max_prefill_chunk_size": 4}),
    ("decode-first", {**SMALL, "max_prefill_chunk_size": 6}),  # accepts chunks of 5 and 6
    ("fcfs", {"max_batch_tokens": 8, "max_num_seqs": 2, "max_prefill_chunk_size": 4}),
    ("prefill-first", {"max_batch_tokens": 8, "max_prefill_chunk_size": 6}),
    (LOSES_TASKS, {}),  # breaks the contract on some traces: a golden may pin it
]


@st.composite
def traces(draw: st.DrawFn) -> Records:
    """Submits some of which a policy rejects (a taken tid, a chunk too big for some, a
    decode of 2), cancels, clears and get_works."""
    name, params = CONFIGS[0]
    lines: Records = [{"schedcli": 1, "policy": name, "params": params}]
    for _ in range(draw(st.integers(1, 24))):
        op = draw(st.sampled_from(["submit"] * 3 + ["get_work", "cancel", "cancel", "clear"]))
        if op == "submit":
            kind = draw(st.sampled_from(["prefill", "prefill", "decode"]))
            size = draw(st.integers(1, 2) if kind == "decode" else st.integers(1, 7))
            tid, sid = draw(st.integers(1, 12)), draw(st.integers(1, 2))
            lines.append({"op": "submit", "tid": tid, "sid": sid, "kind": kind, "size": size})
        elif op == "cancel":
            lines.append({"op": "cancel", "sid": draw(st.integers(1, 2))})
        else:
            lines.append({"op": op})
    if draw(st.booleans()):  # what is queued dropped: a cancel's order is the policy's
        lines += [{"op": "cancel", "sid": 1}, {"op": "cancel", "sid": 2}]
    lines.append({"op": "get_work"})
    return lines


class Marks:
    """The session's hooks, keeping its divergence marks."""

    def __init__(self) -> None:
        self.div: list[tuple[int, str]] = []

    def side_step(self, side: int, step: int, record: Any) -> None:
        pass

    def aligned(self, step: int, records: Any, other: Any) -> None:
        pass

    def mark(self, step: int, kind: str, *text: Said) -> None:
        if kind == "div":
            self.div.append((step, worded(text)))

    def event(self, record: Any, step: int) -> None:
        pass

    def show(self, exit_code: int) -> None:
        """A difference (exit 1) is marked on the timeline; no difference, no mark."""
        if exit_code in (0, 1):
            assert bool(self.div) == (exit_code == 1), self.div


def policy_args(flag: str, config: tuple[str, dict[str, object]], param_flag: str) -> list[str]:
    name, params = config
    args = [flag, name]
    for key, value in params.items():
        args += [param_flag, f"{key}={value}"]
    return args


def edited(golden: Records, edit: str, at: int) -> Records:
    """The golden with one record changed: of the kind ``edit``, the ``at``-th such (if it
    has one; else the golden as written)."""
    out: Records = json.loads(json.dumps(golden))
    if edit == "end" and out and "end" in out[-1]:
        key = sorted(out[-1]["end"])[at % len(out[-1]["end"])]
        if isinstance(out[-1]["end"][key], int):
            out[-1]["end"][key] += 1
        return out
    kinds = {
        "rejection": lambda r: r.get("accepted") is False,
        "cancel": lambda r: r.get("op") in ("cancel", "clear"),
        "batch": lambda r: "batch" in r,
    }
    found = [i for i, r in enumerate(out) if edit in kinds and kinds[edit](r)]
    if not found:
        return out
    i = found[at % len(found)]
    record = out[i]
    if edit == "rejection":
        if at % 2:
            del out[i]  # the golden accepted that submit
        else:
            record["reason"] += " (worded otherwise)"
    elif edit == "cancel":
        record["dropped"] = list(reversed(record["dropped"])) if at % 2 else record["dropped"][1:]
    else:
        record["queued"] += 1
    return out


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=traces(),
    replayed=st.sampled_from(range(len(CONFIGS))),
    written=st.sampled_from(range(len(CONFIGS))),
    edit=st.sampled_from(["none", "rejection", "cancel", "end", "batch"]),
    at=st.integers(0, 5),
)
def test_under_golden_the_debugger_s_verdict_is_replay_golden_s(
    cli: Cli, tmp_path: Path, lines: Records, replayed: int, written: int, edit: str, at: int
) -> None:
    trace = write_lines(tmp_path / "t.jsonl", lines)
    made = tmp_path / "made.dump.jsonl"
    done = cli(
        "replay",
        trace,
        *policy_args("-p", CONFIGS[written], "-P"),
        "--golden",
        made,
        "--update-golden",
    )
    assert done.code == 0, done.stderr
    golden = write_lines(tmp_path / "g.dump.jsonl", edited(records(made), edit, at))
    policy = policy_args("-p", CONFIGS[replayed], "-P")
    want = cli("replay", trace, *policy, "--golden", golden, "-f", "jsonl").code
    name, params = CONFIGS[replayed]
    marks = Marks()
    compare = Compare(golden=str(golden))
    found = judge(str(trace), policy=name, params=params, compare=compare, hooks=marks)
    assert found.exit == want, found.said
    marks.show(found.exit)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=traces(),
    a=st.sampled_from(range(len(CONFIGS))),
    b=st.sampled_from(range(len(CONFIGS))),
)
def test_under_against_the_debugger_s_verdict_is_diff_s(
    cli: Cli, tmp_path: Path, lines: Records, a: int, b: int
) -> None:
    trace = write_lines(tmp_path / "t.jsonl", lines)
    sides = [*policy_args("--a", CONFIGS[a], "--a-param")]
    sides += policy_args("--b", CONFIGS[b], "--b-param")
    want = cli("diff", trace, *sides, "-f", "json").code
    (name, params), (other, others) = CONFIGS[a], CONFIGS[b]
    compare = Compare(against=other, against_params=others)
    marks = Marks()
    found = judge(str(trace), policy=name, params=params, compare=compare, hooks=marks)
    assert found.exit == want, found.said
    marks.show(found.exit)
