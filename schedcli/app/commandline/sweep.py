"""``schedcli sweep``: its own options and its call (app/commands/sweeping.py)."""

from typing import Annotated

import typer

from .. import options as o
from ..console import data_console, stderr_console

WorkloadsOption = Annotated[
    list[str] | None,
    typer.Argument(metavar="WORKLOAD...", help="Workloads (or traces) to run each point on."),
]

SweepPolicyOption = Annotated[
    list[str] | None,
    typer.Option("--policy", "-p", metavar="NAME", help="A policy to sweep (repeatable)."),
]

GridOption = Annotated[
    list[str] | None,
    typer.Option(
        "--grid",
        metavar="KEY=V1,V2",
        help="Values of a parameter (or time_scale, chunk_size, cost_a/b/c); repeatable.",
    ),
]

SpecOption = Annotated[
    str | None, typer.Option("--spec", metavar="FILE", help="The sweep as a TOML file.")
]

SweepOutputOption = Annotated[
    str, typer.Option("--output", "-o", metavar="FILE", help="One JSON line per point.")
]

BackendOption = Annotated[
    str, typer.Option("--backend", metavar="local|ray", help="Where points run.")
]

AddressOption = Annotated[
    str | None,
    typer.Option("--address", metavar="ADDR", help="Ray: an existing cluster's address."),
]

CacheOption = Annotated[
    str, typer.Option("--cache", metavar="DIR", help="Where finished points are kept.")
]

FreshOption = Annotated[bool, typer.Option("--fresh", help="Run every point, cache or not.")]

CapacityOption = Annotated[
    bool,
    typer.Option("--capacity", help="Find each point's highest arrival rate meeting SLOs."),
]

SweepSloTtftOption = Annotated[
    float | None, typer.Option("--slo-ttft", metavar="SECONDS", help="Capacity: TTFT SLO.")
]

SweepSloTpotOption = Annotated[
    float | None, typer.Option("--slo-tpot", metavar="SECONDS", help="Capacity: TPOT SLO.")
]

GoodputOption = Annotated[
    float,
    typer.Option("--goodput", metavar="FRACTION", help="Capacity: requests meeting SLOs."),
]


def sweep(
    workloads: WorkloadsOption = None,
    policy: SweepPolicyOption = None,
    grid: GridOption = None,
    spec: SpecOption = None,
    output: SweepOutputOption = "-",
    backend: BackendOption = "local",
    jobs: o.JobsOption = None,
    address: AddressOption = None,
    cache: CacheOption = ".schedcli-cache/sweep",
    fresh: FreshOption = False,
    capacity: CapacityOption = False,
    slo_ttft: SweepSloTtftOption = None,
    slo_tpot: SweepSloTpotOption = None,
    goodput: GoodputOption = 0.9,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
) -> None:
    """Run every workload x policy x grid point (simulate; replay for a trace) on all local
    cores or a Ray cluster, cached so a rerun skips finished points.

    Exit codes: 0 ok; 2 bad input or usage, or some point failed (the others finish); 3 a
    point's policy broke the contract (a stall included; the others finish).
    """
    from ...engine.cost import CostModel
    from ..commands.sweeping import SweepRequest, capacity_search, sweep_command

    req = SweepRequest(
        list(workloads or []),
        list(policy or []),
        list(grid or []),
        output,
        backend,
        jobs,
        address,
        cache,
        fresh,
        CostModel(cost_a, cost_b, cost_c),
    )
    searched = capacity_search(capacity, slo_ttft, slo_tpot, goodput)
    sweep_command(req, spec, searched, data_console(), stderr_console())
