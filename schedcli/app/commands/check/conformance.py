"""``schedcli conformance``: ExecuTorch's own scheduler tests, re-expressed as traces and
shipped in the package (``runtimes/executorch/conformance/``, whose README lists them),
checked as ``check`` checks a folder, under the policy the command line gives.

``contract/`` holds what any Scheduler keeps, so its traces pin no policy's batches: they
have no golden, and pass on their expects (each one forced by the contract) and on the
engine's checks of every call. ``decode-first/`` holds DecodeFirstScheduler's own batches,
each trace with its golden."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ....runtimes.executorch import conformance_dir
from ...config import Config, FolderSettings
from .suite import CheckRequest

CONTRACT = "contract"


def conformance_request(
    parts: Sequence[str], policy: str | None, params: dict[str, object], jobs: int | None
) -> tuple[CheckRequest, Config]:
    """The check of ``parts`` of the shipped suite, and the settings it is checked with
    (the suite's own: never the project's ``[tool.schedcli]``, which is about its traces)."""
    root = Path(conformance_dir())
    folders = [root / part for part in dict.fromkeys(parts)]
    config = Config(folders={(root / CONTRACT).resolve(): FolderSettings(golden="optional")})
    req = CheckRequest([str(f) for f in folders], jobs=jobs, policy=policy, params=params)
    return req, config
