"""A request-level recording's steps, timed (``fit``) by each step's ``wall``."""

from __future__ import annotations

from collections import deque
from typing import Any

from ....formats.requests import RequestReader
from ....formats.requests.schema import Arrive, Schedule, Update
from ....formats.trace import open_trace
from ....model.errors import InputError
from ....model.task import Id, id_key
from ..facts import TimedStep


def timed_steps(path: str) -> tuple[list[TimedStep], int]:
    """A request-level recording's steps, each timed by its ``wall`` (schedule to outputs;
    a split step's is on its update). Decodes and context come from each request's
    computed tokens, followed through the steps (context is left out where prefix caching
    may have skipped some)."""
    steps: list[TimedStep] = []
    idle = 0
    timed = False
    planned: deque[TimedStep] = deque()  # split steps awaiting their update
    state = _Requests()
    with open_trace(path) as reader:
        for _, event in RequestReader(reader):
            kind = type(event)
            if kind is Arrive:
                state.arrive(event)  # type: ignore[arg-type]
                continue
            expect: Any = getattr(event, "expect", None)
            if kind is Update:
                step = planned.popleft() if planned else None
                state.finish(expect.finished if expect is not None else ())
            elif expect is None:
                continue
            else:
                step = state.plan(expect, getattr(event, "sampled", None) is not None)
                if kind is Schedule:
                    planned.append(step)
                    continue
                state.finish(expect.finished)
            wall = getattr(event, "wall", None)
            if step is None or wall is None:
                continue
            timed = True
            if step.tokens == 0:
                idle += 1
            else:
                step.seconds = wall
                steps.append(step)
    if not timed:
        raise InputError(path, None, "no step with a wall time: nothing to fit")
    return steps, idle


class _Requests:
    """Each request's known and computed tokens, as a recording's steps move them."""

    def __init__(self) -> None:
        self.known: dict[tuple[type, Id], list[int]] = {}  # [known, computed, prompt]
        self.cached = False

    def arrive(self, event: Arrive) -> None:
        prompt = len(event.tokens) if event.tokens is not None else event.prompt_tokens or 0
        self.known[id_key(event.rid)] = [prompt, 0, prompt]

    def plan(self, expect: Any, cached: bool) -> TimedStep:
        self.cached = self.cached or cached
        tokens = decodes = context = 0
        for s in expect.batch:
            tokens += s.tokens
            state = self.known.get(id_key(s.rid))
            if state is None:
                continue
            if s.tokens == 1 and state[1] == state[0] - 1 and state[0] > state[2]:
                decodes += 1
            state[1] += s.tokens
            context += state[1]
            if state[1] >= state[0]:
                state[0] += 1  # it samples a token
        for rid in expect.preempted:
            if id_key(rid) in self.known:
                self.known[id_key(rid)][1] = 0
        return TimedStep(tokens, decodes, None if self.cached else context, 0.0)

    def finish(self, finished: Any) -> None:
        for rid in finished:
            self.known.pop(id_key(rid), None)
