"""The debugger's verdict, from what its index says at the end: the exit code and the line
said on stderr, as the one-shot commands give them (``replay --check``, ``replay
--golden``, ``diff``). ``judge`` reaches it without a screen or a server: the session run
once in this process, as the server runs it, judged by the same ``verdict``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model.errors import Option, Said
from ..run import open_replay
from .server import ending_of
from .session import Compare, Hooks, Session


@dataclass(frozen=True)
class Verdict:
    exit: int
    # The line said on stderr, if any: its words and the options it names, which the app
    # words as flags (app.usage.flag_text); ``str`` each part for the plain words.
    said: tuple[Said, ...] | None


def verdict(indexed: Mapping[str, Any] | None, label: str | None, steps: int) -> Verdict:
    """``indexed``: the server's last message (the steps, how the replay stopped, what the
    comparison found); None if the index never reached the end (no verdict, exit 0).

    A step or any other record (a submit's outcome, a cancel's or clear's dropped tasks,
    the end's counts) that differs is exit 1; a contract break is exit 3, unless the golden
    pins it (exit 0: every record the same, the break too) or pins another (exit 1)."""
    if indexed is None:
        return Verdict(
            0, (f"debug: quit with {steps:,} steps indexed, before the end: no verdict",)
        )
    ending = indexed.get("ending")
    compared = indexed.get("compared")
    if ending is not None:
        if ending.get("broke") and label == "golden" and compared is not None:
            if compared["identical"]:
                return Verdict(
                    0,
                    (
                        f"{ending['message']}\ndebug: matches the golden, including the "
                        "contract break it pins (exit 3 expected)",
                    ),
                )
            if compared["pins_a_break"]:
                return Verdict(1, (f"{ending['message']}\n", *_differs(compared, label)))
        return Verdict(int(ending["exit"]), (ending["message"],))
    if label is not None and compared is not None and not compared["identical"]:
        return Verdict(1, _differs(compared, label))
    return Verdict(0, None)


def _differs(compared: Mapping[str, Any], label: str) -> tuple[Said, ...]:
    steps, records = compared["steps"], compared["records"]
    parts = []
    if steps:
        parts.append(f"{steps} {'step' if steps == 1 else 'steps'}")
    if records:
        parts.append(f"{records} other {'record' if records == 1 else 'records'}")
    n = steps + records
    what = " and ".join(parts) + (" differs" if n == 1 else " differ")
    first = compared.get("first")
    where = f", the first at step {first}" if first is not None else ""
    other: Said = Option("against", "policy") if label == "against" else label
    return (f"debug: {what} from the ", other, where)


class _Unseen:
    """Hooks that keep nothing: the verdict needs only the session's comparison."""

    def side_step(self, side: int, step: int, record: Any) -> None:
        pass

    def aligned(self, step: int, records: Any, other: Any) -> None:
        pass

    def mark(self, step: int, kind: str, *text: Said) -> None:
        pass

    def event(self, record: Any, step: int) -> None:
        pass


def judge(
    path: str,
    *,
    policy: str | None = None,
    params: Mapping[str, object] | None = None,
    compare: Compare | None = None,
    allow_incomplete: bool = False,
    hooks: Hooks | None = None,
) -> Verdict:
    """What ``schedcli debug`` says on quitting once its index reached the end, without the
    screen: the server's session run here, its end judged by ``verdict``. ``hooks``: told
    what the server is told (its marks), if given."""
    compare = compare or Compare()
    hooks = hooks or _Unseen()
    with open_replay(
        path,
        policy=policy,
        params=params or {},
        note=lambda _: None,
        allow_incomplete=allow_incomplete,
    ) as opened:
        session = Session(opened, compare, hooks, allow_incomplete)
        ending = None
        try:
            session.run()
        except Exception as e:  # as the server: every stop is the verdict's
            ending = ending_of(e, session.steps)
        indexed = {"steps": session.steps, "ending": ending, "compared": session.compared()}
    return verdict(indexed, compare.label, session.steps)


__all__ = ["Verdict", "judge", "verdict"]
