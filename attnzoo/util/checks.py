"""Checks of model arguments that torch would otherwise reject in its own words, deep inside a constructor."""

from __future__ import annotations

import math
from typing import Any


def at_least(name: str, value: Any, low: int) -> int:
    """`value` when it is an int >= `low` (not a bool, not a float or string); ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} ({value!r}) must be an int >= {low}")
    return value


def finite_number(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) that is finite: a rate, a temperature, a constant."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def divisors(n: int) -> str:
    """The positive divisors of `n` as "1, 2, 3, 6", for a message naming the valid counts (key/value heads)."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
