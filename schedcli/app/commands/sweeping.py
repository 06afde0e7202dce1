"""``schedcli sweep``: the plan from the command line or a TOML spec, the run, the output."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import orjson
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ... import __version__
from ...engine.cost import CostModel
from ...engine.schedules import changed_nothing
from ...engine.sweep import (
    Cache,
    Capacity,
    GridKeyDropped,
    Outcome,
    Plan,
    points,
    run_points,
)
from ...formats.sweep_schema import SweepSpec, refusal
from ...model.errors import InvariantError, UsageError
from ...model.limits import OPTIONS, BoundError
from ...streams.output import atomic_output
from ..report.sweep import group_reasons, number
from ..views.progress import ProgressBar

DEFAULT_CACHE = ".schedcli-cache/sweep"


@dataclass
class SweepRequest:
    workloads: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    grid: list[str] = field(default_factory=list)  # KEY=V1,V2,...
    output: str = "-"
    backend: str = "local"
    jobs: int | None = None
    address: str | None = None
    cache: str = DEFAULT_CACHE
    fresh: bool = False
    cost: CostModel = field(default_factory=CostModel)
    capacity: Capacity | None = None


def capacity_search(
    on: bool, slo_ttft: float | None, slo_tpot: float | None, goodput: float
) -> Capacity | None:
    """The ``--capacity`` search the options ask for, or None; UsageError if they disagree."""
    if not on:
        if slo_ttft is not None or slo_tpot is not None:
            raise UsageError("--slo-ttft and --slo-tpot apply to --capacity")
        return None
    if slo_ttft is None or slo_tpot is None:
        raise UsageError("--capacity needs --slo-ttft and --slo-tpot")
    if not 0 < goodput <= 1:
        raise UsageError(f"--goodput must be in (0, 1], not {goodput}")
    return Capacity(slo_ttft, slo_tpot, goodput)


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise UsageError(f"--grid {item!r}: expected KEY=V1,V2,...")
        if key.strip() in grid:
            raise UsageError(f"--grid {key.strip()} is given twice")
        grid[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
    return grid


def load_spec(path: str, req: SweepRequest) -> SweepRequest:
    """``--spec sweep.toml``: the same settings as the options, in a file (docs/sweeps.md).

    Its shape is ``SweepSpec``'s; its numbers have the bounds of the options they stand for
    (``jobs`` as --jobs, ``[cost] a`` as --cost-a, ...). A refusal names the file and key.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 (byte {e.start}), as TOML must be") from None
    try:
        spec = msgspec.convert(data, SweepSpec)
    except msgspec.ValidationError as e:
        raise UsageError(f"{path}: {refusal(e, SweepSpec)}") from None

    def bounded(option: str, key: str, value: float | None) -> Any:
        if value is None:
            return None
        try:
            return OPTIONS[option].check(f"{path}: {key}", value)
        except BoundError as e:
            raise UsageError(str(e)) from None

    req.workloads += spec.workloads
    req.policies += spec.policies
    for key, values in spec.grid.items():
        listed = values if isinstance(values, list) else [values]
        if not listed:
            raise UsageError(f"{path}: key grid.{key} lists no values")
        req.grid.append(f"{key}={','.join(str(v) for v in listed)}")
    req.backend = spec.backend or req.backend
    req.jobs = bounded("jobs", "jobs", spec.jobs) or req.jobs
    req.address = spec.address if spec.address is not None else req.address
    if spec.cost is not None:
        given = {
            term: bounded(f"cost_{term}", f"cost.{term}", getattr(spec.cost, term))
            for term in ("a", "b", "c")
        }
        req.cost = CostModel(
            **{**req.cost.as_dict(), **{k: v for k, v in given.items() if v is not None}}
        )
    if spec.capacity is not None:
        cap = spec.capacity
        req.capacity = Capacity(
            bounded("slo_ttft", "capacity.slo_ttft", cap.slo_ttft),
            bounded("slo_tpot", "capacity.slo_tpot", cap.slo_tpot),
            bounded("goodput", "capacity.goodput", cap.goodput),
        )
    return req


def _dropped_note(n: GridKeyDropped) -> str:
    """A grid key some swept policies run without, said."""
    lacking = (
        f"{n.others[0]} has no such parameter and runs"
        if len(n.others) == 1
        else f"{', '.join(n.others)} have no such parameter and run"
    )
    return f"note: --grid {n.key} applies to {', '.join(n.takers)}; {lacking} without it"


def run_sweep(req: SweepRequest, out: Console, err: Console) -> list[Outcome]:
    """Run the sweep, write one JSON line per point; returns the points that failed."""
    if req.jobs is not None and req.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, not {req.jobs}")
    plan = Plan(req.workloads, req.policies, parse_grid(req.grid), req.cost, req.capacity)
    todo = points(plan, note=lambda n: err.print(_dropped_note(n), soft_wrap=True, highlight=False))
    for policy in dict.fromkeys(p.policy for p in todo if p.source is None):
        err.print(f"note: the source of {policy!r} cannot be read: its points are not cached")
    bar = ProgressBar(err, "sweeping", len(todo), "{task.completed} points")
    finished = [0]

    def on_done(outcome: Outcome) -> None:
        finished[0] += 1
        bar.update(finished[0])
        if outcome.error is not None:
            err.print(f"point failed: {_label(outcome)}: {outcome.error}", soft_wrap=True)

    cache = Cache(req.cache, __version__)
    try:
        outcomes = run_points(
            todo,
            backend=req.backend,
            jobs=req.jobs,
            address=req.address,
            cache=cache,
            fresh=req.fresh,
            on_done=on_done,
        )
    finally:
        bar.stop()
    inert = changed_nothing(outcomes, list(plan.grid))
    with atomic_output(req.output) as f:
        _write(f, outcomes, inert)
    view = err if req.output == "-" else out
    view.print(sweep_table(outcomes, list(plan.grid), inert))
    for line in rejection_notes(outcomes):
        err.print(line, soft_wrap=True, highlight=False, markup=False)
    for (workload, policy), keys in inert.items():
        for key in keys:
            err.print(
                f"note: --grid {key} changed nothing for {policy} on {Path(workload).name}: "
                "every value gave the same schedule",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    cached = sum(o.cached for o in outcomes)
    failed = sum(o.error is not None for o in outcomes)
    if cache.stale:
        err.print(
            f"note: {len(cache.stale)} cached point(s) ran again, as what they ran with "
            f"changed (first: {cache.stale[0]})",
            soft_wrap=True,
            highlight=False,
        )
    err.print(f"{len(outcomes)} points: {cached} from the cache, {failed} failed")
    return [o for o in outcomes if o.error is not None]


def _write(f: IO[bytes], outcomes: list[Outcome], inert: Inert) -> None:
    for o in outcomes:
        if o.record is not None:
            keys = inert.get((o.point.workload, o.point.policy), [])
            f.write(orjson.dumps({**o.record, "changed_nothing": keys}) + b"\n")


def _label(o: Outcome) -> str:
    params = " ".join(f"{k}={v}" for k, v in o.point.params.items())
    return f"{o.point.workload} {o.point.policy} {params}"


def _run_keys(o: Outcome) -> dict[str, Any]:
    keys: dict[str, Any] = {"time_scale": o.point.time_scale, "chunk_size": o.point.chunk_size}
    keys.update({f"cost_{k}": v for k, v in o.point.cost.items()})
    return keys


Inert = dict[tuple[str, str], list[str]]  # (workload, policy) -> grid keys that changed nothing


def sweep_table(outcomes: list[Outcome], grid: list[str], inert: Inert | None = None) -> Table:
    """A row per point: what the grid varied, how many requests finished and were
    rejected, throughput, tail latencies (of the finished, said when some were rejected)
    and capacity. A point that rejected requests is marked: its latencies look better for
    the requests it never served. A grid key that changed nothing for the point's workload
    and policy (``inert``) is marked in its params: "KEY=V (changed nothing)"."""
    table = Table(title="sweep", box=box.ROUNDED, title_justify="left")
    for column in ("workload", "policy", "params", "finished", "rejected", "tok/s"):
        table.add_column(column, overflow="fold")
    table.add_column("TTFT p99 ms", overflow="fold")
    table.add_column("TPOT p99 ms", overflow="fold")
    table.add_column("capacity (rate x)")
    for o in outcomes:
        m = (o.record or {}).get("metrics") or {}
        cap = (o.record or {}).get("capacity") or {}
        varied = {**o.point.params, **_run_keys(o)}
        idle = (inert or {}).get((o.point.workload, o.point.policy), [])
        changed = " ".join(
            f"{k}={v}" + (" (changed nothing)" if k in idle else "")
            for k, v in varied.items()
            if k in grid
        )
        rejected = m.get("rejected") or 0
        of = f" (of {m.get('finished')})" if rejected and m.get("finished") is not None else ""
        table.add_row(
            Text(Path(o.point.workload).name),
            Text(o.point.policy),
            Text(changed),
            Text(_finished(m)),
            Text(f"{rejected} !", style="bold red") if rejected else Text("0"),
            number(m.get("throughput_output_tokens_per_s")),
            number((m.get("ttft") or {}).get("p99"), 1000) + of,
            number((m.get("tpot") or {}).get("p99"), 1000) + of,
            Text("failed: " + o.error if o.error else number(cap.get("rate_multiplier"), 1, 2)),
        )
    return table


def _finished(metrics: dict[str, Any]) -> str:
    finished, requests = metrics.get("finished"), metrics.get("requests")
    if finished is None:
        return "n/a"  # a replayed trace has batches, not requests
    return f"{finished} of {requests}"


def rejection_notes(outcomes: list[Outcome]) -> list[str]:
    """One line per point that rejected requests: how many, and why."""
    notes = []
    for o in outcomes:
        m = (o.record or {}).get("metrics") or {}
        if not m.get("rejected"):
            continue
        reasons = m.get("rejected_by_reason") or {}
        why = "; ".join(f"{n} x {reason}" for reason, n in group_reasons(reasons))
        notes.append(
            f"warning: {_label(o).strip()}: {m['rejected']} request(s) rejected"
            + (f" ({why})" if why else "")
            + "; its latencies are of the finished requests only"
        )
    return notes


def sweep_command(
    req: SweepRequest,
    spec: str | None,
    capacity: Capacity | None,
    out: Console,
    err: Console,
) -> None:
    """``schedcli sweep``: the plan (options, then a spec), run; a failed point is exit 2,
    or 3 where a point's policy broke the contract (each point stops at once; the others
    finish)."""
    if spec is not None:
        req = load_spec(spec, req)
    req.capacity = capacity or req.capacity
    failed = run_sweep(req, out, err)
    broke = [o for o in failed if (o.error or "").startswith(f"{InvariantError.__name__}:")]
    if broke:
        raise InvariantError(
            f"{len(broke)} point(s) broke the Scheduler contract (first: {_label(broke[0])}); "
            f"the others are in {req.output}"
        )
    if failed:
        raise UsageError(f"{len(failed)} point(s) failed; the others are in {req.output}")
