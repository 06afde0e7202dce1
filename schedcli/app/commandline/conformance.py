"""``schedcli conformance``: its own options and its call (app/commands/check/)."""

from enum import StrEnum
from typing import Annotated

import typer

from .. import options as o


class ConformancePart(StrEnum):
    contract = "contract"
    decode_first = "decode-first"


ConformancePartsArgument = Annotated[
    list[ConformancePart] | None,
    typer.Argument(
        metavar="[PART]...",
        help="contract (what any Scheduler keeps; the default) and/or decode-first "
        "(DecodeFirstScheduler's own batches).",
        show_default=False,
    ),
]


def conformance(
    parts: ConformancePartsArgument = None,
    policy: o.PolicyOption = None,
    param: o.ParamOption = None,
    jobs: o.JobsOption = None,
    junit_xml: o.JunitOption = None,
    fmt: o.CheckFormatOption = o.CheckFormat.text,
) -> None:
    """Check a scheduler against ExecuTorch's own scheduler tests, shipped with schedcli as
    traces: the contract any Scheduler keeps (the default), or DecodeFirstScheduler's own
    batches (decode-first). A verdict per trace, as check gives; exit 1 on any failure, 3
    where the scheduler broke the contract.
    """
    from ..commands.check.conformance import conformance_request
    from ..commands.check.report import run_check

    chosen = [str(p) for p in parts or [ConformancePart.contract]]
    req, config = conformance_request(chosen, policy, dict(o.parse_params(param)), jobs)
    run_check(req, str(fmt), junit_xml, config)
