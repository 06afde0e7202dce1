"""In-process fuzz targets: each runs schedcli's own entry point on one input.

A target fails (and the fuzzer reports a crash) when schedcli ends in anything but a
verdict or a located error: an internal error (exit 4), a traceback, or a contract
break by a built-in policy (exit 3). Hangs and memory are the fuzzer's own limits.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from schedcli.testing import run_cli_in_process

Target = Callable[[bytes], None]


def run(*args: str) -> tuple[int, str]:
    """``schedcli ARGS`` in this process: the exit code and stderr."""
    done = run_cli_in_process(args)
    return done.code, done.stderr.decode("utf-8", "replace")


def expect(code: int, err: str, allowed: tuple[int, ...], what: str) -> None:
    if code not in allowed or "internal error" in err or "Traceback" in err:
        raise AssertionError(f"{what}: exit {code}\n{err}")


def _with_file(data: bytes, suffix: str, body: Callable[[str, str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="schedcli-fuzz-") as tmp:
        path = os.path.join(tmp, "input" + suffix)
        with open(path, "wb") as f:
            f.write(data)
        body(path, tmp)


POLICIES = ("decode-first", "fcfs", "fair", "sjf", "prefill-first", "priority")


def replay(data: bytes) -> None:
    # The input's length picks the policy: every built-in gets its share of inputs.
    policy = POLICIES[len(data) % len(POLICIES)]

    def body(path: str, tmp: str) -> None:
        code, err = run("replay", path, "-p", policy, "--drain", "--check", "-o", os.devnull)
        expect(code, err, (0, 1, 2), f"replay -p {policy}")

    _with_file(data, ".jsonl", body)


def validate(data: bytes) -> None:
    def body(path: str, tmp: str) -> None:
        code, err = run("validate", path)
        expect(code, err, (0, 2), "validate")

    _with_file(data, ".jsonl", body)


def convert_simulate(data: bytes) -> None:
    def body(path: str, tmp: str) -> None:
        workload = os.path.join(tmp, "w.jsonl")
        for fmt, extra in (("auto", ()), ("lengths", ("--rate", "5"))):
            code, err = run("convert", fmt, path, *extra, "-o", workload)
            expect(code, err, (0, 2), f"convert {fmt}")
            if code == 0:
                code, err = run("simulate", workload, "-f", "json", "-o", os.devnull)
                expect(code, err, (0, 2), "simulate")
        code, err = run("simulate", path, "-f", "json")  # the input as a workload itself
        expect(code, err, (0, 2), "simulate (raw)")

    _with_file(data, ".csv", body)


def diff(data: bytes) -> None:
    def body(path: str, tmp: str) -> None:
        code, err = run("diff", path, "--b", "fcfs", "-f", "json")
        expect(code, err, (0, 1, 2), "diff (trace)")
        code, err = run("diff", path, path, "-f", "json")  # the input as a dump
        expect(code, err, (0, 2), "diff (dumps)")

    _with_file(data, ".jsonl", body)


TARGETS: dict[str, Target] = {
    "replay": replay,
    "validate": validate,
    "convert-simulate": convert_simulate,
    "diff": diff,
}
