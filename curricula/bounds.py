"""The numeric ranges of a curriculum's own settings, each stated once: the stages, schedule slots and
phases and transition predicates check themselves against their table, and the config's schema
(`parallax.contract.ranges`, `curriculum.stages.*...`) reads the same tables."""

from __future__ import annotations

# (lo, hi, lo_open, hi_open), None unbounded
Bound = tuple[float | None, float | None, bool, bool]
AT_LEAST_0: Bound = (0, None, False, False)
AT_LEAST_1: Bound = (1, None, False, False)


def broken(key: str, value: float | None, bound: Bound) -> str | None:
    """What is wrong with `value` under `bound` (None is unset: nothing), as `key must be >= 1, got 0`."""
    lo, hi, lo_open, hi_open = bound
    if value is None:
        return None
    below = lo is not None and (value <= lo if lo_open else value < lo)
    if not below and (hi is None or (value < hi if hi_open else value <= hi)):
        return None
    want = " and ".join(x for x in (None if lo is None else f"{'>' if lo_open else '>='} {lo:g}",
                                    None if hi is None else f"{'<' if hi_open else '<='} {hi:g}") if x)
    return f"{key} must be {want}, got {value}"
