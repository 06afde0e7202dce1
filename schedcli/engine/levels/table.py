"""The trace levels, by the name a trace's header gives (``"level"``; none: ``task``).

Every choice of level is made here, from a header, a file or a ``--check`` difference;
the rest of the package asks the level it gets (``tests/test_layout.py`` holds it so).
"""

from __future__ import annotations

from ...formats.kinds import header_level
from ...formats.schema import accept_level
from ...formats.trace import Header
from ...model.errors import StepMismatch
from ...model.scheduler import Policy
from . import Level
from .request import LEVEL as REQUEST
from .task import LEVEL as TASK

LEVELS: dict[str, Level] = {}
DEFAULT = TASK.name  # a trace whose header names no level (or that has no header)


def register(level: Level) -> None:
    """``level`` found by its name, which a trace's header may then give (the formats'
    schema accepts the names registered here)."""
    LEVELS[level.name] = level
    accept_level(level.name)


register(TASK)
register(REQUEST)


def level_named(name: str) -> Level:
    return LEVELS[name]


def level_of(header: Header | None) -> Level:
    """The level a trace's header says (validated by its schema)."""
    return LEVELS[header.level if header is not None else DEFAULT]


def level_of_file(path: str) -> Level:
    """The level the header of the trace at ``path`` names (``-``: stdin, read ahead); a
    file that cannot be read, or whose header names no level it has, is task-level (its
    reader then says why)."""
    return LEVELS.get(header_level(path) or DEFAULT) or LEVELS[DEFAULT]


def level_of_difference(error: StepMismatch) -> Level:
    """The level whose replay found a ``--check`` difference."""
    return LEVELS[error.level]


def level_of_policy(policy: Policy) -> Level:
    """The level whose seam ``policy`` implements (``Policy.level``)."""
    return LEVELS[policy.level]
