"""Stage transitions on a metric: `parallel/ratio >= 0.9 for 3 steps`, `data/epoch >= 5`.

A stage always ends after its step budget; a predicate can end it earlier. Predicates read
the metrics the driver passes to ``Curriculum.update``; a predicate whose metric is missing
raises, because a silently never-firing transition would run the whole budget unnoticed.

    >>> p = Predicate("parallel/ratio", ">=", 0.9)
    >>> p.holds({"parallel/ratio": 0.95}), p.holds({"parallel/ratio": 0.5})
    (True, False)
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from curricula.bounds import AT_LEAST_0, AT_LEAST_1, Bound, broken

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}

#: The metric the driver reports for epoch transitions: epochs of the stage's data consumed
#: since the stage started (batches x batch size / dataset size).
EPOCH_METRIC = "data/epoch"


# the config's schema reads these (curricula/bounds.py)
PREDICATE_RANGES: dict[str, Bound] = {"min_steps": AT_LEAST_0, "patience": AT_LEAST_1}


@dataclass(frozen=True)
class Predicate:
    """``metric op value``, checked from stage step ``min_steps`` on; fires after ``patience``
    consecutive steps that hold (a noisy metric should not end a stage on one lucky batch)."""

    metric: str
    op: str
    value: float
    min_steps: int = 0
    patience: int = 1

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("a transition predicate needs a metric name")
        if self.op not in _OPS:
            raise ValueError(f"predicate on {self.metric!r}: op must be one of {sorted(_OPS)}, got {self.op!r}")
        for key, bound in PREDICATE_RANGES.items():
            if problem := broken(key, getattr(self, key), bound):
                raise ValueError(f"predicate on {self.metric!r}: {problem}")

    def holds(self, metrics: Mapping[str, Any]) -> bool:
        if self.metric not in metrics:
            raise KeyError(f"a stage ends on metric {self.metric!r} but update() got no such metric; "
                           f"the driver must log it every step (got {sorted(metrics)[:8]}...)")
        return bool(_OPS[self.op](float(metrics[self.metric]), self.value))

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def parse_predicate(raw: Mapping[str, Any] | Predicate) -> Predicate:
    """A predicate from plain data: ``{metric: parallel/ratio, op: '>=', value: 0.9, patience: 3}``."""
    if isinstance(raw, Predicate):
        return raw
    unknown = set(raw) - {"metric", "op", "value", "min_steps", "patience"}
    if unknown:
        raise ValueError(f"unknown predicate key(s) {sorted(unknown)}; valid: metric, op, value, min_steps, patience")
    if "value" not in raw or raw["value"] is None:
        raise ValueError(f"predicate on {raw.get('metric')!r} needs a value")
    return Predicate(raw.get("metric") or "", raw.get("op") or "", float(raw["value"]),
                     int(raw.get("min_steps") or 0), int(raw.get("patience") or 1))
