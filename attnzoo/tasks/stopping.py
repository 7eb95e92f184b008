"""`run.early_stopping`: stop a fit when the task's monitored metric has not improved for `patience` validations.

The options (true/false/null, or {patience, min_delta}) become Lightning `EarlyStopping` arguments; `attnzoo.config`
checks them when a config is loaded, `attnzoo.run.build` builds the callback on the task's monitor.
"""

from __future__ import annotations

from typing import Any

EARLY_STOPPING = {"patience": 10, "min_delta": 0.0}


def early_stopping_options(value: Any, *, key: str = "run.early_stopping") -> dict[str, Any] | None:
    """Normalize `true/false/null` or `{patience, min_delta}` to EarlyStopping arguments (None: off)."""
    if value is None or value is False:
        return None
    if value is True:
        return dict(EARLY_STOPPING)
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected true/false or a mapping with keys {list(EARLY_STOPPING)}, got {value!r}")
    unknown = sorted(set(value) - set(EARLY_STOPPING))
    if unknown:
        raise ValueError(f"{key}: unknown keys {unknown}; valid: {list(EARLY_STOPPING)}")
    opts = {**EARLY_STOPPING, **value}
    if isinstance(opts["patience"], bool) or not isinstance(opts["patience"], int) or opts["patience"] < 1:
        raise ValueError(f"{key}.patience: expected an int >= 1, got {opts['patience']!r}")
    if isinstance(opts["min_delta"], bool) or not isinstance(opts["min_delta"], int | float) or opts["min_delta"] < 0:
        raise ValueError(f"{key}.min_delta: expected a number >= 0, got {opts['min_delta']!r}")
    return opts
