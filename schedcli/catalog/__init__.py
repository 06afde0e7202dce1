"""The policy catalog: every name ``-p`` takes, mapped to the class it builds.

It stands above runtimes/ (docs/architecture.md): the built-in task-level policies come
from policies/, the ones an outside runtime drives (``vllm``, ``vllm@``, ``vllm:``,
``cxx:``) from runtimes/, each imported where it is first asked for, by an import
statement the layers contract sees; plugins come from their entry points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model.requests import RequestScheduler


def _vllm() -> type[RequestScheduler]:
    from ..runtimes.vllm.policy import PREFIX, policy_class

    return policy_class(PREFIX)


# Request-level policies (model/requests.py), each by a function that imports its class
# when the name is asked for: vLLM's scheduler (runtimes/vllm/policy.py) needs the
# ``vllm`` extra, and no command that does not name it pays for its import.
REQUEST_POLICIES: dict[str, Callable[[], type[RequestScheduler]]] = {"vllm": _vllm}

# Plugins this process imported, or tried to (registry.py appends to it).
IMPORTED: list[str] = []


def plugin_imported() -> bool:
    """Whether a plugin was imported: its objects may count on the interpreter's teardown
    (a file closed when collected), so the command line then keeps it."""
    return bool(IMPORTED)


__all__ = ["IMPORTED", "REQUEST_POLICIES", "plugin_imported"]
