"""The cost model: how long a batch takes, in simulated seconds."""

from __future__ import annotations

import orjson

from ..model.errors import InputError, UsageError
from ..streams.source import display_name, open_binary


class CostModel:
    """step_seconds = a + b * batch_tokens + c * decodes_in_batch (+ d * context_tokens).

    The defaults are round figures for a 7-8B model on one current datacenter GPU:
    5 ms of fixed cost per step, 20 us per token in the batch, 100 us per decode
    (reading that sequence's KV cache). ``d`` (per token of context the batch attends
    over) is 0 unless a fitted model (``schedcli fit``) sets it.

    A value: compared and hashed by its terms, never changed once made. (Not a frozen
    dataclass: the command line makes one at start-up, where a dataclass costs 1 ms.)
    """

    __slots__ = ("a", "b", "c", "d")
    a: float
    b: float
    c: float
    d: float

    def __init__(
        self, a: float = 0.005, b: float = 0.00002, c: float = 0.0001, d: float = 0.0
    ) -> None:
        for name, value in zip("abcd", (a, b, c, d), strict=True):
            if not value >= 0 or value == float("inf"):
                raise UsageError(f"cost model {name} must be a finite number >= 0, not {value}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a CostModel cannot be changed (its {name})")

    def __eq__(self, other: object) -> bool:
        return type(other) is CostModel and self._terms() == other._terms()

    def __hash__(self) -> int:
        return hash(self._terms())

    def __reduce__(self) -> tuple[type[CostModel], tuple[float, float, float, float]]:
        return CostModel, self._terms()  # a sweep's workers get it pickled

    def __repr__(self) -> str:
        return f"CostModel(a={self.a!r}, b={self.b!r}, c={self.c!r}, d={self.d!r})"

    def _terms(self) -> tuple[float, float, float, float]:
        return (self.a, self.b, self.c, self.d)

    def as_dict(self) -> dict[str, float]:
        terms = dict(zip("abcd", self._terms(), strict=True))
        if not self.d:
            del terms["d"]  # models without the context term read as they always did
        return terms

    @staticmethod
    def poor_fit(path: str) -> str | None:
        """Why the fit written in ``path`` is poor (``schedcli fit`` marks it), or None."""
        with open_binary(path, display_name(path)) as f:
            data = orjson.loads(f.read())
        fit = data.get("fit") if type(data) is dict else None
        poor = fit.get("poor") if type(fit) is dict else None
        return ", ".join(map(str, poor)) if type(poor) is list and poor else None

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
