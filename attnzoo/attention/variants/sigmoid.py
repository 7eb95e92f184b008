"""Sigmoid attention (Ramapuram et al., 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"):
each weight is a sigmoid of its own score, with no normalization over the row.

    out_i = sum_j sigmoid(x_ij + b) v_j        x_ij: scaled scores (+ bias) of allowed keys, b = -log n

As in the paper, n is the sequence length the model is built for (`seq_len`, which models pass as context), a
constant: padding then changes nothing, and decoding with a cache gives what a full forward gives. Backends
(`backend` / "auto"):

- eager: the formula; returns the weights.
- blocked: the formula on each group of blocks the pattern reads (the blocked backend's per-group `kernel`), so
  sparse patterns train in O(N x keys per query) memory on any device.
- flex: a softmax of logsigmoid(x + b) times its row sum exp(logsumexp): the same weights, from FlexAttention's
  score_mod and log-sum-exp. On CUDA it trains (gradients flow through the log-sum-exp); compiled flex on CPU
  cannot return the log-sum-exp (torch 2.14), so CPU uses eager or blocked.
- sdpa and flash are refused: their kernels compute a softmax inside, and torch has no fused sigmoid kernel
  (the paper's FlashSigmoid is its own CUDA kernel).

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys, D head dim; n = B * query blocks
(in the blocked kernel).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from ..attention import Attention
from ..backends import BACKENDS, eager_scores
from . import dispatch

Tensor = torch.Tensor

RUNS_ON = ("eager", "blocked", "flex")
ORDER = ("flex", "blocked", "eager")  # auto's preference
WHY_NOT = "its weights are sigmoids, and the sdpa and flash kernels compute a softmax inside (no fused sigmoid kernel)"


class SigmoidAttention(Attention):
    """Multi-head attention with elementwise sigmoid weights, sigmoid(q k / sqrt(D) + b), b = -log n.

    State-dict compatible with `Attention` (and timm's); it has no parameters of its own.

    Args:
        seq_len: n, the longest sequence the layer sees (models pass it as context): b = -log n.
        b: the constant added to every score, instead of -log seq_len.
        kwargs: `Attention` options; `backend` one of "auto", "eager", "blocked", "flex".
    """

    kind = "sigmoid"

    @classmethod
    def check_config(cls, options: Mapping[str, Any], parts: Collection[str] = ()) -> None:
        super().check_config(options, parts)
        dispatch.check_name(cls.kind, options.get("backend", "auto"), RUNS_ON, WHY_NOT)

    def __init__(
        self, dim: int, num_heads: int = 8, *, seq_len: int | None = None, b: float | None = None, **kwargs: Any
    ) -> None:
        self.check_config(kwargs)
        if b is None:
            if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
                raise ValueError(
                    f"attention kind 'sigmoid' adds b = -log n to every score: it needs seq_len (n, the longest "
                    f"sequence; attnzoo's models pass it) as a positive int, or b itself; got seq_len={seq_len!r}"
                )
            b = -math.log(seq_len)
        elif isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b):
            raise ValueError(f"b must be a finite number, got {b!r}")
        super().__init__(dim, num_heads, **kwargs)
        self.b = float(b)

    def _attend(self, q, k, v, *, x, context, pattern, bias, key_padding_mask, backend, return_weights, cache=None):
        dropout_p = self.attn_drop if self.training else 0.0
        req = dispatch.request(
            q,
            k,
            v,
            pattern=pattern,
            bias=bias,
            key_padding_mask=key_padding_mask,
            dropout_p=dropout_p,
            return_weights=return_weights,
        )
        name = dispatch.choose(self.kind, req, backend, ORDER, _objection)
        self.backend_used = f"{name}[{self.kind}]"
        offset = self.b
        call = dict(pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=self.scale)
        if name == "eager":
            return sigmoid_eager(q, k, v, offset, **call, dropout_p=dropout_p, return_weights=return_weights)
        if name == "blocked":
            kernel = _group_kernel(offset)
            return BACKENDS["blocked"](q, k, v, **call, dropout_p=dropout_p, return_weights=False, kernel=kernel)

        def logsigmoid(score, b, h, q_idx, kv_idx):
            return F.logsigmoid(score + offset)

        out, lse = BACKENDS["flex"].run(q, k, v, **call, then=logsigmoid, return_lse=True)  # lse [B, H, Lq]
        return out * torch.exp(lse)[..., None].to(out.dtype), None  # a row with no key: lse = -inf, zeros

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, b={self.b:.4g}"


def _objection(name: str, req: Any, auto: bool) -> str | None:
    reason = dispatch.supports(name, req)
    if reason is not None or name == "eager":
        return reason
    if name == "flex" and req.device_type == "cpu" and getattr(BACKENDS["flex"], "compile", True):
        return "compiled FlexAttention on CPU cannot return the log-sum-exp (torch 2.14); use blocked or eager"
    if auto and name == "blocked":
        return BACKENDS["blocked"].avoid_in_auto(req)
    return None


def sigmoid_eager(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offset: float,
    *,
    pattern: Any | None,
    bias: Any | None,
    key_padding_mask: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The formula: q [B, H, Lq, D], k, v [B, Hkv, Lk, D], offset b -> (out [B, H, Lq, D], weights or None)."""
    call = dict(pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=scale, offset=offset)
    scores, allowed, v = eager_scores(q, k, v, **call)  # [B, H, Lq, Lk], v [B, H, Lk, D]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))  # sigmoid(-inf) = 0, with zero gradient
    weights = torch.sigmoid(scores).to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v.to(q.dtype), (weights if return_weights else None)


def _group_kernel(offset: float):
    """The blocked backend's per-group kernel (see `Blocked.__call__`) with offset b."""

    def kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float, scale: float) -> Tensor:
        n, h, bq, d = q.shape
        hkv = k.shape[1]
        qg = q.reshape(n, hkv, h // hkv, bq, d)  # [n, Hkv, groups, bq, D]: no copies of k and v for GQA
        scores = (qg.float() @ k.float()[:, :, None].transpose(-2, -1)) * scale  # [n, Hkv, groups, bq, K * bk]
        scores = scores.reshape(n, h, bq, -1) + offset  # [n, H, bq, K * bk]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
        weights = torch.sigmoid(scores).to(q.dtype)
        if dropout_p > 0:
            weights = F.dropout(weights, p=dropout_p)
        out = weights.reshape(n, hkv, h // hkv, bq, -1) @ v[:, :, None].to(q.dtype)  # [n, Hkv, groups, bq, D]
        return out.reshape(n, h, bq, d)

    return kernel
