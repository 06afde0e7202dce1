"""What the request level's debugger side asks of its opened trace
(``opened.OpenRequestTrace``)."""

from __future__ import annotations

from typing import Protocol

from ....formats.requests import RequestReader
from ....model.requests import RequestScheduler


class RequestReplay(Protocol):
    name: str
    policy_name: str
    policy: RequestScheduler
    events: RequestReader
