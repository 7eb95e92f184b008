"""Backend choice for attention kinds whose weights are not a softmax of the scores (sinks, sigmoid).

Such a kind cannot hand its call to `attend()`: on each backend it supports it runs a kernel of its own (its
eager formula, a fused kernel plus a rescaling, the blocked backend's per-group `kernel`, a flex `score_mod`).
`choose()` picks among those backends as `attend` picks among all of them: an explicit backend that cannot run
the call raises and says why, `auto` takes the first in the kind's order that has no objection and logs its
choice once. What ran is reported as "backend[kind]" (`Attention.backend_used`). A kind describes its call with
`request` (the one `attend()` makes, from `backends.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..backends import BACKENDS, Request, check_backend_name, request

log = logging.getLogger("attnzoo")

# (backend name, request, auto) -> None when the kind runs the request there, else why not
Objection = Callable[[str, Request, bool], str | None]

_logged: set[tuple[str, str, str]] = set()


def check_name(kind: str, backend: str, runs_on: tuple[str, ...], why_not: str) -> None:
    """Raise at construction when `backend` is neither "auto" nor one the kind runs on."""
    check_backend_name(backend)
    if backend != "auto" and backend not in runs_on:
        raise ValueError(
            f"attention kind {kind!r} cannot run on backend {backend!r}: {why_not}; it runs on {list(runs_on)} "
            "(or 'auto')"
        )


def choose(kind: str, req: Request, backend: str, order: tuple[str, ...], objection: Objection) -> str:
    """The backend of `order` that runs `req` for `kind`: `backend` itself (raising if it cannot), or for "auto" the
    first with no objection."""
    if backend != "auto":
        reason = objection(backend, req, False)
        if reason is not None:
            raise ValueError(
                f"attention kind {kind!r} on backend {backend!r} cannot run this call ({req.describe()}): {reason}"
            )
        return backend
    skipped = []
    for name in order:
        reason = objection(name, req, True)
        if reason is None:
            key = (kind, name, req.describe())
            if key not in _logged:
                _logged.add(key)
                why = "; ".join(f"not {n}: {r}" for n, r in skipped)
                log.info(
                    "attention kind %s: auto -> %s for %s%s", kind, name, req.describe(), f" ({why})" if why else ""
                )
            return name
        skipped.append((name, reason))
    raise RuntimeError(f"attention kind {kind!r}: no backend can run {req.describe()}: {skipped}")


def supports(name: str, req: Request) -> str | None:
    """The backend's own objection (`Backend.supports`), or why it is not available."""
    if name not in BACKENDS:
        return f"backend {name!r} is not available here"
    return BACKENDS[name].supports(req)


__all__ = ["check_name", "choose", "request", "supports"]
