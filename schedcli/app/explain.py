"""``schedcli explain``: why the scheduler did that, for a step, a task or a session.

The trace is replayed with the policy's reasons switched on (docs/policies.md lists each
policy's codes); replays are deterministic, so the reasons are the ones of any replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.origins import Origins, Reached
from ..engine.replay import Replayer
from ..engine.run import open_task_replay
from ..model.errors import InputError, UsageError
from ..model.records import Left, discard
from ..model.task import Id, Task, id_key, same_id
from .explanation import Life, Queued, StepView


class _Watcher:
    """The replay's observer for lives: who was submitted where, what each step did to
    the tasks followed, and the reasons each was passed over at every step."""

    def __init__(self, engine_line: Any, wanted: Any) -> None:
        self.engine_line = engine_line
        self.wanted = wanted  # Task -> bool: the lives to follow
        self.lives: dict[int, Life] = {}  # by object id
        self.policy = ""

    def accepted(self, tasks: list[Task], step: int) -> None:
        line = self.engine_line()
        for t in tasks:
            if self.wanted(t):
                self.lives[id(t)] = Life(t, line, step)

    def dispatched(self, batch: list[Task], step: int) -> None:
        for t in batch:
            life = self.lives.get(id(t))
            if life is not None:
                life.outcome, life.outcome_step = "dispatched", step

    def dropped(self, tasks: list[Task], step: int) -> None:
        for t in tasks:
            life = self.lives.get(id(t))
            if life is not None:
                life.outcome, life.outcome_step = "cancelled", step

    def rejected(self, tasks: list[Task], step: int, reason: str) -> None:
        line = self.engine_line()
        for t in tasks:
            if self.wanted(t):
                life = Life(t, line, step, outcome=f"rejected ({reason})", outcome_step=step)
                life.reason = reason
                self.lives[id(t)] = life

    def left(self, step: int, left: Left) -> None:
        for t, code, detail in left or ():
            life = self.lives.get(id(t))
            if life is not None:
                life.passed_over.append((step, code, detail))


def _replay_to_step(
    path: str, policy: str | None, params: Mapping[str, object], step: int
) -> tuple[StepView | None, int]:
    """The view of ``step``, or None and how many steps the replay has."""
    with open_task_replay(
        path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
    ) as opened:
        opened.policy.explaining = True  # one step's reasons: asked for there, not every step
        origins = Origins(step)
        engine = origins.engine = opened.replayer(discard, observer=origins)
        try:
            opened.run(engine)
        except Reached:
            assert origins.batch is not None
            queue = [Queued(*q) for q in origins.queued.values()]
            left = opened.policy.left_behind()  # the policy still stands at the step
            line = origins.line or None
            view = StepView(step, line, origins.batch, queue, left, opened.policy_name)
            return view, origins.steps
        return None, origins.steps


def _replay(path: str, policy: str | None, params: Mapping[str, object], wanted: Any) -> _Watcher:
    with open_task_replay(
        path, policy=policy, params=params, note=lambda _: None, allow_incomplete=True
    ) as opened:
        holder: list[Replayer] = []
        watcher = _Watcher(lambda: holder[0].current_line, wanted)
        watcher.policy = opened.policy_name
        engine = opened.replayer(discard, observer=watcher, on_left=watcher.left)
        holder.append(engine)
        opened.run(engine)
        return watcher


def explain_step(
    path: str, step: int, policy: str | None = None, params: Mapping[str, object] | None = None
) -> StepView:
    view, steps = _replay_to_step(path, policy, params or {}, step)
    if view is None:
        raise InputError(
            path,
            None,
            f"there is no step {step}: the replay has "
            + (f"{steps} steps (0 to {steps - 1})" if steps else "no steps"),
        )
    return view


def explain_lives(
    path: str,
    *,
    tid: Id | None = None,
    sid: Id | None = None,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
) -> list[Life]:
    """Every life of the task ``tid`` (a tid may be reused) or of the session ``sid``."""
    if (tid is None) == (sid is None):
        raise UsageError("explain follows a task or a session: give one of --task, --session")
    if tid is not None:
        key = id_key(tid)
        watcher = _replay(path, policy, params or {}, lambda t: id_key(t.tid) == key)
        what = f"task {tid!r}"
    else:
        watcher = _replay(path, policy, params or {}, lambda t: same_id(t.sid, sid))
        what = f"session {sid!r}"
    if not watcher.lives:
        raise InputError(path, None, f"no submit in this trace holds {what}")
    return list(watcher.lives.values())


def explain_command(
    path: str,
    *,
    step: int | None,
    task: str | None,
    session: str | None,
    policy: str | None,
    params: Mapping[str, object],
    fmt: str,
) -> None:
    """``schedcli explain``: exactly one of a step, a task's life or a session's, shown."""
    from .console import show
    from .parsing import parse_id_option
    from .render import lives_view, step_view

    given = [v for v in (step, task, session) if v is not None]
    if len(given) != 1:
        raise UsageError("explain one thing: give exactly one of --step, --task, --session")
    from ..formats.kinds import is_request_trace

    if is_request_trace(path):
        from .request_explain import explain_request_life, explain_request_step

        if step is not None:
            view = explain_request_step(path, step, policy, params)
            show(fmt, view, step_view, StepView.to_json)
        elif session is not None:
            lives = explain_request_life(path, parse_id_option(session), policy, params)
            show(fmt, lives, lives_view, lambda found: [life.to_json() for life in found])
        else:
            raise UsageError("a request-level trace holds requests: explain --session RID")
        return
    if step is not None:
        show(fmt, explain_step(path, step, policy, params), step_view, StepView.to_json)
        return
    tid = parse_id_option(task) if task is not None else None
    sid = parse_id_option(session) if session is not None else None
    lives = explain_lives(path, tid=tid, sid=sid, policy=policy, params=params)
    show(fmt, lives, lives_view, lambda found: [life.to_json() for life in found])
