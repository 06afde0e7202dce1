"""``schedcli explain``: why the scheduler did that, for a step, a task or a session, at
either level (``engine/explain.py`` finds it)."""

from __future__ import annotations

from collections.abc import Mapping

from ...engine import explain as finding
from ...engine.explain import Life, StepView, explain_step
from ...engine.run import open_replay
from ...model.errors import UsageError
from ...model.task import Id


def explain_lives(
    path: str,
    *,
    tid: Id | None = None,
    sid: Id | None = None,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
) -> list[Life]:
    """Every life of the task ``tid`` (a tid may be reused) or of the session ``sid``
    (a request, at the request level)."""
    if (tid is None) == (sid is None):
        raise UsageError("explain follows a task or a session: give one of --task, --session")
    with open_replay(
        path, policy=policy, params=params or {}, note=lambda _: None, allow_incomplete=True
    ) as opened:
        found = finding.lives(opened, tid=tid, sid=sid)
        if not found:
            raise opened.level.no_life(path, tid, sid)
        return found


def explain_command(
    path: str,
    *,
    step: int | None,
    task: str | None,
    session: str | None,
    policy: str | None,
    params: Mapping[str, object],
    fmt: str,
    as_trace: bool = False,
    output: str = "-",
) -> None:
    """``schedcli explain``: exactly one of a step, a task's life or a session's, shown;
    or (``as_trace``) the step from its state, as a trace written to ``output``."""
    from ..console import show
    from ..parsing import parse_id_option
    from ..views.render import lives_view, step_view

    given = [v for v in (step, task, session) if v is not None]
    if len(given) != 1:
        raise UsageError("explain one thing: give exactly one of --step, --task, --session")
    if as_trace or output != "-":
        if step is None or not as_trace:
            raise UsageError(
                "--as-trace writes one step as a trace (and -o names its file): give "
                "--step N --as-trace"
            )
        write_step_trace(path, step, policy, params, output)
        return
    if step is not None:
        show(fmt, explain_step(path, step, policy, params), step_view, StepView.to_json)
        return
    tid = parse_id_option(task) if task is not None else None
    sid = parse_id_option(session) if session is not None else None
    lives = explain_lives(path, tid=tid, sid=sid, policy=policy, params=params)
    show(fmt, lives, lives_view, lambda found: [life.to_json() for life in found])


def write_step_trace(
    path: str, step: int, policy: str | None, params: Mapping[str, object], output: str
) -> None:
    """``explain --step N --as-trace``: the step from its state, with its expect, written
    atomically to ``output`` (``-``: standard output)."""
    from ...engine.levels.task.states import step_as_trace
    from ...streams.output import atomic_output

    lines = step_as_trace(path, step, policy=policy, params=params)
    with atomic_output(output) as out:
        out.write(b"".join(lines))
