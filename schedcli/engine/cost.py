"""The cost model: how long a batch takes, in simulated seconds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import orjson

from ..formats.source import display_name, open_binary
from ..model.errors import InputError, UsageError


@dataclass(frozen=True)
class CostModel:
    """step_seconds = a + b * batch_tokens + c * decodes_in_batch (+ d * context_tokens).

    The defaults are round figures for a 7-8B model on one current datacenter GPU:
    5 ms of fixed cost per step, 20 us per token in the batch, 100 us per decode
    (reading that sequence's KV cache). ``d`` (per token of context the batch attends
    over) is 0 unless a fitted model (``schedcli fit``) sets it.
    """

    a: float = 0.005
    b: float = 0.00002
    c: float = 0.0001
    d: float = 0.0

    def __post_init__(self) -> None:
        for name in ("a", "b", "c", "d"):
            value = getattr(self, name)
            if not value >= 0 or value == float("inf"):
                raise UsageError(f"cost model {name} must be a finite number >= 0, not {value}")

    def as_dict(self) -> dict[str, float]:
        terms = asdict(self)
        if not self.d:
            del terms["d"]  # models without the context term read as they always did
        return terms

    @classmethod
    def load(cls, path: str) -> CostModel:
        """A model written by ``schedcli fit -o`` (its coefficients a, b, c and d)."""
        name = display_name(path)
        try:
            with open_binary(path, name) as f:
                data = orjson.loads(f.read())
        except orjson.JSONDecodeError as e:
            raise InputError(name, None, f"not valid JSON: {e}") from None
        if type(data) is not dict or not all(k in data for k in ("a", "b", "c")):
            raise InputError(name, None, "a cost model is a JSON object with a, b and c")
        terms = {k: data[k] for k in ("a", "b", "c", "d") if k in data}
        for key, value in terms.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(name, None, f"{key} must be a number, not {value!r}")
        try:
            return cls(**{k: float(v) for k, v in terms.items()})
        except (UsageError, OverflowError) as e:
            raise InputError(name, None, str(e)) from None
