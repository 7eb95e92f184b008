"""Checks of model arguments that torch would otherwise reject in its own words, deep inside a constructor, and of
the values a checkpoint holds (`WRITES`: what attnzoo fit writes there)."""

from __future__ import annotations

import math
from typing import Any


def at_least(name: str, value: Any, low: int) -> int:
    """`value` when it is an int >= `low` (not a bool, not a float or string); ValueError naming `name` otherwise."""
    if not is_integer(value) or value < low:
        raise ValueError(f"{name} ({value!r}) must be an int >= {low}")
    return value


def finite_number(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) that is finite: a rate, a temperature, a constant."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def divisors(n: int) -> str:
    """The positive divisors of `n` as "1, 2, 3, 6", for a message naming the valid counts (key/value heads)."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


WRITES = "what attnzoo fit writes"  # a checkpoint's value that is not of this form is named with it


def is_integer(value: Any) -> bool:
    """Whether `value` is an int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_count(value: Any) -> bool:
    """Whether `value` is an integer >= 0 (not a bool)."""
    return is_integer(value) and value >= 0


def _tensor(value: Any) -> bool:
    """Whether `value` is a tensor (an array with `shape` and `numel`; this module imports the standard library
    alone)."""
    return hasattr(value, "shape") and callable(getattr(value, "numel", None))


def is_number(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) or a one-element tensor."""
    if _tensor(value):
        return value.numel() == 1
    return isinstance(value, int | float) and not isinstance(value, bool)


def shown(value: Any) -> str:
    """`value` as an error message shows it: its start and its type (a tensor: its shape)."""
    text = repr(value) if not _tensor(value) else f"a tensor of shape {list(value.shape)}"
    return f"{text[:60]}{'...' if len(text) > 60 else ''} (a {type(value).__name__})"
