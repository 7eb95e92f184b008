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
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from . import sdpa_bias
from .patterns import unpadded

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

    def describe(self) -> str:
        pattern = type(self.pattern).__name__ if self.pattern is not None else "full"
        bias = type(self.bias).__name__ if self.bias is not None else "none"
        mode = "train" if self.needs_grad else "inference"
        return f"device={self.device_type}, {mode}, pattern={pattern}, bias={bias}, weights={self.return_weights}"


class Backend(Protocol):
    name: str

    def supports(self, req: Request) -> str | None:
        """None when this backend can run `req`, else a short reason why not."""

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
    ) -> tuple[Tensor, Tensor | None]: ...


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


def eager_scores(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pattern: Any | None,
    bias: Tensor | Any | None,
    key_padding_mask: Tensor | None,
    scale: float,
    offset: float = 0.0,
) -> tuple[Tensor, Tensor | None, Tensor]:
    """The scores of every eager formula (this backend's, sigmoid's, sinks'): fp32 scores [B, H, Lq, Lk] =
    q k^T * scale + offset + bias, the allowed mask (or None), and v repeated to the H query heads [B, H, Lk, D]."""
    lq, lk = q.shape[-2], k.shape[-2]
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # [B, H, Lk, D]
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # [B, H, Lq, Lk]
    if offset:
        scores = scores + offset
    b = dense_bias(bias, lq, lk, q.device, torch.float32)
    if b is not None:
        scores = scores + b.float()
    return scores, allowed_mask(pattern, key_padding_mask, lq, lk, q.device), v


class Eager:
    """Explicit scores and an fp32 softmax; returns weights. Every other backend is tested against this."""

    name = "eager"

    def supports(self, req: Request) -> str | None:
        return None

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights):
        scores, allowed, v = eager_scores(
            q, k, v, pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=scale
        )
        weights = masked_softmax(scores, allowed).to(q.dtype)
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = dropped @ v.to(q.dtype)  # [B, H, Lq, D]
        return out, (weights if return_weights else None)


# ----------------------------------------------------------------------------------------------------------------
# sdpa: torch's fused kernels


class Sdpa:
    """`F.scaled_dot_product_attention` (flash / memory-efficient / cuDNN on GPU, flash on CPU), and on CPU three
    paths of `sdpa_bias.py` for biases, named in `PATHS` and reported as "sdpa[<path>]" (`auto`'s log, the
    name `attend` returns, `Attention.backend_used`). Plain "sdpa" is torch's kernel, with or without a mask."""

    name = "sdpa"
    PATHS = {
        "table_grad": "CPU training of a learned table over offsets (T5, relative_2d): the fused forward, and a "
        "chunked backward that sums each chunk's score gradient into the table (sdpa_with_relative_bias)",
        "hankel_table": "CPU, a 1D table over offsets that is not trained (ALiBi, a frozen T5, inference): "
        "read in place as a Hankel view by the fused kernel (sdpa_with_fixed_sequence_bias)",
        "bias_grad": "CPU training of any other learned bias: the fused forward on the dense bias, and a "
        "chunked backward (sdpa_with_bias_grad)",
    }

    def supports(self, req: Request) -> str | None:
        if req.return_weights:
            return "fused kernels do not return attention weights"
        return None

    def path(self, req: Request) -> str | None:
        """The path of `PATHS` that runs `req`, or None for torch's kernel."""
        trained = trains(req.bias) and req.needs_grad  # needs_grad: grad mode is on
        return _sdpa_path(req.device_type, req.dtype, req.bias, trained, req.lq, req.lk, req.dropout_p)[0]

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights):
        if return_weights:
            raise ValueError("backend 'sdpa' cannot return attention weights; use backend='eager' or 'auto'")
        lq, lk = q.shape[-2], k.shape[-2]
        gqa = q.shape[1] != k.shape[1]
        groups = q.shape[1] // k.shape[1]
        trained = trains(bias) and torch.is_grad_enabled()
        path, relative = _sdpa_path(q.device.type, q.dtype, bias, trained, lq, lk, dropout_p)
        if path in ("table_grad", "hankel_table"):
            # a table over offsets, never made dense whole (sdpa_bias.py): a learned one gets its gradient reduced
            # chunk by chunk; a fixed 1D one is read in place as a view
            allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)
            if path == "table_grad":
                out = sdpa_bias.sdpa_with_relative_bias(
                    q, repeat_kv(k, groups), repeat_kv(v, groups), **relative, allowed=allowed, scale=scale
                )
            else:
                out = sdpa_bias.sdpa_with_fixed_sequence_bias(
                    q, k, v, relative["table"], allowed=allowed, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
                )
            return (out if alive is None else out * alive), None
        b = dense_bias(bias, lq, lk, q.device, q.dtype)
        if b is None and key_padding_mask is None and (pattern is None or is_plain_causal(pattern, lq, lk)):
            causal = pattern is not None
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=causal, scale=scale, enable_gqa=gqa
            ), None
        allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)
        if b is None:
            mask = allowed
        else:
            mask = b.to(q.dtype)
            if allowed is not None:
                mask = mask.masked_fill(~allowed, float("-inf"))
        if path == "bias_grad":  # the fused kernel plus a chunked backward, not the math path (see sdpa_bias.py)
            out = sdpa_bias.sdpa_with_bias_grad(q, repeat_kv(k, groups), repeat_kv(v, groups), mask, scale)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
            )
        if alive is not None:
            out = out * alive
        return out, None


def _sdpa_path(
    device_type: str, dtype: torch.dtype | None, bias: Any, trained: bool, lq: int, lk: int, dropout_p: float
) -> tuple[str | None, dict[str, Any] | None]:
    """(`Sdpa.PATHS` key or None, the bias's table over offsets or None) for a call; `trained`: the call trains
    `bias` (grad mode on and the bias needs a gradient)."""
    if device_type != "cpu" or bias is None:
        return None, None
    # sdpa_bias computes a bias gradient without dropout, in the float dtypes it takes
    learned = trained and not dropout_p and dtype in sdpa_bias.DTYPES
    relative = None if isinstance(bias, Tensor) or not hasattr(bias, "relative") else bias.relative(lq, lk)
    if relative is None:
        return ("bias_grad" if learned else None), None
    if learned:
        return "table_grad", relative
    sequence = relative["grid_q"][0] == relative["grid_k"][0] == 1 and not relative["num_prefix_tokens"]
    if sequence and not trained:  # the view detaches the table: only for a table that takes no gradient here
        return "hankel_table", relative
    return None, relative


# ----------------------------------------------------------------------------------------------------------------
# the capability table and dispatch

BACKENDS: dict[str, Backend] = {"eager": Eager(), "sdpa": Sdpa()}
# `auto` tries these in order; later backends (flash, flex, blocked) insert themselves where they belong.
AUTO_ORDER: list[str] = ["sdpa", "eager"]

_logged: set[tuple[str, str]] = set()


def register_backend(backend: Backend, *, before: str | None = None) -> None:
    """Add a backend to the table and to `auto`'s order (ahead of `before`, else last but eager)."""
    BACKENDS[backend.name] = backend
    if backend.name in AUTO_ORDER:
        AUTO_ORDER.remove(backend.name)
    at = AUTO_ORDER.index(before) if before in AUTO_ORDER else len(AUTO_ORDER) - 1
    AUTO_ORDER.insert(at, backend.name)


def check_backend_name(name: str) -> None:
    if name != "auto" and name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; valid: {['auto', *BACKENDS]}")


def with_path(name: str, req: Request) -> str:
    """`name`, or "name[path]" when the backend runs `req` on one of its named paths (`Sdpa.PATHS`)."""
    path = BACKENDS[name].path(req) if hasattr(BACKENDS[name], "path") else None
    return name if path is None else f"{name}[{path}]"


def backend_name(used: str) -> str:
    """The registered backend of a name `choose_backend` returns: "sdpa[hankel_table]" -> "sdpa"."""
    return used.partition("[")[0]


def choose_backend(req: Request, backend: str = "auto") -> str:
    """What will run `req`: a backend name, with its path when it has named ones ("sdpa[table_grad]").

    Explicit choices that cannot run raise; `auto` logs its choice once per distinct situation.
    """
    check_backend_name(backend)
    if backend != "auto":
        reason = BACKENDS[backend].supports(req)
        if reason is not None:
            raise ValueError(f"attention backend {backend!r} cannot run this call ({req.describe()}): {reason}")
        return with_path(backend, req)
    skipped = []
    for name in AUTO_ORDER:
        reason = BACKENDS[name].supports(req)
        if reason is None and hasattr(BACKENDS[name], "avoid_in_auto"):
            reason = BACKENDS[name].avoid_in_auto(req)
        if reason is None:
            chosen = with_path(name, req)
            key = (chosen, req.describe())
            if key not in _logged:
                _logged.add(key)
                why = "; ".join(f"not {n}: {r}" for n, r in skipped)
                log.info("attention backend auto -> %s for %s%s", chosen, req.describe(), f" ({why})" if why else "")
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
    trains_own: bool = False,
) -> Request:
    """The `Request` of a call; `trains_own`: the caller (an attention kind) has parameters of its own that train."""
    grads = q.requires_grad or k.requires_grad or v.requires_grad or trains(bias) or trains_own
    return Request(
        device_type=q.device.type,
        needs_grad=torch.is_grad_enabled() and grads,
        return_weights=return_weights,
        pattern=pattern,
        bias=bias,
        has_padding=key_padding_mask is not None,
        lq=q.shape[-2],
        lk=k.shape[-2],
        dropout_p=dropout_p,
        dtype=q.dtype,
        head_dim=q.shape[-1],
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
