"""The step clock: the trace's step mode, decided as events arrive, and when get_work is due.

A trace is plain until its first ``get_work`` (then explicit) or its first event with a
``step`` (then stepped). Plain mode calls get_work only after the last event, so switching
out of it loses nothing, and the input is read once: files, ``.gz`` and pipes alike.
"""

from __future__ import annotations

from typing import Final

from ..formats.trace import Event
from ..model.errors import InputError
from ..model.limits import INT_MAX

EXPLICIT: Final = "explicit"
STEPPED: Final = "stepped"
PLAIN: Final = "plain"


class StepClock:
    """Numbers explicit steps and tells the driver when a stepped trace's step advances."""

    def __init__(self, trace_name: str) -> None:
        self.trace_name = trace_name
        self.mode = PLAIN
        self._mode_line = 0
        self._mode_cause = "get_work"  # what made the trace explicit, for a message
        # Explicit mode: the number the next get_work event gets.
        self.next_explicit = 0
        # Stepped and plain: the step the events being applied belong to (None: no event
        # yet). An event without a step belongs to the step of the one before (0 at first).
        self.current: int | None = None

    def start(self, step: int, line: int) -> None:
        """A trace that begins from a state (its line ``line``): explicit, its first
        get_work numbered ``step`` (docs/trace-format.md)."""
        self.mode = EXPLICIT
        self._mode_line = line
        self._mode_cause = "state line"
        self.next_explicit = step

    def get_work_step(self, event: Event) -> int:
        """The step number of a get_work event; an error in a stepped trace."""
        if self.mode is not EXPLICIT:
            if self.mode is STEPPED:
                raise InputError(
                    self.trace_name,
                    event.line,
                    f"get_work in a stepped trace (line {self._mode_line} gave a step, so "
                    "get_work is called once per step); a trace uses get_work events or "
                    "steps, not both",
                )
            self.mode = EXPLICIT
            self._mode_line = event.line
        step = self.next_explicit
        if step > INT_MAX:  # every step a replay writes is int64 (a state's step sets it)
            raise InputError(
                self.trace_name,
                event.line,
                f"this get_work would be step {step}, past {INT_MAX} (2^63-1), the largest "
                f"step schedcli writes (the {self._mode_cause} at line {self._mode_line} "
                "numbers the steps from its own)",
            )
        self.next_explicit = step + 1
        return step

    def advance(self, event: Event) -> tuple[int, int] | None:
        """For an event that is not get_work: ``(old, new)`` when it moves the step on."""
        step = event.step
        current = self.current
        if step is None:
            if current is None:
                self.current = 0
            return None
        if self.mode is not STEPPED:
            if self.mode is EXPLICIT:
                raise InputError(
                    self.trace_name,
                    event.line,
                    f"{event.op} with a step in an explicit trace (the {self._mode_cause} at "
                    f"line {self._mode_line} made it one); a trace uses get_work events or steps, "
                    "not both",
                )
            self.mode = STEPPED
            self._mode_line = event.line
        if current is None:
            self.current = step
            return None
        if step > current:
            self.current = step
            return current, step
        return None

    def check(self, event: Event) -> None:
        """Apply ``event`` to the clock as a replay does (``Replayer.feed``), for a reader
        that checks the mode rules without replaying (``validate``)."""
        if event.op == "get_work":
            self.get_work_step(event)
        elif event.step is not None or self.current is None:
            self.advance(event)

    @property
    def final_step(self) -> int:
        """Stepped and plain: the step the last events belong to (0 if none)."""
        return self.current if self.current is not None else 0
