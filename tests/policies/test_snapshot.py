"""A policy's snapshot: restored into a fresh instance, it goes on exactly as the original
(every built-in, both decode-first modes, every step, both cores); a bad state is refused
naming its field; a policy that cannot says so."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedcli import build_policy
from schedcli.model.errors import BadSnapshot, SnapshotUnsupported
from schedcli.model.scheduler import Policy, QueueScheduler, Scheduler
from schedcli.model.task import Task
from tests.helpers import ROOT, lines_from_the_other_core

# Small limits, so that batches fill, chunks are refused and sessions wait.
PARAMS: dict[str, dict[str, Any]] = {
    "fcfs": {"max_batch_tokens": 40, "max_num_seqs": 4, "max_prefill_chunk_size": 24},
    "priority": {"max_batch_tokens": 40, "max_num_seqs": 4, "max_prefill_chunk_size": 24},
    "prefill-first": {
        "max_batch_tokens": 40,
        "max_decode_sequences": 3,
        "max_prefill_chunk_size": 24,
    },
    "sjf": {"max_batch_tokens": 40, "max_decode_sequences": 3, "max_prefill_chunk_size": 24},
    "fair": {
        "max_batch_tokens": 40,
        "max_num_seqs": 4,
        "max_prefill_chunk_size": 24,
        "prefill_weight": 0.3,
        "decode_weight": 1.7,
    },
    "decode-first": {
        "max_batch_tokens": 40,
        "max_decode_sequences": 3,
        "max_prefill_chunk_size": 24,
    },
    "decode-first/reference": {
        "max_batch_tokens": 40,
        "max_decode_sequences": 3,
        "max_prefill_chunk_size": 24,
        "compat": "reference",
    },
}
POLICIES = sorted(PARAMS)

# An op: ("submit", [(tid, sid, kind, size, priority, produce_output)]), ("cancel", sid),
# ("clear",), ("get",).
Op = tuple[Any, ...]
IDS = [0, 1, 2, 3, 4, 5, "1", "x"]
SIDS = [0, 1, 2, "1", "s"]


def build(name: str) -> Scheduler:
    policy = build_policy(name.partition("/")[0], dict(PARAMS[name]))
    assert isinstance(policy, Scheduler)
    return policy


task_spec = st.tuples(
    st.sampled_from(IDS),
    st.sampled_from(SIDS),
    st.sampled_from(["prefill", "prefill", "decode"]),
    st.sampled_from([1, 1, 2, 5, 9, 16, 24, 25]),
    st.sampled_from([0, 0, 1, -2, 3]),
    st.sampled_from([None, None, None, True, False]),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.lists(task_spec, min_size=1, max_size=4)),
        st.tuples(st.just("get")),
        st.tuples(st.just("get")),
        st.tuples(st.just("cancel"), st.sampled_from([*SIDS, 9])),
        st.tuples(st.just("cancel"), st.sampled_from([*SIDS, 9])),
        st.tuples(st.just("clear")),
    ),
    max_size=30,
)


def tasks_of(specs: list[tuple[Any, ...]]) -> list[Task]:
    """The group as new task objects (each instance its own, as a replay makes them)."""
    out = []
    for tid, sid, kind, size, priority, output in specs:
        out.append(
            Task(tid, sid, kind, 1 if kind == "decode" and size < 5 else size, priority=priority)
        )
        out[-1].produce_output = output
    return out


def apply(policy: Scheduler, op: Op) -> object:
    """What the caller sees of one op: the batch's tids (and the reasons, explaining), the
    dropped tids, or the submit's refusal."""
    if op[0] == "submit":
        return ("submit", policy.try_submit(tasks_of(op[1])))
    if op[0] == "cancel":
        return ("cancel", [t.tid for t in policy.cancel(op[1])])
    if op[0] == "clear":
        return ("clear", [t.tid for t in policy.clear()])
    batch = [t.tid for t in policy.get_work()]
    left = policy.left_behind()
    why = None if left is None else [(t.tid, code, detail) for t, code, detail in left]
    return ("get", batch, why, policy.has_work())


def check_every_step(name: str, sequence: list[Op], explaining: bool) -> None:
    for k, op in enumerate(sequence):
        if op[0] != "get":
            continue
        original = build(name)
        original.explaining = explaining
        for before in sequence[:k]:
            apply(original, before)
        state = orjson.loads(orjson.dumps(original.snapshot()))
        restored = build(name)
        restored.explaining = explaining
        restored.restore(state)
        assert orjson.dumps(restored.snapshot()) == orjson.dumps(state)
        for after in sequence[k:]:
            assert apply(restored, after) == apply(original, after), (k, after, state)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=150, deadline=None)
@given(sequence=ops, explaining=st.booleans())
# compat=reference's stale decode (its cancel leaves it queued, marked), and a task whose
# tid a stale entry's release erased from pending (still queued, no longer pending).
@example(
    sequence=[("submit", [(2, 0, "decode", 1, 0, None)]), ("cancel", 0), ("get",)], explaining=True
)
@example(
    sequence=[
        ("submit", [(1, 0, "decode", 1, 0, None)]),
        ("submit", [(2, 0, "decode", 1, 0, None)]),
        ("get",),
        ("cancel", 0),
        ("submit", [(2, 1, "prefill", 5, 0, None)]),
        ("cancel", 0),
        ("submit", [(2, 1, "prefill", 9, 0, None)]),
        ("get",),
        ("clear",),
        ("get",),
    ],
    explaining=False,
)
def test_a_restored_snapshot_goes_on_as_the_original_from_every_step(
    name: str, sequence: list[Op], explaining: bool
) -> None:
    check_every_step(name, sequence, explaining)


def test_fair_snapshot_holds_counters_and_backlog_order() -> None:
    fair = build("fair")
    fair.submit([Task(1, "a", "prefill", 20)])
    fair.submit([Task(2, "b", "prefill", 15), Task(3, "b", "prefill", 15)])
    assert [t.tid for t in fair.get_work()] == [1, 2]
    fair.submit([Task(4, "a", "decode", 1)])
    state = fair.snapshot()
    assert state["queued"] == [
        [{"tid": 3, "sid": "b", "kind": "prefill", "size": 15, "produce_output": True}],
        [{"tid": 4, "sid": "a", "kind": "decode", "size": 1, "produce_output": True}],
    ]
    assert state["backlog"] == ["b", "a"]
    assert state["counters"] == [["a", 6.0], ["b", 4.5]]


def test_groups_are_kept_as_submitted() -> None:
    fcfs = build("fcfs")
    fcfs.submit([Task(1, 1, "prefill", 4), Task(2, 1, "prefill", 4)])
    fcfs.submit([Task(3, 2, "prefill", 4)])
    fcfs.submit([Task(4, 3, "prefill", 4), Task(5, 3, "prefill", 4)])
    state = fcfs.snapshot()
    assert [[t["tid"] for t in g] for g in state["queued"]] == [[1, 2], [3], [4, 5]]  # type: ignore[attr-defined, index]


# --- both cores ------------------------------------------------------------------------


def transcript(seed: int) -> list[bytes]:
    """For each policy and a seeded run of ops: the snapshot before each get_work, as JSON."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for name in POLICIES:
        sequence = [_random_op(rng) for _ in range(40)]
        policy = build(name)
        for op in sequence:
            if op[0] == "get":
                out.append(orjson.dumps([name, policy.snapshot()]))
            apply(policy, op)
    return out


def _random_op(rng: random.Random) -> Op:
    roll = rng.random()
    if roll < 0.45:
        group = [
            (
                rng.choice(IDS),
                rng.choice(SIDS),
                rng.choice(["prefill", "decode"]),
                rng.choice([1, 5, 9, 16, 24]),
                rng.choice([0, 1, -2]),
                None,
            )
            for _ in range(rng.randint(1, 3))
        ]
        return ("submit", group)
    if roll < 0.85:
        return ("get",)
    if roll < 0.97:
        return ("cancel", rng.choice(SIDS))
    return ("clear",)


def test_a_snapshot_is_the_same_json_in_both_cores_and_restores_in_the_other() -> None:
    theirs = lines_from_the_other_core("tests.policies.test_snapshot", "transcript", 7)
    assert theirs == transcript(7)
    for line in theirs:  # each of the other core's snapshots restores here
        name, state = orjson.loads(line)
        restored = build(name)
        restored.restore(state)
        assert orjson.dumps(restored.snapshot()) == orjson.dumps(state)


# --- a state is untrusted input ----------------------------------------------------------


def _state(name: str) -> dict[str, Any]:
    """A state with a little of everything the policy keeps."""
    policy = build(name)
    policy.submit([Task(1, "a", "prefill", 20), Task(2, "a", "prefill", 20)])
    policy.submit([Task(3, "b", "decode", 1)])
    policy.submit([Task(4, "b", "decode", 1)])
    policy.submit([Task(5, "c", "prefill", 10, priority=2)])
    policy.get_work()
    state: dict[str, Any] = orjson.loads(orjson.dumps(policy.snapshot()))
    return state


def refused(name: str, state: object) -> str:
    with pytest.raises(BadSnapshot) as caught:
        build(name).restore(state)  # type: ignore[arg-type]
    return str(caught.value)


@pytest.mark.parametrize("name", POLICIES)
def test_a_state_of_an_unknown_version_is_refused(name: str) -> None:
    state = _state(name)
    state["version"] = 2
    assert refused(name, state).startswith("version: is 2: this schedcli reads version 1")
    del state["version"]
    assert refused(name, state).startswith("version: is missing")


@pytest.mark.parametrize("name", POLICIES)
def test_a_wrong_json_type_in_any_field_is_refused_naming_the_field(name: str) -> None:
    state = _state(name)
    paths: list[tuple[list[Any], object]] = []

    def walk(value: object, path: list[Any]) -> None:
        if path and path != ["version"]:
            paths.append((path, value))
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, k])
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, [*path, i])

    walk(state, [])
    assert len(paths) > 5
    for path, value in paths:
        for wrong in ({"x": 1}, [1], 1.5, None, "zz", True):
            if type(wrong) is type(value) or (isinstance(value, str | int) and wrong == "zz"):
                continue  # the same type, or an id's other type: still an id
            broken = orjson.loads(orjson.dumps(state))
            holder = broken
            for step in path[:-1]:
                holder = holder[step]
            holder[path[-1]] = wrong
            try:
                build(name).restore(broken)
            except BadSnapshot as e:
                field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
                said = str(e)
                # The message names the field, or the list or object that holds it.
                assert said.split(":")[0] in field.lstrip(".") or said.startswith(
                    field.lstrip(".").split("[")[0].split(".")[0]
                ), (path, wrong, said)
            else:
                # Accepted only where the value is as good: a float counter given as an
                # integer, a session given another id, a flag flipped.
                assert isinstance(wrong, bool) or isinstance(value, float), (path, wrong)


@pytest.mark.parametrize("name", POLICIES)
def test_a_tid_listed_twice_is_refused(name: str) -> None:
    state = _state(name)
    state["queued"].append([dict(state["queued"][0][0])])
    tid = state["queued"][0][0]["tid"]
    assert (
        refused(name, state) == f"queued[{len(state['queued']) - 1}]: tid {tid} is already queued"
    )


def test_a_session_in_the_rotation_with_nothing_queued_is_refused() -> None:
    state = _state("decode-first")
    state["rotation"].append("ghost")
    assert refused("decode-first", state) == (
        'rotation[1]: session "ghost" has no prefill queued (and is not in emptied)'
    )
    state = _state("sjf")
    state["sessions"].append("ghost")
    assert refused("sjf", state) == 'sessions[1]: session "ghost" has no prefill queued'
    state = _state("fair")
    state["backlog"].append("ghost")
    assert refused("fair", state) == 'backlog[2]: session "ghost" has no task queued'


def test_a_decode_queued_for_a_session_the_policy_state_lacks_is_refused() -> None:
    state = _state("fair")
    state["queued"].append(
        [{"tid": 9, "sid": "z", "kind": "decode", "size": 1, "produce_output": True}]
    )
    assert refused("fair", state) == (
        'backlog: session "z" has tasks queued (task 9) but is not in the backlog'
    )
    state = _state("decode-first")
    state["decodes"].append(9)
    assert refused("decode-first", state) == (
        "decodes[1]: tid 9 is not a queued task, or is listed twice"
    )
    state = _state("decode-first")
    state["queued"].append(
        [{"tid": 9, "sid": "z", "kind": "decode", "size": 1, "produce_output": True}]
    )
    assert refused("decode-first", state) == "decodes: task 9 is queued but not in decodes"
    state = _state("decode-first/reference")
    state["decodes"].append(
        {
            "tid": 9,
            "sid": "z",
            "kind": "prefill",
            "size": 1,
            "produce_output": True,
            "cancelled": True,
        }
    )
    assert refused("decode-first/reference", state) == "decodes[1]: task 9 is not a decode"


def test_a_state_that_breaks_the_policys_own_rules_is_refused() -> None:
    state = _state("fcfs")
    state["queued"][2][0]["size"] = 100
    assert refused("fcfs", state) == (
        "queued[2]: prefill chunk of 100 tokens exceeds max_prefill_chunk_size 24"
    )
    state = _state("fair")
    state["counters"][0][1] = -1.0
    assert refused("fair", state).startswith("counters[0][1]: must be a number from 0 to")
    state = _state("priority")
    state["queue"].reverse()
    assert "the queue is in priority order" in refused("priority", state)
    assert refused("fcfs", {**_state("fcfs"), "policy": "fair"}) == (
        "policy: is 'fair': this is policy fcfs's state to restore"
    )
    assert refused("fcfs", {**_state("fcfs"), "extra": 1}).startswith(
        "state: has an unknown field 'extra'"
    )
    assert refused("fcfs", [1]) == "a state must be an object, not a list"


def test_a_policy_without_snapshots_says_so() -> None:
    class Plain(QueueScheduler):
        name = "plain"

        def enqueue(self, task: Task) -> None: ...
        def take_batch(self) -> list[Task]:
            return []

        def remove_session(self, sid: object) -> list[Task]:  # type: ignore[override]
            return []

        def reset(self) -> None: ...

    for policy in (Plain(), Policy()):
        with pytest.raises(SnapshotUnsupported, match="has no snapshots"):
            policy.snapshot()
        with pytest.raises(SnapshotUnsupported, match="has no snapshots") as caught:
            policy.restore({"version": 1})
        assert caught.value.exit_code == 2


def test_the_example_states_in_the_docs_restore_and_read_back_the_same() -> None:
    text = (ROOT / "docs" / "policies.md").read_text()
    section = text.split("## Snapshots", 1)[1].split("\n## ", 1)[0]
    examples = [block.split("```", 1)[0] for block in section.split("```json\n")[1:]]
    assert len(examples) == 2
    for written in examples:
        state = orjson.loads(written)
        policy = build_policy(state["policy"])
        policy.restore(state)
        assert policy.snapshot() == state


def test_a_priority_task_queued_below_its_own_priority_is_refused() -> None:
    state = _state("priority")
    for entry in state["queue"]:
        entry["priority"] = -5  # still in priority order; below every task's own
    first = state["queue"][0]["tid"]
    assert refused("priority", state) == (
        f"queue[0].priority: -5 is below task {first}'s own priority 0: a task is queued at "
        "its own priority or its session's earlier task's"
    )
