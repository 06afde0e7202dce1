"""``schedcli simulate``: its own options and its call (app/commands/simulating.py)."""

from typing import Annotated

import typer

from .. import options as o
from ..console import data_console, stderr_console

WorkloadOption = Annotated[
    str, typer.Argument(metavar="WORKLOAD", help="Workload file (JSON Lines, .gz ok), or -.")
]

SimulatePolicyOption = Annotated[
    str, typer.Option("--policy", "-p", metavar="NAME", help="Policy name or module:Class.")
]

SimulateOutputOption = Annotated[
    str | None,
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write the event trace (explicit mode) to FILE."
    ),
]

MetricsOption = Annotated[
    str | None,
    typer.Option("--metrics", metavar="FILE", help="Write the metrics as JSON to FILE."),
]

ChunkSizeOption = Annotated[
    int | None,
    typer.Option(
        "--chunk-size",
        metavar="TOKENS",
        help="Prompt chunk size (default: the policy's max_prefill_chunk_size, else 256).",
    ),
]

CostFileOption = Annotated[
    str | None,
    typer.Option(
        "--cost",
        metavar="FILE",
        help="A fitted cost model (schedcli fit -o); not with --cost-a/-b/-c.",
    ),
]

SloTtftOption = Annotated[
    float | None,
    typer.Option("--slo-ttft", metavar="SECONDS", help="Goodput: TTFT target, seconds."),
]

SloTpotOption = Annotated[
    float | None,
    typer.Option("--slo-tpot", metavar="SECONDS", help="Goodput: TPOT target, seconds."),
]


def simulate(
    workload: WorkloadOption,
    policy: SimulatePolicyOption = "decode-first",
    param: o.ParamOption = None,
    output: SimulateOutputOption = None,
    metrics: MetricsOption = None,
    chunk_size: ChunkSizeOption = None,
    cost_file: CostFileOption = None,
    cost_a: o.CostAOption = o.DEFAULT_COST.a,
    cost_b: o.CostBOption = o.DEFAULT_COST.b,
    cost_c: o.CostCOption = o.DEFAULT_COST.c,
    slo_ttft: SloTtftOption = None,
    slo_tpot: SloTpotOption = None,
    fmt: o.ViewFormatOption = o.ViewFormat.table,
    perfetto: o.PerfettoOption = None,
) -> None:
    """Play the runner over a workload: emit scheduler traffic and measure latencies.

    step_seconds = a + b * batch_tokens + c * decodes_in_batch (--cost-a/-b/-c).
    Exit codes: 0 ok; 2 bad input or usage; 3 the policy broke the contract.
    """
    from ..commands.simulating import SimulateRequest, cost_model_of, run_simulate

    request = SimulateRequest(
        workload,
        policy=policy,
        params=o.parse_params(param),
        output=output,
        metrics=metrics,
        perfetto=perfetto,
        chunk_size=chunk_size,
        cost=cost_model_of(cost_file, cost_a, cost_b, cost_c),
        slo_ttft=slo_ttft,
        slo_tpot=slo_tpot,
        json=fmt is o.ViewFormat.json,
    )
    run_simulate(request, data_console(), stderr_console())
