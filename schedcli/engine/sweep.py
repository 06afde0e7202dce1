"""Sweeps: every workload, policy and grid point, simulated (or a trace replayed), on local
processes or a Ray cluster, cached by content so a rerun skips finished points.

A point's record is ``{"workload", "policy", "params", "cost_model", "metrics"}`` (plus
``time_scale`` when the grid compresses arrivals, and ``capacity`` for a capacity
search); ``metrics`` is exactly what ``simulate --metrics`` writes for that point. Records
come out in the order of the points (workload, policy, grid), whatever the backend.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..catalog.registry import build_policy, policy_source, resolve_policy, settled_params
from ..formats.kinds import sniff_kind
from ..formats.workload import Request, read_workload
from ..model.errors import InvariantError, Option, UsageError
from ..model.limits import OPTIONS, BoundError
from ..model.scheduler import Policy
from .cost import CostModel
from .levels.table import level_of_policy
from .pool import Pool, Processes, RayCluster, Vanished
from .run import replay_metrics
from .schedules import ScheduleDigest
from .stall import STALL_STEPS_ENV

# Grid keys that are not policy parameters.
RUN_KEYS = ("time_scale", "chunk_size", "cost_a", "cost_b", "cost_c")


@dataclass(frozen=True)
class Capacity:
    """Find the highest arrival rate at which ``goodput`` of requests meet both SLOs."""

    slo_ttft: float
    slo_tpot: float
    goodput: float = 0.9
    iterations: int = 12


@dataclass(frozen=True)
class Point:
    workload: str
    workload_sha256: str
    kind: str  # "workload" or "trace"
    policy: str  # as the user named it: a registered name or module:Class
    params: dict[str, Any]
    cost: dict[str, float]
    time_scale: float = 1.0
    chunk_size: int | None = None
    capacity: Capacity | None = None
    source: str | None = None  # digest of the policy's source (None: unknown, not cached)

    def key(self, version: str) -> str | None:
        """The cache key: everything the result depends on (the workload's bytes, the
        policy's source, its parameters, the runner's settings, schedcli's version); None
        when the policy's source cannot be read, so the point is never cached."""
        if self.source is None:
            return None
        spec = {
            "workload": self.workload_sha256,
            "policy": self.policy,
            "source": self.source,
            "params": self.params,
            "cost": self.cost,
            "time_scale": self.time_scale,
            "chunk_size": self.chunk_size,
            "capacity": None if self.capacity is None else vars(self.capacity),
            "version": version,
        }
        return hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass
class Outcome:
    point: Point
    record: dict[str, Any] | None = None
    error: str | None = None
    cached: bool = False
    # The files of the modules loaded where the point ran, outside the standard library
    # and site-packages, by their digests: a cached record stands while they do.
    deps: dict[str, str] = field(default_factory=dict)


@dataclass
class Plan:
    workloads: list[str]
    policies: list[str]
    grid: dict[str, list[str]] = field(default_factory=dict)
    cost: CostModel = field(default_factory=CostModel)
    capacity: Capacity | None = None


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class GridKeyDropped:
    """A grid key that the policies ``takers`` declare, and ``others`` run without: what
    ``points`` notes (the app words it)."""

    key: str
    takers: list[str]
    others: list[str]


def points(plan: Plan, note: Callable[[GridKeyDropped], None] | None = None) -> list[Point]:
    """Every point, in order: workload, policy, then the grid in the order given.

    A grid key applies to each policy that declares it; for the others it is dropped (and
    ``note`` says so), and the points that then coincide are run once. A key no swept
    policy declares is a usage error.
    """
    if not plan.workloads or not plan.policies:
        raise UsageError(
            "a sweep needs at least one workload and one policy (", Option("policy"), ")"
        )
    classes = {policy: resolve_policy(policy, None) for policy in plan.policies}
    declared = {policy: {p.name for p in cls.PARAMS} for policy, cls in classes.items()}
    _check_grid_keys(plan.grid, declared, note)
    sources = {policy: _source(cls) for policy, cls in classes.items()}
    out: list[Point] = []
    for workload in plan.workloads:
        sha = file_sha256(workload)
        kind = sniff_kind(workload)
        if kind not in ("workload", "trace"):
            raise UsageError(f"{workload}: a sweep takes workloads or traces, not a {kind}")
        for policy in plan.policies:
            seen: set[bytes] = set()
            for combo in _combinations(plan.grid):
                point = _point(plan, workload, sha, kind, policy, declared[policy], combo)
                point = dataclasses.replace(point, source=sources[policy])
                marker = orjson.dumps(
                    [point.params, point.cost, point.time_scale, point.chunk_size],
                    option=orjson.OPT_SORT_KEYS,
                )
                if marker not in seen:
                    seen.add(marker)
                    out.append(point)
    return out


def _source(cls: type[Policy]) -> str | None:
    """What a point's result depends on in the policy: its source, and the outside runtime
    it drives, if any (vLLM's installed version)."""
    source = policy_source(cls)
    runtime = cls.runtime()
    if source is None or runtime is None:
        return source
    return f"{source}+{runtime}"


def _check_grid_keys(
    grid: Mapping[str, list[str]],
    declared: Mapping[str, set[str]],
    note: Callable[[GridKeyDropped], None] | None,
) -> None:
    """A grid key names a run setting or a parameter of some swept policy."""
    for key in grid:
        if key in RUN_KEYS:
            continue
        takers = [policy for policy, names in declared.items() if key in names]
        if not takers:
            known = sorted(set(RUN_KEYS).union(*declared.values()))
            hint = difflib.get_close_matches(key, known, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            swept = ", ".join(repr(p) for p in declared)
            raise UsageError(
                Option("grid", key),
                f": no swept policy ({swept}) has such a parameter{did_you_mean}",
            )
        others = [policy for policy in declared if policy not in takers]
        if others and note is not None:
            note(GridKeyDropped(key, takers, others))


def _combinations(grid: Mapping[str, list[str]]) -> Iterator[dict[str, str]]:
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        yield dict(zip(keys, values, strict=True))


def _point(
    plan: Plan,
    workload: str,
    sha: str,
    kind: str,
    policy: str,
    declared: set[str],
    combo: dict[str, str],
) -> Point:
    params = {k: v for k, v in combo.items() if k in declared}
    filled = settled_params(policy, params)  # checks the values, and fills in the defaults
    run = {key: _run_value(key, text) for key, text in combo.items() if key in RUN_KEYS}
    cost = plan.cost.as_dict()
    for key in ("cost_a", "cost_b", "cost_c"):
        if key in run:
            cost[key[-1]] = run[key]
    chunk = run.get("chunk_size")
    scale = run.get("time_scale", 1.0)
    return Point(workload, sha, kind, policy, filled, cost, scale, chunk, plan.capacity)


def _run_value(key: str, text: str) -> Any:
    """A grid value of a run setting, with the bound of the option it stands for."""
    try:
        return OPTIONS[key].parse(key, text)
    except BoundError as e:
        raise UsageError(Option("grid", key), " ", e.why) from None


# --- one point (runs in a worker process) -----------------------------------------------


def run_point(point: Point, data: bytes | None = None) -> dict[str, Any]:
    """A point's record. ``data``: the workload's bytes when the worker cannot see its path."""
    if data is not None:
        with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
            f.write(data)
        try:
            return {**run_point(_at(point, f.name)), "workload": point.workload}
        finally:
            os.unlink(f.name)
    record: dict[str, Any] = {
        "workload": point.workload,
        "policy": resolve_policy(point.policy, None).name or point.policy,
        "params": point.params,
        "cost_model": point.cost,
    }
    if point.time_scale != 1.0:
        record["time_scale"] = point.time_scale
    schedule = ScheduleDigest()
    if point.kind == "trace":
        record["metrics"] = _replay_metrics(point, schedule)
        record["schedule_sha256"] = schedule.hexdigest()
        return record
    record["metrics"] = _simulate(point, point.time_scale, schedule=schedule)
    record["schedule_sha256"] = schedule.hexdigest()
    if point.capacity is not None:
        record["capacity"] = _capacity(point, point.capacity)
    return record


def _replay_metrics(point: Point, schedule: ScheduleDigest) -> dict[str, Any]:
    """A trace's point: the replay's step metrics (what ``schedcli stats`` shows)."""
    return replay_metrics(point.workload, point.policy, point.params, also=schedule)[0]


def _at(point: Point, path: str) -> Point:
    return dataclasses.replace(point, workload=path)


def _simulate(
    point: Point,
    scale: float,
    capacity: Capacity | None = None,
    *,
    schedule: ScheduleDigest | None = None,
) -> dict[str, Any]:
    requests: Iterator[Request] = read_workload(point.workload)
    if scale != 1.0:
        requests = (_scaled(r, scale) for r in requests)
    slo = capacity or point.capacity
    policy = build_policy(point.policy, point.params, level=None)
    return (
        level_of_policy(policy)
        .simulate(
            requests,
            policy,
            policy_name=point.policy,
            params=policy.params(),
            chunk_size=point.chunk_size,
            cost=CostModel(**point.cost),
            slo_ttft=slo.slo_ttft if slo is not None else None,
            slo_tpot=slo.slo_tpot if slo is not None else None,
            on_batch=None if schedule is None else schedule.on_batch,
        )
        .summary()
    )


def _scaled(r: Request, scale: float) -> Request:
    return Request(
        r.sid,
        r.arrival * scale,
        r.prompt_tokens,
        r.output_tokens,
        r.cancel_after,
        r.priority,
        r.meta,
        r.line,
    )


def _capacity(point: Point, cap: Capacity) -> dict[str, Any]:
    """Bisection over the arrival time scale: the smallest scale (the highest rate) at
    which the goodput target holds, like the config explorers of Vidur and Sarathi-Serve."""

    def meets(scale: float) -> bool:
        goodput = _simulate(point, scale, cap).get("goodput") or {}
        fraction = goodput.get("fraction")
        return fraction is not None and fraction >= cap.goodput

    lo, hi = None, None  # lo fails, hi meets (scales)
    scale = point.time_scale
    for _ in range(cap.iterations):
        if meets(scale):
            hi = scale
            if lo is not None:
                break
            scale /= 2
        else:
            lo = scale
            if hi is not None:
                break
            scale *= 2
    if hi is None:
        return {"time_scale": None, "rate_multiplier": None, "goodput_target": cap.goodput}
    if lo is not None:
        for _ in range(cap.iterations):
            mid = (lo + hi) / 2
            if meets(mid):
                hi = mid
            else:
                lo = mid
    return {
        "time_scale": hi,
        "rate_multiplier": 1 / hi,
        "goodput_target": cap.goodput,
        "slo_ttft": cap.slo_ttft,
        "slo_tpot": cap.slo_tpot,
    }


# --- the cache --------------------------------------------------------------------------


class Cache:
    """Finished points' records, one file per cache key, written atomically, each with the
    digests of the modules it ran with (``local_modules``): a record whose modules have
    changed since (a plugin's helper edited) is stale, not served, and counted."""

    def __init__(self, directory: str | Path, version: str) -> None:
        self.directory = Path(directory)
        self.version = version
        self.stale: list[str] = []  # why each stale record was not served
        self._digests: dict[str, str | None] = {}

    def get(self, point: Point) -> dict[str, Any] | None:
        key = point.key(self.version)
        if key is None:
            return None
        path = self.directory / f"{key}.json"
        try:
            kept = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        if type(kept) is not dict or type(kept.get("record")) is not dict:
            self.stale.append(f"{path.name}: written by an older schedcli")
            return None
        for file, digest in dict(kept.get("deps") or {}).items():
            if self._digest(file) != digest:
                self.stale.append(f"{file} changed since the point was cached")
                return None
        record: dict[str, Any] = kept["record"]
        record["workload"] = point.workload  # the same content may sit at another path
        return record

    def _digest(self, file: str) -> str | None:
        if file not in self._digests:
            self._digests[file] = _file_digest(file)
        return self._digests[file]

    def put(self, point: Point, record: dict[str, Any], deps: dict[str, str]) -> None:
        key = point.key(self.version)
        if key is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{key}.json"
        tmp = path.with_suffix(".tmp")
        kept = {"record": record, "deps": deps}
        tmp.write_bytes(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS))
        os.replace(tmp, path)


def _file_digest(file: str) -> str | None:
    try:
        return file_sha256(file)
    except OSError:
        return None


_LOCAL: dict[str, str | None] = {}  # this process's module files, by their digests


def local_modules() -> dict[str, str]:
    """Every module loaded in this process from a file outside the standard library and
    site-packages (a plugin, the helpers it imports, an editable checkout), by digest:
    what a point's result may depend on beyond its policy's own source."""
    installed = _installed_roots()
    found: dict[str, str] = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        real = os.path.realpath(file)
        if real.startswith(installed):
            continue
        if real not in _LOCAL:
            _LOCAL[real] = _file_digest(real)
        digest = _LOCAL[real]
        if digest is not None:
            found[real] = digest
    return dict(sorted(found.items()))


def _installed_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)


# --- running them -----------------------------------------------------------------------


def run_points(
    points_: Sequence[Point],
    *,
    backend: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    cache: Cache | None = None,
    fresh: bool = False,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every point's outcome, in the points' order. Cached points are not run again
    (unless ``fresh``); a point that fails is reported and the others go on."""
    outcomes = [Outcome(p) for p in points_]
    todo: list[Outcome] = []
    for outcome in outcomes:
        record = cache.get(outcome.point) if cache is not None and not fresh else None
        if record is not None:
            outcome.record, outcome.cached = record, True
            if on_done is not None:
                on_done(outcome)
        else:
            todo.append(outcome)

    def done(outcome: Outcome) -> None:
        if outcome.record is not None and cache is not None:
            cache.put(outcome.point, outcome.record, outcome.deps)
        if on_done is not None:
            on_done(outcome)

    env: dict[str, str] = {}
    for policy in dict.fromkeys(o.point.policy for o in todo):
        env.update(resolve_policy(policy, None).worker_env())
    if STALL_STEPS_ENV in os.environ:  # --stall-steps, for a worker older than the sweep
        env[STALL_STEPS_ENV] = os.environ[STALL_STEPS_ENV]
    if backend == "local":  # never more workers than cores
        cores = os.cpu_count() or 1
        _run_local(todo, min(jobs or cores, cores), done, env)
    elif backend == "ray":
        try:
            cluster = RayCluster(jobs, address).__enter__()
        except ImportError:
            raise UsageError(
                Option("backend", "ray"), " needs Ray: pip install 'schedcli[ray]'"
            ) from None
        with cluster:
            _run_on(cluster, todo, done, env)
    else:
        raise UsageError(Option("backend", repr(backend)), ": local or ray")
    return outcomes


Ran = tuple[dict[str, Any] | None, str | None, dict[str, str]]


def _guarded(point: Point, data: bytes | None = None, env: Mapping[str, str] | None = None) -> Ran:
    """A point's record or its error, never an exception (a worker reports, then goes on),
    and the modules it ran with (``local_modules``). ``env``: what the policies need set in
    a worker to build as the parent would (``Policy.worker_env``); a worker may be older
    than the sweep (a forkserver's), so it comes with the point."""
    if env:
        os.environ.update(env)
    try:
        return run_point(point, data), None, local_modules()
    except Exception as e:
        return None, f"{type(e).__name__}: {e}", {}


def _run_local(
    todo: list[Outcome], jobs: int, done: Callable[[Outcome], None], env: Mapping[str, str]
) -> None:
    if jobs <= 1 or len(todo) <= 1:
        for outcome in todo:
            outcome.record, outcome.error, outcome.deps = _guarded(outcome.point)
            done(outcome)
        return
    # Workers fork from a clean server process that has imported schedcli once: cheap to
    # start, and never a fork of this (threaded) process.
    _run_on(Processes(jobs, "forkserver", ["schedcli.engine.sweep"]), todo, done, env)


def _run_on(
    pool: Pool, todo: list[Outcome], done: Callable[[Outcome], None], env: Mapping[str, str]
) -> None:
    """Every point of ``todo`` run on ``pool``, each ``done`` as it comes in. A pool whose
    workers cannot see this machine's files gets each workload once, as data."""
    shipped: dict[str, Any] = {}
    jobs: list[tuple[Point, Any, Mapping[str, str]]] = []
    for outcome in todo:
        path = outcome.point.workload
        if not pool.sees_files and path not in shipped:
            shipped[path] = pool.put(Path(path).read_bytes())
        jobs.append((outcome.point, shipped.get(path), env))
    finished: set[int] = set()
    for index, ran in pool.completed(_guarded, jobs):
        if isinstance(ran, Vanished):
            # A worker ended without an answer: its point's policy ended the process (a
            # C++ scheduler), as nothing of ours does.
            running = [o for i, o in enumerate(todo) if i not in finished]
            raise InvariantError(
                "a sweep worker ended without an answer: a policy among the points "
                f"running then ended its process (one of {_running(running)}); run them with ",
                Option("jobs", "1"),
                " to see which, at its step and line",
            )
        finished.add(index)
        outcome = todo[index]
        outcome.record, outcome.error, outcome.deps = ran
        done(outcome)


def _running(outcomes: Sequence[Outcome]) -> str:
    names = sorted({f"{o.point.policy} on {o.point.workload}" for o in outcomes})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
