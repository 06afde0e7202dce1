"""``schedcli fit``: a cost model from clocked recordings, written and shown."""

from __future__ import annotations

import orjson

from ...engine.fit import Fit, fit_recordings
from ...streams.output import atomic_output
from ..console import show
from ..usage import warn_poor_fit
from ..views.render import fit_table


def fit_command(recordings: list[str], output: str | None, fmt: str) -> None:
    result = fit_recordings(recordings)
    poor = result.poor()
    if poor:
        warn_poor_fit(", ".join(poor), "this fit")
    model = result.cost_json()
    if output is not None:
        with atomic_output(output) as out:
            out.write(orjson.dumps(model, option=orjson.OPT_INDENT_2) + b"\n")
    show(fmt, result, fit_table, Fit.cost_json)
