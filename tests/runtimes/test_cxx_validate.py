"""``validate`` under a ``cxx:`` policy (#56): it builds the policy as replay does and checks
every task against the widths of the interface the policy was built for, so it reports
whatever replay refuses, at the same line, in the same words."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import Cli, CliResult
from tests.runtimes.test_cxx_policy import BUILDS, CPP, VARIANT_TYPES, fifo

pytestmark = pytest.mark.skipif(
    not BUILDS, reason="no C++ compiler here (CI installs g++ and clang++ and requires this)"
)
SHAPES = [shape for compiler, shape in BUILDS if compiler == BUILDS[0][0]] if BUILDS else []


@pytest.fixture(scope="session")
def cxx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "cxx-cache"


@pytest.fixture
def shape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cxx_cache: Path) -> str:
    """The stand-in checkout of one interface shape, a shared build cache, one compiler."""
    name: str = request.param
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(cxx_cache))
    monkeypatch.setenv("CXX", BUILDS[0][0])
    monkeypatch.setenv("EXECUTORCH_ROOT", str(CPP / name / "executorch"))
    monkeypatch.delenv("CXXFLAGS", raising=False)
    return name


def _write(path: Path, ops: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(op) + b"\n" for op in ops))
    return path


def _submit(**task: object) -> dict[str, object]:
    return {"op": "submit", "sid": 1, "kind": "prefill", "size": 1, "tid": 1, **task}


def _refusal(done: CliResult) -> str:
    """The message of the first problem said, without its FILE:LINE (or schedcli:)."""
    lines = [line for line in done.stderr.splitlines() if not line.startswith("note: ")]
    return re.sub(r"^(schedcli|\S+?(:\d+)?): ", "", lines[0])


# Each refused by replay under the stand-in of its shape; validate called them valid.
REFUSED = [
    ("payload", [_submit(size=3, tokens=[4, -5, 6])], [],
     "token -5 does not fit the interface's Token (0..18446744073709551615)"),
    ("seed", [_submit(position=3000000000)], [],
     "position 3000000000 does not fit the interface's Position (-2147483648..2147483647)"),
    ("seed", [_submit(tid=2**31)], [],
     "tid 2147483648 does not fit the interface's TaskId (-2147483648..2147483647)"),
    ("payload", [_submit(position=2**31 + 3, prepared={"size": 9, "offset": 3})], [],
     "position - prepared.offset 2147483648 does not fit the interface's Position"),
    ("tid64", [_submit(sid="chat")], [],
     "sid 'chat' is not an integer, and a C++ SessionId is"),
    ("later", [_submit()], ["-P", "max_batch_tokens=10"],
     "schedcli_test::FifoScheduler::create returned null for max_batch_tokens=10, "
     "max_num_seqs=64, max_prefill_chunk_size=256: the C++ refuses these parameters"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "ops", "args", "said"),
    REFUSED,
    indirect=["shape"],
    ids=["negative-token", "wide-position", "wide-tid", "wide-base", "string-sid", "null"],
)
def test_validate_refuses_what_replay_refuses_under_a_cxx_policy(
    shape: str, cli: Cli, tmp_path: Path, ops: list[dict[str, object]], args: list[str], said: str
) -> None:
    trace = _write(tmp_path / "t.jsonl", [*ops, {"op": "get_work"}])
    replayed = cli("replay", trace, "-p", fifo(), *args)
    validated = cli("validate", trace, "-p", fifo(), *args)
    assert replayed.code == validated.code == 2, (replayed.stderr, validated.stderr)
    assert said in _refusal(replayed)
    assert _refusal(validated) == _refusal(replayed)
    if not args:  # a task's problem: at its line
        assert validated.stderr.startswith(f"{trace}:1: ")


@pytest.mark.parametrize("shape", SHAPES[:1], indirect=True)
def test_validate_refuses_a_checkout_whose_interface_shape_is_unknown_as_replay_does(
    shape: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "executorch"
    batching = checkout / "extension" / "llm" / "batching"
    batching.mkdir(parents=True)
    (batching / "types.h").write_text(VARIANT_TYPES)
    shutil.copy(CPP / "tid64" / "executorch" / "extension/llm/batching/scheduler.h", batching)
    monkeypatch.setenv("EXECUTORCH_ROOT", str(checkout))
    trace = _write(tmp_path / "t.jsonl", [_submit(), {"op": "get_work"}])
    replayed = cli("replay", trace, "-p", fifo())
    validated = cli("validate", trace, "-p", fifo())
    assert replayed.code == validated.code == 2
    assert "batching::Task is not a struct with tid and input" in validated.stderr
    assert _refusal(validated) == _refusal(replayed)


@pytest.mark.parametrize("shape", SHAPES[:1], indirect=True)
def test_validate_of_a_trace_that_fits_says_valid_and_counts_every_event(
    shape: str, cli: Cli, tmp_path: Path
) -> None:
    ops = [_submit(tid=2**31 - 1, position=2**31 - 1, tokens=[-(2**63)]), {"op": "get_work"}]
    done = cli("validate", _write(tmp_path / "t.jsonl", ops), "-p", fifo())
    assert done.code == 0, done.stderr
    assert "valid, 2 event(s)" in done.stderr


# --- the property: validate and replay agree at the interface's limits ----------------------

I64 = (-(2**63), 2**63 - 1)
EDGES = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**63 - 1, -(2**63)]


def _near_limits(low: int = I64[0]) -> st.SearchStrategy[int]:
    """Mostly a value every shape holds (so that a trace may pass), else one at or past a
    width's edge, or any the trace format holds."""
    edges = [e for e in EDGES if e >= low]
    fits = st.integers(max(low, -1000), 1000)
    return st.one_of(fits, fits, fits, fits, st.sampled_from(edges), st.integers(low, I64[1]))


@st.composite
def traces_at_the_limits(draw: st.DrawFn) -> list[dict[str, object]]:
    """Submits whose ids, positions, tokens and prepared inputs lie around the interface's
    widths (32 and 64 bits, signed and not), each tid used once (a tid queued twice is a
    contract question, not this one's); get_work, cancel and clear between."""
    ops: list[dict[str, object]] = []
    used: set[object] = set()
    sids = st.one_of(_near_limits(), _near_limits(), st.just("s"))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["submit"] * 4 + ["get_work"] * 2 + ["cancel", "clear"]))
        if op != "submit":
            ops.append({"op": "cancel", "sid": draw(sids)} if op == "cancel" else {"op": op})
            continue
        tasks = []
        for _ in range(draw(st.integers(1, 3))):
            tid: object = draw(st.one_of(_near_limits(), _near_limits(), st.just("t")))
            while tid in used:
                tid = len(used) + 100
            used.add(tid)
            decode = draw(st.booleans())
            size = 1 if decode else draw(st.integers(1, 3))
            task: dict[str, object] = {"tid": tid, "sid": draw(sids), "size": size}
            task["kind"] = "decode" if decode else "prefill"
            work = draw(st.sampled_from(["none", "tokens", "prepared"]))
            if work == "tokens":
                task["tokens"] = draw(st.lists(_near_limits(), min_size=size, max_size=size))
            if work == "prepared":
                offset = draw(st.sampled_from([0, 1, 2**31, 2**62]))
                backing = offset + size + draw(st.integers(0, 2))
                task["prepared"] = {"size": backing, "offset": offset}
                base = draw(st.sampled_from([-1, 0, 2**31 - 1, 2**31, -(2**31) - 1]))
                task["position"] = max(0, min(offset + base, I64[1]))
            elif draw(st.booleans()):
                task["position"] = draw(_near_limits(low=0))
            tasks.append(task)
        ops.append({"op": "submit", "tasks": tasks})
    return ops


def _first_problem(done: CliResult, trace: Path) -> str | None:
    """The first ``FILE:LINE: message`` said about ``trace``."""
    for line in done.stderr.splitlines():
        if re.match(rf"{re.escape(str(trace))}:\d+: ", line):
            return line
    return None


@pytest.mark.parametrize("shape", SHAPES, indirect=True)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=traces_at_the_limits())
def test_validate_exits_2_exactly_when_replay_does_at_the_same_first_line(
    shape: str, cli: Cli, tmp_path: Path, ops: list[dict[str, object]]
) -> None:
    trace = _write(tmp_path / "t.jsonl", ops)
    replayed = cli("replay", trace, "-p", fifo(), "-o", tmp_path / "dump.jsonl")
    validated = cli("validate", trace, "-p", fifo())
    assert replayed.code in (0, 2), replayed.stderr
    event(f"replay exit {replayed.code}")
    assert (validated.code == 2) == (replayed.code == 2), (replayed.stderr, validated.stderr)
    if replayed.code == 2:
        first = _first_problem(replayed, trace)
        assert first is not None and first == _first_problem(validated, trace)
