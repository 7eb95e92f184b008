"""`attend()`: the one dispatch point from (q, k, v, pattern, bias, padding) to an attention kernel.

Notation: B batch, H query heads, Hkv key/value heads (H % Hkv == 0), Lq query length, Lk key length,
D head dim. Inputs are q [B, H, Lq, D], k and v [B, Hkv, Lk, D]; the output is [B, H, Lq, D].

Masks follow one convention inside this file: an *allowed* bool tensor, True where a query may read a
key, broadcastable to [B, H, Lq, Lk]. (`key_padding_mask` from users is the opposite, True = padding,
as in `torch.nn.MultiheadAttention`; it is turned around in one place, `patterns.unpadded`.)

A query with no allowed key returns zeros (and zero gradients), never NaN, on every backend.

Backends join the capability table `BACKENDS`; `backend="auto"` walks `AUTO_ORDER` and takes the first
backend whose `supports()` has no objection, logging the choice once per distinct situation. A backend with
several kernel paths names them (`Sdpa.PATHS`, sdpa's CPU bias paths) and says which one a request takes
(`path(req)`): what ran is then reported as "name[path]", in the log and in the name `attend` returns.

Attention kinds whose weights are not a softmax of the scores (sinks, sigmoid) go through the same table: they
declare a `Transform` (the formula, and the forms some kernels can run it in), which `attend` hands to the
backend, and each backend's `supports` says whether it can run it. What ran is then reported as "name[kind]".
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from .patterns import right_padded, unpadded

log = logging.getLogger("attnzoo")

Tensor = torch.Tensor


@dataclass(frozen=True)
class Request:
    """What one attention call needs; `auto` decides from this alone."""

    device_type: str
    needs_grad: bool
    return_weights: bool
    pattern: Any | None
    bias: Any | None
    has_padding: bool
    lq: int
    lk: int
    dropout_p: float = 0.0
    dtype: torch.dtype | None = None  # of q (under autocast: what the projections produced)
    head_dim: int = 0
    transform: Transform | None = None  # a kind's weights when they are not a softmax (sinks, sigmoid)
    right_padding: bool = False  # the key padding pads only the end of rows (looked at on CPU, with a pattern)

    def describe(self) -> str:
        pattern = type(self.pattern).__name__ if self.pattern is not None else "full"
        bias = type(self.bias).__name__ if self.bias is not None else "none"
        mode = "train" if self.needs_grad else "inference"
        return f"device={self.device_type}, {mode}, pattern={pattern}, bias={bias}, weights={self.return_weights}"


class Backend(Protocol):
    name: str

    def supports(self, req: Request) -> str | None:
        """None when this backend can run `req`, else a short reason why not (a backend that runs no kind's
        `Transform` refuses every `req.transform`; it is then called without `transform`)."""

    # optional: `avoid_in_auto(req) -> str | None`, a reason for `auto` to pass over a backend that would run
    # `req` when asked explicitly (e.g. a compile per shape, or a pattern too dense to gain from sparsity)

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        pattern: Any | None,
        bias: Tensor | Any | None,
        key_padding_mask: Tensor | None,
        dropout_p: float,
        scale: float,
        return_weights: bool,
        transform: Transform | None = None,
    ) -> tuple[Tensor, Tensor | None]: ...


class Transform:
    """How an attention kind's weights come from its scores when they are not a softmax (the kind's
    `Attention.transform()` returns one). The formula, `weights`, is all a kind must write: the eager and
    blocked backends run it explicitly. Faster forms are optional; a backend runs a transform only in a form
    it has (its `supports` says why not otherwise):

    - `fused(q, k, v, mask, scale, is_causal) -> out`: the whole call on torch's fused CPU kernel (sdpa, and
      blocked per group of blocks); q, k, v [N, H, L, D] with the same heads, `mask` additive [N|1, 1|H, Lq, Lk]
      or None. Only exact without attention dropout.
    - `rescale(lse) -> [B, H, Lq]`: flex runs a softmax of `score_mod(score, b, h, q_idx, kv_idx)` (None: the
      scores themselves) and multiplies each row by `rescale` of its log-sum-exp.

    Attributes:
        name: the kind, reported as "backend[name]".
        refuses: backend name -> why this kind never runs there (checked when a layer is built).
        trains: the transform has parameters that take a gradient now (a training call for `auto`).
    """

    name: str = "transform"
    refuses: Mapping[str, str] = {}
    trains: bool = False
    fused: Callable[..., Tensor] | None = None
    score_mod: Callable[..., Tensor] | None = None
    rescale: Callable[[Tensor], Tensor] | None = None

    def weights(self, scores: Tensor) -> Tensor:
        """fp32 scores [..., Lq, Lk] (scaled, bias added, -inf where masked) -> fp32 weights, same shape. A row
        whose keys are all masked must give zeros (or weights that stay finite), never NaN."""
        raise NotImplementedError


# ----------------------------------------------------------------------------------------------------------------
# shared helpers


def allowed_mask(
    pattern: Any | None, key_padding_mask: Tensor | None, lq: int, lk: int, device, rows: slice | None = None
) -> Tensor | None:
    """The dense allowed mask, [B or 1, 1, Lq, Lk], or None when every pair is allowed.

    Args:
        rows: only these query rows ([B or 1, 1, c, Lk]), for engines that go through the queries in chunks.
    """
    allowed = None
    if pattern is not None:
        if rows is None:
            allowed = pattern.dense_mask(lq, lk, device=device)  # [Lq, Lk], or [B, Lq, Lk] for per-batch patterns
        else:
            q_idx = torch.arange(lq, device=device)[rows]
            allowed = pattern.bind(lq, lk).mask_at(q_idx, torch.arange(lk, device=device))  # [c, Lk] or [B, c, Lk]
        allowed = allowed[None, None] if allowed.dim() == 2 else allowed[:, None]  # [1|B, 1, Lq|c, Lk]
    if key_padding_mask is not None:
        keep = unpadded(key_padding_mask)[:, None, None, :]  # [B, 1, 1, Lk]
        allowed = keep if allowed is None else allowed & keep
    return allowed


def barred_pairs(values: Tensor, allowed: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """A bias tensor's -inf entries (a bool `attn_mask` that `Attention` turned into a bias) as masked pairs:
    (`values` with 0 there, `allowed` without them), for engines that transform the scores before masking them
    (head mixing) or must know the rows left with no key; unchanged when there is no -inf."""
    barred = torch.isneginf(values)
    if not bool(barred.any()):
        return values, allowed
    return values.masked_fill(barred, 0.0), ~barred if allowed is None else allowed & ~barred


def dense_bias(bias: Tensor | Any | None, lq: int, lk: int, device, dtype) -> Tensor | None:
    """A bias module or tensor as an additive 4-D tensor broadcastable to [B, H, Lq, Lk].

    Always 4-D: given a 3-D [H, Lq, Lk] mask, CPU sdpa leaves its fused kernel (measured 1.7x slower).
    """
    if bias is None:
        return None
    out = bias if isinstance(bias, Tensor) else bias.dense(lq, lk, device=device, dtype=dtype)
    return out.reshape((1,) * (4 - out.dim()) + tuple(out.shape)) if out.dim() < 4 else out


def trains(bias: Tensor | Any | None) -> bool:
    """True when `bias` (a tensor or a bias module) carries a gradient: a backend must then train it."""
    if isinstance(bias, Tensor):
        return bias.requires_grad
    return bias is not None and any(p.requires_grad for p in getattr(bias, "parameters", list)())


def rescue_empty_rows(allowed: Tensor) -> tuple[Tensor, Tensor | None]:
    """Open every key for rows that have none, so kernels stay finite; returns (mask, rows_alive or None).

    The caller multiplies the output by `rows_alive` ([..., Lq, 1]), which turns those rows into zeros
    with zero gradient.
    """
    alive = allowed.any(dim=-1, keepdim=True)  # [B|1, 1, Lq, 1]
    if bool(alive.all()):
        return allowed, None
    return allowed | ~alive, alive


def rescued_mask(
    pattern: Any | None, key_padding_mask: Tensor | None, lq: int, lk: int, device
) -> tuple[Tensor | None, Tensor | None]:
    """`allowed_mask` with `rescue_empty_rows` applied: (mask or None, rows_alive or None)."""
    allowed = allowed_mask(pattern, key_padding_mask, lq, lk, device)
    return (None, None) if allowed is None else rescue_empty_rows(allowed)


def masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax of scores [..., Lk] over the allowed keys (bool, broadcastable); rows with none give zeros."""
    if allowed is None:
        return scores.softmax(dim=-1)
    allowed, alive = rescue_empty_rows(allowed)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return weights if alive is None else weights * alive


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """[B, Hkv, L, D] -> [B, Hkv * groups, L, D], each kv head serving `groups` query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def is_plain_causal(pattern: Any | None, lq: int, lk: int) -> bool:
    return pattern is not None and getattr(pattern, "is_causal", False) and lq == lk


# ----------------------------------------------------------------------------------------------------------------
# eager: the correctness oracle


class Eager:
    """Explicit scores and an fp32 softmax (or a kind's `Transform`); returns weights. The oracle: every other
    backend is tested against this, so it is written out here top to bottom."""

    name = "eager"

    def supports(self, req: Request) -> str | None:
        return None

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights, transform=None):
        lq, lk = q.shape[-2], k.shape[-2]
        groups = q.shape[1] // k.shape[1]
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # [B, H, Lk, D]: each kv head serves `groups` q heads
        scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # [B, H, Lq, Lk], fp32
        if bias is not None:
            scores = scores + dense_bias(bias, lq, lk, q.device, torch.float32).float()
        allowed = allowed_mask(pattern, key_padding_mask, lq, lk, q.device)  # [B|1, 1, Lq, Lk] bool, or None
        if isinstance(bias, Tensor):  # an attn_mask's -inf masks its pairs too (bias modules are finite)
            reachable = scores != float("-inf")
            allowed = reachable if allowed is None else allowed & reachable
        if transform is not None:  # a kind's own weights (sinks, sigmoid): masked pairs score -inf
            weights = transform.weights(scores if allowed is None else scores.masked_fill(~allowed, float("-inf")))
        elif allowed is None:
            weights = scores.softmax(dim=-1)
        else:  # a row with no allowed key gets zeros (and zero gradients), not NaN
            alive = allowed.any(dim=-1, keepdim=True)  # [B|1, 1, Lq, 1]
            weights = scores.masked_fill(~allowed, float("-inf")).masked_fill(~alive, 0.0).softmax(dim=-1) * alive
        weights = weights.to(q.dtype)
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = dropped @ v.to(q.dtype)  # [B, H, Lq, D]
        return out, (weights if return_weights else None)


# ----------------------------------------------------------------------------------------------------------------
# the capability table and dispatch

BACKENDS: dict[str, Backend] = {"eager": Eager()}
# `auto` tries these in order; the other backends (sdpa, flash, flex, blocked) insert themselves where they belong.
AUTO_ORDER: list[str] = ["eager"]

_logged: set[tuple[str, str]] = set()


def register_backend(backend: Backend, *, before: str | None = None) -> None:
    """Add a backend to the table and to `auto`'s order (ahead of `before`, else last but eager)."""
    BACKENDS[backend.name] = backend
    if backend.name in AUTO_ORDER:
        AUTO_ORDER.remove(backend.name)
    at = AUTO_ORDER.index(before) if before in AUTO_ORDER else len(AUTO_ORDER) - 1
    AUTO_ORDER.insert(at, backend.name)


def check_backend_name(name: str) -> None:
    """Raise ValueError unless `name` is "auto" or a registered backend's name."""
    valid = ["auto", *BACKENDS]
    if not isinstance(name, str):  # a list or mapping from a config cannot be looked up
        raise ValueError(f"expected an attention backend name of {valid}, got {name!r}")
    if name != "auto" and name not in BACKENDS:
        from ..util.names import suggest

        raise ValueError(f"unknown attention backend {name!r}; valid: {valid}{suggest(name, valid)}")


def with_path(name: str, req: Request) -> str:
    """`name`, or "name[path]" when the backend runs `req` on one of its named paths (`Sdpa.PATHS`), or
    "name[kind]" for a kind's `Transform`."""
    if req.transform is not None:
        return f"{name}[{req.transform.name}]"
    path = BACKENDS[name].path(req) if hasattr(BACKENDS[name], "path") else None
    return name if path is None else f"{name}[{path}]"


def backend_name(used: str) -> str:
    """The registered backend of a name `choose_backend` returns: "sdpa[hankel_table]" -> "sdpa"."""
    return used.partition("[")[0]


def refusal(name: str, req: Request) -> str | None:
    """Why backend `name` cannot run `req` (the kind's transform refuses it, or the backend's own reason), or None."""
    if req.transform is not None and name in req.transform.refuses:
        return req.transform.refuses[name]
    return BACKENDS[name].supports(req)


def choose_backend(req: Request, backend: str = "auto") -> str:
    """What will run `req`: a backend name, with its path when it has named ones ("sdpa[table_grad]") or the kind
    whose transform it runs ("blocked[sinks]").

    Explicit choices that cannot run raise; `auto` logs its choice once per distinct situation.
    """
    check_backend_name(backend)
    if backend != "auto":
        reason = refusal(backend, req)
        if reason is not None:
            who = f"attention backend {backend!r}"
            if req.transform is not None:
                who = f"attention kind {req.transform.name!r} on backend {backend!r}"
            raise ValueError(f"{who} cannot run this call ({req.describe()}): {reason}")
        return with_path(backend, req)
    skipped = []
    for name in AUTO_ORDER:
        reason = refusal(name, req)
        if reason is None and hasattr(BACKENDS[name], "avoid_in_auto"):
            reason = BACKENDS[name].avoid_in_auto(req)
        if reason is None:
            chosen = with_path(name, req)
            key = (chosen, req.describe())
            if key not in _logged:
                _logged.add(key)
                why = "; ".join(f"not {n}: {r}" for n, r in skipped)
                plain = req.pattern is None and req.bias is None and req.transform is None  # dense: sdpa, no choice
                log.info(
                    "attention backend auto -> %s for %s%s",
                    chosen,
                    req.describe(),
                    f" ({why})" if why and not plain else "",
                )
                if why and plain:  # the others' reasons (flex compiles, flash is CUDA's) matter for patterns and biases
                    log.debug("attention backend auto: %s", why)
            return chosen
        skipped.append((name, reason))
    raise RuntimeError(f"no attention backend can run {req.describe()}: {skipped}")  # eager accepts everything


def request(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pattern: Any | None,
    bias: Tensor | Any | None,
    key_padding_mask: Tensor | None,
    dropout_p: float,
    return_weights: bool,
    transform: Transform | None = None,
) -> Request:
    """The `Request` of a call."""
    grads = q.requires_grad or k.requires_grad or v.requires_grad or trains(bias)
    grads = grads or (transform is not None and transform.trains)
    return Request(
        device_type=q.device.type,
        needs_grad=torch.is_grad_enabled() and grads,
        return_weights=return_weights,
        pattern=pattern,
        bias=bias,
        has_padding=key_padding_mask is not None,
        right_padding=key_padding_mask is not None
        and pattern is not None
        and q.device.type == "cpu"
        and right_padded(key_padding_mask) is not None,
        lq=q.shape[-2],
        lk=k.shape[-2],
        dropout_p=dropout_p,
        dtype=q.dtype,
        head_dim=q.shape[-1],
        transform=transform,
    )


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pattern: Any | None = None,
    bias: Tensor | Any | None = None,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    backend: str = "auto",
    return_weights: bool = False,
    transform: Transform | None = None,
) -> tuple[Tensor, Tensor | None, str]:
    """Attention over q [B, H, Lq, D] and k, v [B, Hkv, Lk, D]; returns (out [B, H, Lq, D], weights, what ran).

    What ran is the backend's name, with the path for backends that have named ones ("sdpa[hankel_table]").

    Args:
        pattern: which (query, key) pairs interact (see `patterns.py`); None means all.
        bias: additive scores, a tensor broadcastable to [B, H, Lq, Lk] or a bias module (see `biases.py`).
        key_padding_mask: bool [B, Lk], True marks padding keys.
        scale: score scale, default 1/sqrt(D).
        backend: "auto" or a name in `BACKENDS`.
        return_weights: also return the [B, H, Lq, Lk] weights (only the eager backend can).
        transform: the weights of a kind whose weights are not a softmax of the scores (`Transform`).
    """
    check_inputs(q, k, v, key_padding_mask)
    req = request(
        q,
        k,
        v,
        pattern=pattern,
        bias=bias,
        key_padding_mask=key_padding_mask,
        dropout_p=dropout_p,
        return_weights=return_weights,
        transform=transform,
    )
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # a bias module's tables are made once for the call: choosing a kernel path may read them too
    with bias.once_per_call() if hasattr(bias, "once_per_call") else contextlib.nullcontext():
        name = choose_backend(req, backend)
        out, weights = BACKENDS[backend_name(name)](
            q,
            k,
            v,
            pattern=pattern,
            bias=bias,
            key_padding_mask=key_padding_mask,
            dropout_p=dropout_p,
            scale=scale,
            return_weights=return_weights,
            **({} if transform is None else {"transform": transform}),  # a softmax-only backend takes none
        )
    return out, weights, name


def check_inputs(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, H, L, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"k and v must be [B, Hkv, Lk, D] matching q {tuple(q.shape)}; got {tuple(k.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    if key_padding_mask is not None:
        expected = (q.shape[0], k.shape[-2])
        if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != expected:
            raise ValueError(
                f"key_padding_mask must be a bool tensor of shape [B, Lk] = {list(expected)} with True marking "
                f"padding; got dtype {key_padding_mask.dtype}, shape {list(key_padding_mask.shape)}"
            )
