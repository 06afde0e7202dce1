"""The held-out bare loop over vLLM's Scheduler (bench/vllm_bare.py) as the vLLM tests ask
it, in this process or as a script under any interpreter with vLLM; and the steps a trace
holds, in the form the loop gives them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import orjson

from bench import vllm_bare
from tests.helpers import ROOT

BARE = ROOT / "bench" / "vllm_bare.py"
bare_loop = vllm_bare.bare_loop  # in this process, with the vLLM here


class Bare:
    """``PYTHON bench/vllm_bare.py`` in the repository's folder (where a case's scheduler
    class imports from), asked one case a line."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.process = subprocess.Popen(
            [python, str(BARE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=ROOT,
        )
        self.version = subprocess.run(
            [python, str(BARE), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()

    def answer(self, case: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(case) + "\n")
        line = self.process.stdout.readline()
        assert line, f"{self.python} {BARE} ended without answering (its stderr above)"
        found: dict[str, Any] = json.loads(line)
        return found

    def steps(
        self, requests: list[dict[str, Any]], params: dict[str, Any], **case: Any
    ) -> list[Any]:
        answer = self.answer({"requests": requests, "params": params, **case})
        assert "steps" in answer, answer
        found: list[Any] = answer["steps"]
        return found

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def answers(python: str | None, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case's answer (``{"steps": ...}`` or ``{"refused": ...}``): in this process
    (``python`` None), else from one run of the script by ``python``."""
    if python is None:
        return [vllm_bare.answer(case) for case in cases]
    bare = Bare(python)
    try:
        return [bare.answer(case) for case in cases]
    finally:
        bare.close()


def trace_steps(trace: Path) -> list[Any]:
    """Each step of a trace as the bare loop gives one: [batch, preempted, finished]."""
    found = []
    for line in trace.read_bytes().splitlines()[1:]:
        event = orjson.loads(line)
        if event.get("op") == "step":
            e = event["expect"]
            found.append([e["batch"], e["preempted"], e["finished"]])
    return found
