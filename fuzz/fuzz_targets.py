"""In-process fuzz targets: each runs schedcli's own entry point on one input.

A target fails (and the fuzzer reports a crash) when schedcli ends in anything but a
verdict or a located error: an internal error (exit 4), a traceback, or a contract
break by a built-in policy (exit 3). Hangs and memory are the fuzzer's own limits.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable

import orjson

from schedcli import Scheduler, Task
from schedcli.app.inprocess import run_cli_in_process
from schedcli.catalog.registry import build_policy
from schedcli.policies import REQUEST_POLICIES, FcfsScheduler
from schedcli.record import RecordingScheduler
from schedcli.runtimes.vllm import policy as vllm_policy

Target = Callable[[bytes], None]

# vLLM takes 20 s and 1 GB to import, far past a fuzz input's 10 s: an input that asks for
# `-p vllm` (a request-level header) gets the answer of a machine without the extra, but
# under the requests-vllm target (run.py sets SCHEDCLI_FUZZ_VLLM, and a longer time limit).
if not os.environ.get("SCHEDCLI_FUZZ_VLLM"):
    vllm_policy.available = lambda: "vLLM is not loaded while fuzzing"

# The request level without vLLM: the tests' toy policy (tests/plugin_policies.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOY = "tests.doubles:ToyRequests"
# A trace header names a policy that is installed or configured, never an import string: the
# toy is registered under its name here, as an installed plugin's would be.
REQUEST_POLICIES["toy-requests"] = "tests.doubles.requests:ToyRequests"


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


# --- the second campaign's surfaces ---------------------------------------------------------

WORKLOAD = b'{"sid": 1, "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}\n'
NUMBERS = ("0", "1", "-1", "0.5", "1e-320", "1e200", "nan", "inf", "-inf", "x", "2.5", "1e9")


def _pick(data: bytes, i: int, choices: tuple[str, ...]) -> str:
    return choices[data[i % len(data)] % len(choices)] if data else choices[0]


def sweep_spec(data: bytes) -> None:
    """The input as a sweep spec (after a valid head), and its first line as a --grid."""

    def body(path: str, tmp: str) -> None:
        workload = os.path.join(tmp, "w.jsonl")
        with open(workload, "wb") as f:
            f.write(WORKLOAD)
        spec = os.path.join(tmp, "s.toml")
        with open(spec, "wb") as f:
            f.write(f'workloads = ["{workload}"]\npolicies = ["fcfs"]\n'.encode() + data)
        cache = os.path.join(tmp, "cache")
        code, err = run("sweep", "--spec", spec, "-j", "1", "--cache", cache, "-o", os.devnull)
        expect(code, err, (0, 2), "sweep --spec")
        grid = data.split(b"\n", 1)[0].decode("utf-8", "replace")[:60] or "time_scale=1"
        code, err = run("sweep", workload, "-p", "fcfs", "--grid", grid, "-j", "1",
                        "--cache", cache, "-o", os.devnull)  # fmt: skip
        expect(code, err, (0, 2), f"sweep --grid {grid!r}")

    _with_file(data, ".toml", body)


def convert_options(data: bytes) -> None:
    """Numeric options picked by the input's first bytes; the input itself as the file."""
    options = [
        "--rate", _pick(data, 0, NUMBERS), "--cv", _pick(data, 1, NUMBERS),
        "--start", _pick(data, 2, NUMBERS), "--time-scale", _pick(data, 3, NUMBERS),
        "--limit", _pick(data, 4, ("1", "0", "-3", "x", "100")),
    ]  # fmt: skip
    if data and data[0] % 3 == 0:
        options += ["--duration", _pick(data, 5, NUMBERS)]

    def body(path: str, tmp: str) -> None:
        workload = os.path.join(tmp, "w.jsonl")
        for fmt in ("lengths", "azure", "auto"):
            chosen = options if fmt == "lengths" else options[2:]
            code, err = run("convert", fmt, path, *chosen, "-o", workload)
            expect(code, err, (0, 2), f"convert {fmt} {' '.join(chosen)}")
            if code == 0:
                code, err = run("simulate", workload, "-f", "json", "-o", os.devnull,
                                "--slo-ttft", _pick(data, 6, NUMBERS))  # fmt: skip
                expect(code, err, (0, 2), "simulate")

    _with_file(data, ".csv", body)


def shrink(data: bytes) -> None:
    """The input as a trace, shrunk under one --until kind (picked by its length)."""
    until = ("check", "contract", "diff:fcfs", "cmd:grep -q get_work {}")[len(data) % 4]

    def body(path: str, tmp: str) -> None:
        out = os.path.join(tmp, "small.jsonl")
        code, err = run("shrink", path, "--until", until, "--max-time", "3", "-o", out)
        expect(code, err, (0, 2), f"shrink --until {until}")

    _with_file(data, ".jsonl", body)


def fit_cost(data: bytes) -> None:
    """The input as a recording to fit, and as a cost model for simulate."""

    def body(path: str, tmp: str) -> None:
        workload, cost = os.path.join(tmp, "w.jsonl"), os.path.join(tmp, "cost.json")
        with open(workload, "wb") as f:
            f.write(WORKLOAD)
        code, err = run("fit", path, "-o", cost)
        expect(code, err, (0, 2), "fit")
        if code == 0:  # every model fit writes, simulate takes
            code, err = run("simulate", workload, "--cost", cost, "-f", "json")
            expect(code, err, (0,), "simulate --cost (a fitted model)")
        code, err = run("simulate", workload, "--cost", path, "-f", "json")
        expect(code, err, (0, 2), "simulate --cost (the input)")

    _with_file(data, ".jsonl", body)


def report_sweep(data: bytes) -> None:
    def body(path: str, tmp: str) -> None:
        code, err = run("report", path, "-o", os.path.join(tmp, "r.html"))
        expect(code, err, (0, 2), "report")
        if "Warning" in err:
            raise AssertionError(f"report let a library warning through:\n{err}")

    _with_file(data, ".jsonl", body)


TARGETS["sweep-spec"] = sweep_spec
TARGETS["convert-options"] = convert_options
TARGETS["shrink"] = shrink
TARGETS["fit-cost"] = fit_cost
TARGETS["report-sweep"] = report_sweep


# --- the Python recorder: random calls from two threads, then replay --check ---------------


class RaisesOnNth(FcfsScheduler):
    """fcfs that raises on its seventh get_work: a broken plugin, for the recorder target.
    Nameless, so a recording names it ``fuzz_targets:RaisesOnNth`` and its replay loads it."""

    name = ""
    calls = 0

    def get_work(self) -> list[Task]:
        type(self).calls += 1
        if type(self).calls == 7:
            raise RuntimeError("the seventh get_work fails")
        return super().get_work()


def recorder(data: bytes) -> None:
    import threading

    raising = data[:1] == b"!"
    inner: Scheduler
    if raising:
        RaisesOnNth.calls = 0
        inner = RaisesOnNth(max_prefill_chunk_size=64)
    else:
        policy = POLICIES[len(data) % len(POLICIES)]
        inner = build_policy(policy, {"max_prefill_chunk_size": 64})
    tids = iter(range(1, 1 << 30))
    lock = threading.Lock()

    def program(rec: RecordingScheduler, part: bytes) -> None:
        for b in part:
            op, sid = b % 8, (b >> 3) % 5
            try:
                if op < 4:
                    with lock:
                        tid = next(tids)
                    rec.submit([Task(tid, sid, "decode", 1)])
                elif op == 4:
                    with lock:
                        first, second = next(tids), next(tids)
                    size = 1 + (b >> 3)
                    rec.submit([Task(first, sid, "prefill", size), Task(second, sid, "prefill", 3)])
                elif op == 5:
                    rec.cancel(sid)
                elif op == 6 or sid:
                    rec.get_work()
                else:
                    rec.clear()
            except RuntimeError:
                return

    with tempfile.TemporaryDirectory(prefix="schedcli-fuzz-") as tmp:
        path = os.path.join(tmp, "rec.jsonl")
        with RecordingScheduler(inner, path) as rec:
            half = len(data) // 2
            threads = [
                threading.Thread(target=program, args=(rec, part))
                for part in (data[:half], data[half:])
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            try:
                while rec.has_work():
                    rec.get_work()
            except RuntimeError:
                pass
        code, err = run("replay", path, "--check", "-o", os.devnull)
        if raising:  # the replay makes the same calls: the plugin raises at the same one
            expect(code, err, (0, 2), "replay --check of a recording whose policy raised")
            if code == 2 and "raised in get_work" not in err and "nothing to check" not in err:
                raise AssertionError(f"replay of a raising recording: {err}")
        else:
            expect(code, err, (0, 2), "replay --check of a recording")
            if code == 2 and "nothing to check" not in err:
                raise AssertionError(f"a recording did not replay: {err}")


# --- compiled against pure Python: the same bytes out -----------------------------------------


def _cli(args: list[str], pure: bool) -> tuple[int, bytes, bytes]:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SCHEDCLI_PURE_PYTHON"}
    if pure:
        env["SCHEDCLI_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "schedcli", *args], capture_output=True, env=env, timeout=30
    )
    return done.returncode, done.stdout, done.stderr


_compiled_checked = False


def compiled_pure(data: bytes) -> None:
    """The input as a trace: replay (dump), stats and diff, compiled and pure, byte for byte."""
    global _compiled_checked
    if not _compiled_checked:
        _, out, _ = _cli(["--version"], pure=False)
        if b"(compiled)" not in out:
            raise SystemExit("compiled-pure needs the compiled core: pip install -e . first")
        _compiled_checked = True
    policy = POLICIES[len(data) % len(POLICIES)]

    def body(path: str, tmp: str) -> None:
        for args in (
            ["replay", path, "-p", policy, "-f", "jsonl", "--drain"],
            ["stats", path, "-p", policy, "-f", "json"],
            ["diff", path, "--b", "fair", "--b-param", "prefill_weight=0", "-f", "json"],
        ):
            compiled, pure = _cli(args, pure=False), _cli(args, pure=True)
            if compiled != pure:
                # Run again: a side that differs from itself is a determinism bug, not a
                # compiled/pure one (the failure says which).
                again = _cli(args, pure=False), _cli(args, pure=True)
                raise AssertionError(
                    f"compiled and pure differ on {args}:\n{compiled}\n{pure}\n"
                    f"run again, compiled {'same' if again[0] == compiled else again[0]}, "
                    f"pure {'same' if again[1] == pure else again[1]}"
                )

    _with_file(data, ".jsonl", body)


TARGETS["recorder"] = recorder
TARGETS["compiled-pure"] = compiled_pure


# --- the request level, the suites, the recorder's ids -----------------------------------------


REQUEST_HEADER = b'{"schedcli":1,"level":"request","policy":"%s","params":%s}\n'


def _request_trace(data: bytes, policy: str) -> bytes:
    """The input as a request-level trace: as it is when it has a header, else after one
    naming ``policy`` (the input's first byte picks small limits, so steps split)."""
    if data.lstrip().startswith(b'{"schedcli"'):
        return data
    seqs, budget = 1 + (data[:1] or b"\x00")[0] % 4, 8 + 8 * ((data[1:2] or b"\x00")[0] % 8)
    params = b'{"max_num_seqs":%d,"max_num_batched_tokens":%d}' % (seqs, budget)
    if policy == "vllm":
        params = params[:-1] + b',"num_gpu_blocks":64,"block_size":16,"max_model_len":1008}'
    named = "toy-requests" if policy == TOY else policy
    return REQUEST_HEADER % (named.encode(), params) + data


def _requests(data: bytes, policy: str) -> None:
    """A request-level trace through every command that reads one."""
    pick = ["-p", policy] if policy != "vllm" else []
    bare = policy == "vllm" and b"skip_kv_startup_check" in data

    def body(path: str, tmp: str) -> None:
        for args, allowed in (
            (["validate", path, *pick], (0, 2)),
            (["replay", path, *pick, "-f", "table", "-o", os.devnull], (0, 2)),
            (["replay", path, *pick, "--check", "--require-all", "-o", os.devnull], (0, 1, 2)),
            (["replay", path, *pick, "--drain", "-f", "jsonl", "-o", os.devnull], (0, 2)),
            (["stats", path, *pick, "-f", "json"], (0, 2)),
            (["explain", path, *pick, "--step", "1"], (0, 2)),
            (["convert", "requests", path, "-o", os.path.join(tmp, "w.jsonl")], (0, 2)),
            (["shrink", path, *pick, "--until", "check", "--max-time", "2",
              "-o", os.path.join(tmp, "s.jsonl")], (0, 2)),
        ):  # fmt: skip
            code, err = run(*args)
            if code == 3 and bare and ("stalled since" in err or "cycles without" in err):
                continue  # vLLM's scheduler run past the engine's start-up check may stall
            expect(code, err, allowed, " ".join(args[:1] + args[2:]))
        suite = os.path.join(tmp, "suite")
        os.makedirs(suite)
        os.replace(path, os.path.join(suite, "t.jsonl"))
        for extra in (["--update"], []):
            code, err = run("check", suite, "-j", "1", "--allow-incomplete", *extra)
            expect(code, err, (0, 1, 2, 3) if bare else (0, 1, 2), "check of a request trace")

    _with_file(_request_trace(data, policy), ".jsonl", body)


def requests(data: bytes) -> None:
    _requests(data, TOY)


def requests_vllm(data: bytes) -> None:
    _requests(data, "vllm")


def _suite_name(data: bytes, i: int) -> str:
    """A file name the input spells: odd characters, control characters, spaces."""
    raw = data[i : i + 6] or b"t"
    name = raw.decode("latin-1").replace("/", "_").replace("\x00", "_").strip(".") or "t"
    return name


def check_suite(data: bytes) -> None:
    """A suite the input lays out: traces under odd names, goldens right, cut or missing,
    a twin claiming one golden, links back into the suite, a configuration from the
    input's tail; check (and --update, and a JUnit report a parser must read)."""
    import shutil
    import xml.etree.ElementTree as ET

    import orjson

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    examples = sorted(
        os.path.join(root, "traces", n) for n in os.listdir(os.path.join(root, "traces"))
        if n.endswith(".jsonl")
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="schedcli-fuzz-") as tmp:
        suite = os.path.join(tmp, "suite")
        os.makedirs(os.path.join(suite, "golden"))
        for i, byte in enumerate(data[:12]):
            example = examples[byte % len(examples)]
            name = _suite_name(data, i * 3)
            folder = os.path.join(suite, "sub") if byte & 0x40 else suite
            os.makedirs(os.path.join(folder, "golden"), exist_ok=True)
            trace = os.path.join(folder, name + (".jsonl.gz" if byte & 0x80 else ".jsonl"))
            shutil.copy(example, trace)
            golden = os.path.join(root, "traces", "golden", os.path.basename(example)[:-6])
            state = (byte >> 4) % 3
            if state < 2:
                copy = os.path.join(folder, "golden", name + ".dump.jsonl")
                with open(golden + ".dump.jsonl", "rb") as f, open(copy, "wb") as g:
                    body = f.read()
                    g.write(body if state == 0 else body[: len(body) // 2])
            if byte & 0x08:
                os.symlink(".." if byte & 0x04 else ".", os.path.join(folder, f"link{i}"))
        tail = data[12:200].decode("utf-8", "replace")
        with open(os.path.join(tmp, "pyproject.toml"), "w") as f:
            f.write('[tool.schedcli]\ntraces = ["suite"]\n' + tail)
        report = os.path.join(tmp, "junit.xml")
        here = os.getcwd()
        for args in (["--update"], ["-f", "json"], ["--junit-xml", report], ["--no-strict"]):
            os.chdir(tmp)  # the project is the suite's: its pyproject.toml, paths below it
            try:
                done = run_cli_in_process(["check", "-j", "1", *args])
            finally:
                os.chdir(here)
            err = done.stderr.decode("utf-8", "replace")
            expect(done.code, err, (0, 1, 2), f"check {' '.join(args)}")
            if args[0] == "-f" and done.code in (0, 1):
                for line in done.stdout.splitlines():
                    orjson.loads(line)
        if os.path.exists(report):
            ET.parse(report)  # well-formed, whatever the names


def recorder_ids(data: bytes) -> None:
    """Ids and metas the trace format cannot hold, among ones it can: the recorder refuses
    the former before the policy sees them, and the recording replays with --check."""
    ids: tuple[object, ...] = (
        1, "a", True, 2**63, -(2**63) - 1, 2**64, 2**63 - 1, -(2**63), "", "\ud800", "é",
    )  # fmt: skip
    metas: tuple[object, ...] = (None, {"k": [1, "x"]}, {1: 2}, object(), "m")
    with tempfile.TemporaryDirectory(prefix="schedcli-fuzz-") as tmp:
        path = os.path.join(tmp, "rec.jsonl")
        inner = build_policy(POLICIES[len(data) % len(POLICIES)], {})
        with RecordingScheduler(inner, path) as rec:
            for n, byte in enumerate(data):
                tid, sid = ids[byte % len(ids)], ids[(byte >> 4) % len(ids)]
                meta = metas[(byte + n) % len(metas)]
                if isinstance(tid, int) and not isinstance(tid, bool) and -(2**62) < tid < 2**62:
                    tid = tid * 1000 + n  # unique
                task = Task(tid, sid, "decode", 1, meta=meta)  # type: ignore[arg-type]
                refused = rec.try_submit([task])
                writable = all(_writable_id(x) for x in (tid, sid)) and _writable_meta(meta)
                if writable != (refused is None or "cannot be recorded" not in refused):
                    raise AssertionError(f"recorder: {tid!r}, {sid!r}, {meta!r} -> {refused!r}")
                if byte % 3 == 0:
                    rec.get_work()
            while rec.has_work():
                rec.get_work()
        code, err = run("replay", path, "--check", "-o", os.devnull)
        expect(code, err, (0, 2), "replay --check of a recording with refused ids")
        if code == 2 and "nothing to check" not in err:
            raise AssertionError(f"a recording did not replay: {err}")


def _writable_id(x: object) -> bool:
    if type(x) is int:
        return -(2**63) <= x < 2**63
    return type(x) is str and x != "\ud800"


def _writable_meta(meta: object) -> bool:
    return meta is None or type(meta) is str or (type(meta) is dict and 1 not in meta)


TARGETS["requests"] = requests
TARGETS["requests-vllm"] = requests_vllm
TARGETS["check-suite"] = check_suite
TARGETS["recorder-ids"] = recorder_ids


# --- the stall watch: "never" only where it is proven ------------------------------------

NEVER = ("will never schedule", "repeat those steps forever", "it never will")


def stalls(data: bytes) -> None:
    """A policy the input configures (tests/doubles/stalls.py): a counter kept where no walk
    of the object sees it, a call that resumes (or never does, or cycles), a fingerprint of
    its own or none; replayed (drained, or held at the end) or simulated under a bound the
    input picks. Every "never" said must hold when the same policy runs on for many more
    steps; one without a fingerprint of its own is never said to be stuck for good."""
    from tests.doubles import stalls as odd

    b = (data + bytes(8))[:8]
    declares = b[0] % 2 == 1
    place = odd.PLACES[b[1] % len(odd.PLACES)]
    resume, period, tasks, steps = b[2] % 13, 2 + b[3] % 11, 1 + b[4] % 3, 1 + b[5] % 40
    how = ("drain", "end", "simulate")[b[6] % 3]
    cls = "OddStateDeclared" if declares else "OddState"

    def body(path: str, tmp: str) -> None:
        with open(path, "wb") as f:
            for i in range(tasks):
                line = b'{"op":"submit","tid":%d,"sid":%d,"kind":"decode","size":1}\n' % (i, i)
                f.write(line)
        if how == "simulate":
            workload = os.path.join(tmp, "w.jsonl")
            with open(workload, "wb") as f:
                for i in range(tasks):
                    f.write(b'{"sid":%d,"arrival":0,"prompt_tokens":1,"output_tokens":1}\n' % i)
            args = ["simulate", workload]
        else:
            args = ["replay", path, *(["--drain"] if how == "drain" else [])]
        params = ["-P", f"place={place}", "-P", f"resume={resume}", "-P", f"period={period}"]
        code, err = run(
            *args, "-p", f"tests.doubles.stalls:{cls}", *params, "--stall-steps", str(steps),
            "-o", os.devnull,
        )  # fmt: skip
        expect(code, err, (0, 3), f"{how} of {cls} place={place} resume={resume}")
        said = any(word in err for word in NEVER)
        if said and not declares:
            raise AssertionError(f"a policy declaring no fingerprint was said to be stuck:\n{err}")
        if said:
            policy = odd.OddStateDeclared(place, resume, period)
            policy.submit([Task(i, i, "decode", 1) for i in range(tasks)])
            for _ in range(20 * (steps + period) + 100):
                if policy.get_work():
                    raise AssertionError(f"said never, and it scheduled when run on:\n{err}")

    _with_file(data, ".jsonl", body)


TARGETS["stalls"] = stalls


# --- a trace is data: C++ specs, and the C++ boundary (#55) --------------------------------

# What the generated C++ may hold of a spec: an #include of one path or <name>, the factory
# built from grammar tokens, and the parameters' declarations.
_GENERATED = re.compile(
    rb'#include (?:"/[^"<>\\\n]*"|<[^"<>\\\n]*>)'
    rb"|static auto schedcli_factory\(const std::size_t\* schedcli_params\) \{"
    rb"|  const std::size_t [A-Za-z_][A-Za-z0-9_]* = schedcli_params\[\d+\];"
    rb"|  return (?:::)?[A-Za-z_][A-Za-z0-9_:<>, ]*\((?:[A-Za-z0-9_]+u?(?:, )?)*\);"
    rb"|\}"
    rb'|#define SCHEDCLI_MODULE "_schedcli_cxx_[0-9a-f]+"|#define SCHEDCLI_INIT \S+'
    rb"|#include <Python\.h>|#include <cstddef>"
)


def cxx_spec(data: bytes) -> None:
    """The input as a C++ spec, given on the command line, in a trace header and in a
    project's configuration: a spec outside the grammar is exit 2 before a compiler runs; a
    header's inline spec is never built; what reaches the compiler holds only lines the
    grammar makes (a spy compiler keeps the source it was handed)."""
    text = data.decode("utf-8", "replace")
    fifo = os.path.join(ROOT_DIR, "tests", "cpp", "schedulers", "fifo_scheduler.h")
    spec = text if data[:1] != b"=" else f"{fifo}{text}"

    def body(path: str, tmp: str) -> None:
        seen = os.path.join(tmp, "sources")
        spy = os.path.join(tmp, "spy")
        with open(spy, "w") as f:
            f.write(f'#!/bin/sh\n[ "$1" = --version ] && echo spy 1 && exit 0\n'
                    f'for a in "$@"; do case "$a" in *.cpp) cat "$a" >> {seen};; esac; done\n'
                    "exit 1\n")  # fmt: skip
        os.chmod(spy, 0o755)
        saved = {k: os.environ.get(k) for k in ("CXX", "SCHEDCLI_CXX_CACHE")}
        os.environ.update(CXX=spy, SCHEDCLI_CXX_CACHE=os.path.join(tmp, "cache"))
        try:
            with open(path, "wb") as f:
                f.write(orjson.dumps({"schedcli": 1, "policy": f"cxx:{spec}"}) + b"\n")
                f.write(b'{"op":"submit","tid":1,"sid":1,"kind":"decode","size":1}\n')
            code, err = run("validate", path)
            expect(code, err, (0, 2), "validate of a header naming a cxx: spec")
            if "=" in spec and code != 2:
                raise AssertionError(f"a trace header supplied a C++ spec:\n{err}")
            code, err = run("replay", path, "-p", f"cxx:{spec}", "-o", os.devnull)
            expect(code, err, (0, 2), "replay -p cxx:SPEC")
            project = os.path.join(tmp, "pyproject.toml")
            with open(project, "w") as f:
                f.write(f"[tool.schedcli.cxx.policies]\nx = {json.dumps(spec)}\n")
            code, err = run_in(tmp, "replay", path, "-p", "cxx:x")
            expect(code, err, (0, 2), "a configured cxx: spec")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if os.path.exists(seen):
            with open(seen, "rb") as f:
                source = f.read()
            head = source.split(b"// schedcli's boundary", 1)[0]
            for line in head.splitlines():
                if line.strip() and _GENERATED.fullmatch(line) is None:
                    raise AssertionError(f"the compiler was handed {line!r} from {spec!r}")

    _with_file(data, ".jsonl", body)


def run_in(folder: str, *args: str) -> tuple[int, str]:
    """``run`` with ``folder`` as the current folder (its pyproject.toml is read)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        return run(*args, "-o", os.devnull)
    finally:
        os.chdir(here)


def cxx_boundary(data: bytes) -> None:
    """A trace the input spells, through a C++ scheduler that hands back what it should not
    (tests/cpp/schedulers/crashing_scheduler.h: a task changed in a field, one returned
    twice, an earlier one kept under a reused tid) at the call the input picks, and through
    its Python twin (tests/plugin_policies.py BreakingTwin): the same exit code, and the
    contract broken at the same step and line."""
    b = (data + bytes(4))[:4]
    crash_at, how = 1 + b[0] % 6, (5, 15, 16, 17, 18, 19, 20, 21, 22, 23)[b[1] % 10]
    header = os.path.join(ROOT_DIR, "tests", "cpp", "schedulers", "crashing_scheduler.h")
    cxx = (f"cxx:{header}=std::make_unique<schedcli_test::CrashingScheduler>("
           f"crash_at={crash_at}, how={how})")  # fmt: skip
    twin = ["-p", "tests.plugin_policies:BreakingTwin", "-P", f"crash_at={crash_at}",
            "-P", f"how={how}"]  # fmt: skip
    ops: list[bytes] = []
    for i, x in enumerate(data[4:200]):
        op = x % 10
        if op < 5:
            tid, sid = (x >> 2) % 9 if i % 2 else i + 9, x % 4
            kind = b"decode" if x % 3 == 0 else b"prefill"
            size = 1 if kind == b"decode" else x % 7
            ops.append(b'{"op":"submit","tid":%d,"sid":%d,"kind":"%s","size":%d}' % (
                tid, sid, kind, size))  # fmt: skip
        elif op < 8:
            ops.append(b'{"op":"get_work"}')
        elif op == 8:
            ops.append(b'{"op":"cancel","sid":%d}' % (x % 4))
        else:
            ops.append(b'{"op":"clear"}')

    def body(path: str, tmp: str) -> None:
        with open(path, "wb") as f:
            f.write(b'{"schedcli":1}\n' + b"".join(o + b"\n" for o in ops))
        os.environ.setdefault("EXECUTORCH_ROOT", LATER)
        ours = run_cli_in_process(["replay", path, "-p", cxx, "--drain", "-o", os.devnull])
        other = run_cli_in_process(["replay", path, *twin, "--drain", "-o", os.devnull])
        a, b_ = ours.stderr.decode("utf-8", "replace"), other.stderr.decode("utf-8", "replace")
        expect(ours.code, a, (0, 2, 3), "replay under the C++ scheduler")
        if ours.code != other.code or _broken_at(a) != _broken_at(b_):
            raise AssertionError(f"the C++ and its Python twin part ways:\n{a}\n---\n{b_}")

    _with_file(data, ".jsonl", body)


def _broken_at(stderr: str) -> str | None:
    found = re.search(r"broke the Scheduler contract at step \d+ \([^)]*\)", stderr)
    return found.group(0) if found else None


ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATER = os.path.join(ROOT_DIR, "tests", "cpp", "later", "executorch")
TARGETS["cxx-spec"] = cxx_spec
TARGETS["cxx-boundary"] = cxx_boundary


# --- the debugger's answers (#55): each step's view is explain --step's, at both levels ---


def debug_views(data: bytes) -> None:
    """A trace the input spells, task-level (decode-first, with cancels and step numbers
    that skip) or request-level (the toy policy, with ids that arrive again while held),
    indexed by the debugger's time machine: at every step its queue (each entry's line and
    step), its reasons and its batch must be explain --step's."""
    from schedcli.engine.explain import explain_step
    from schedcli.engine.travel import Travel

    request = bool(data[:1]) and data[0] % 2 == 1
    lines: list[bytes] = []
    if request:
        lines.append(b'{"schedcli":1,"level":"request","policy":"toy-requests",'
                     b'"params":{"max_num_batched_tokens":16,"max_num_seqs":2}}')  # fmt: skip
        for x in data[1:120]:
            if x % 3:
                lines.append(b'{"op":"arrive","rid":"r%d","prompt_tokens":%d,"max_tokens":%d}'
                             % (x % 5, 1 + x % 29, 1 + x % 3))  # fmt: skip
            else:
                lines.append(b'{"op":"step"}')
        lines.append(b'{"op":"step"}')
    else:
        lines.append(b'{"schedcli":1,"policy":"decode-first","params":{"max_batch_tokens":8,'
                     b'"max_decode_sequences":2,"max_prefill_chunk_size":4}}')  # fmt: skip
        step = 0
        for i, x in enumerate(data[1:120]):
            op = x % 6
            if op < 3:
                kind, size = (b"decode", 1) if op == 0 else (b"prefill", 1 + x % 4)
                lines.append(b'{"op":"submit","tid":%d,"sid":%d,"kind":"%s","size":%d,"step":%d}'
                             % (i, x % 4, kind, size, step))  # fmt: skip
            elif op == 3:
                lines.append(b'{"op":"cancel","sid":%d,"step":%d}' % (x % 4, step))
            else:
                step += x % 3  # a step number the trace skips
    policy = TOY if request else None

    def body(path: str, tmp: str) -> None:
        with open(path, "wb") as f:
            f.write(b"".join(line + b"\n" for line in lines))
        if run("replay", path, *(["-p", TOY] if request else []), "-o", os.devnull)[0] != 0:
            return  # a trace the replay refuses: the debugger's refusal is the replay's
        # The time machine's server is a process of its own: it finds tests.doubles so.
        where = os.environ.get("PYTHONPATH", "")
        if ROOT_DIR not in where.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT_DIR, where) if p)
        with Travel(path, policy=policy, every=1 + len(data) % 3) as travel:
            if not travel.wait("indexed", 60):
                raise AssertionError("the debugger never finished indexing")
            if travel.failed is not None:
                raise AssertionError(f"the debugger failed where replay passed: {travel.failed}")
            for step in travel.numbers:
                view = travel.view(step)
                want = explain_step(path, step, policy).to_json()
                queue = view["queues"][0]
                got = [(e["tid"], e["line"], e["since"]) for e in queue]
                if [(e["tid"], e["line"], e["step"]) for e in want["queue"]] != got:
                    raise AssertionError(f"step {step}: queue {got} != {want['queue']}")
                reasons = sorted((json.dumps(e["tid"]), e["reason"]) for e in queue if e["reason"])
                given = sorted((json.dumps(e["tid"]), e["reason"]) for e in want["left"] or [])
                if reasons != given:
                    raise AssertionError(f"step {step}: reasons {reasons} != {given}")

    _with_file(data, ".jsonl", body)


TARGETS["debug-views"] = debug_views
