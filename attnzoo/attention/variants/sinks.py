"""Attention sinks: a learned logit s_h per head that joins every softmax denominator (Xiao et al., ICLR 2024,
"Efficient Streaming Language Models with Attention Sinks"; learned per head as in OpenAI's gpt-oss, 2025).

    out_i = sum_j exp(x_ij) v_j / (exp(s_h) + sum_j exp(x_ij))         x_ij: scaled scores (+ bias), allowed keys

This is softmax attention over the keys plus one extra key whose score is s_h and whose value is zero: a query
may give weight to "nothing", and its weights need not sum to 1. With l_i = logsumexp_j x_ij, which fused kernels
compute anyway, and L_i = logaddexp(l_i, s_h):

    out_i = o_i * exp(l_i - L_i)          o_i: plain softmax attention

so one fused call plus O(Lq) work gives it exactly. Backends (`backend` / "auto"):

- eager: the formula itself (scores, a sink column, the softmax, the column dropped); returns the weights.
- sdpa (CPU): torch's fused CPU flash kernel returns (o, l). Its own backward, given out and L instead of o and
  l, recomputes the weights exp(x_ij - L_i) of attention over keys + sink and so gives the exact gradients of
  q, k, v (the sink's zero value adds nothing to them); the sink's is -sum_i exp(s_h - L_i) (dout_i . out_i).
  A learned bias gets its gradient from a chunked backward (`sdpa_bias.py`).
- blocked: the same kernel on each group of blocks (explicit math with dropout or off CPU).
- flex: out = o * sigmoid(l - s_h) from flex's log-sum-exp (gradients flow through it on CUDA). Compiled flex
  on CPU cannot return the log-sum-exp (torch 2.14), so on CPU sinks run on sdpa or blocked.

A query with no allowed key puts all its weight on the sink: its output is zero, never NaN.

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys, D head dim; n = B * query blocks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import sdpa_bias
from ..attention import Attention
from ..backends import BACKENDS, dense_bias, eager_scores, is_plain_causal, repeat_kv, rescued_mask
from ..toeplitz import row_chunks
from . import dispatch

Tensor = torch.Tensor

RUNS_ON = ("eager", "sdpa", "blocked", "flex")
ORDER = ("flex", "blocked", "sdpa", "eager")  # auto's preference
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class SinkAttention(Attention):
    """Multi-head attention with a learned sink logit per head in the softmax denominator.

    State-dict compatible with `Attention` (and timm's) plus `sinks` [H]. The sinks start at 0 (a softmax "plus
    one": each query can put weight on nothing from the start). With a causal sliding window and a cache
    (`new_cache()`), it decodes in O(window) memory: the paper's streaming setting, with a learned sink where the
    paper keeps the first tokens.

    Args:
        kwargs: `Attention` options; `backend` one of "auto", "eager", "sdpa", "blocked", "flex".
    """

    kind = "sinks"

    def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
        self.check_config(kwargs)
        super().__init__(dim, num_heads, **kwargs)
        self.sinks = nn.Parameter(torch.zeros(num_heads, device=kwargs.get("device"), dtype=kwargs.get("dtype")))

    @classmethod
    def check_config(cls, options: Mapping[str, Any], parts: Collection[str] = ()) -> None:
        super().check_config(options, parts)
        backend, drop = options.get("backend", "auto"), options.get("attn_drop", 0.0)
        dispatch.check_name(cls.kind, backend, RUNS_ON, "flash-attn takes no sink logits")
        if backend == "sdpa" and drop:  # known now, not at the first training step
            raise ValueError(
                f"attention kind 'sinks' cannot train on backend 'sdpa' with attn_drop {drop}: the fused CPU kernel "
                "it uses runs without attention dropout (and off the CPU sdpa gives no log-sum-exp); use backend "
                "'eager' or 'blocked' (or 'auto'), or attn_drop 0"
            )

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
            trains_own=self.sinks.requires_grad,
        )
        name = dispatch.choose(self.kind, req, backend, ORDER, _objection)
        self.backend_used = f"{name}[{self.kind}]"
        call = dict(pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=self.scale)
        if name == "eager":
            return sink_eager(q, k, v, self.sinks, **call, dropout_p=dropout_p, return_weights=return_weights)
        if name == "sdpa":
            return sink_sdpa(q, k, v, self.sinks, **call), None
        if name == "blocked":
            kernel = _group_kernel(self.sinks)
            return BACKENDS["blocked"](q, k, v, **call, dropout_p=dropout_p, return_weights=False, kernel=kernel)
        out, lse = BACKENDS["flex"].run(q, k, v, **call, return_lse=True)  # lse [B, H, Lq]
        return out * torch.sigmoid(lse - self.sinks.float()[:, None])[..., None].to(out.dtype), None


def _objection(name: str, req: Any, auto: bool) -> str | None:
    reason = dispatch.supports(name, req)
    if reason is not None or name == "eager":
        return reason
    if name == "sdpa":
        if req.device_type != "cpu":
            return (
                f"torch's public sdpa returns no log-sum-exp, and sinks use the CPU kernel that does; on "
                f"{req.device_type} use flex"
            )
        if req.dropout_p:
            return "the fused CPU kernel runs without attention dropout here; use eager or blocked"
    if name == "flex" and req.device_type == "cpu" and getattr(BACKENDS["flex"], "compile", True):
        return "compiled FlexAttention on CPU cannot return the log-sum-exp (torch 2.14); use sdpa or blocked"
    if auto and name == "blocked":
        return BACKENDS["blocked"].avoid_in_auto(req)
    return None


def _with_sink(scores: Tensor, sinks: Tensor) -> Tensor:
    """Weights [..., H, Lq, Lk] of fp32 scores (-inf where masked) plus a sink column of logit sinks [H]."""
    column = sinks.float().view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # [..., H, Lq, 1]
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]


def sink_eager(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sinks: Tensor,
    *,
    pattern: Any | None,
    bias: Any | None,
    key_padding_mask: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The formula: q [B, H, Lq, D], k, v [B, Hkv, Lk, D], sinks [H] -> (out [B, H, Lq, D], weights or None)."""
    call = dict(pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=scale)
    scores, allowed, v = eager_scores(q, k, v, **call)  # [B, H, Lq, Lk], v [B, H, Lk, D]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = _with_sink(scores, sinks).to(q.dtype)  # a row with no key: all weight on the sink
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v.to(q.dtype), (weights if return_weights else None)


def sink_sdpa(
    q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, *, pattern: Any, bias: Any, key_padding_mask: Any, scale: float
) -> Tensor:
    """Sink attention on torch's fused CPU kernel, masks and bias as the sdpa backend takes them."""
    lq, lk = q.shape[-2], k.shape[-2]
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # the CPU kernel wants H heads everywhere
    extra = dense_bias(bias, lq, lk, q.device, q.dtype)  # [1|B, 1|H, Lq, Lk] or None
    if extra is None and key_padding_mask is None and (pattern is None or is_plain_causal(pattern, lq, lk)):
        return _SinkFlash.apply(q, k, v, sinks, None, scale, pattern is not None)
    allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)  # rows with no key opened
    mask = _additive(allowed, q.dtype) if extra is None else extra.to(q.dtype)
    if extra is not None and allowed is not None:
        mask = mask.masked_fill(~allowed, float("-inf"))
    out = _SinkFlash.apply(q, k, v, sinks, mask, scale, False)
    return out if alive is None else out * alive


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool allowed mask as the additive float mask the CPU kernel takes (0 allowed, -inf not)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


def _group_kernel(sinks: Tensor):
    """The blocked backend's per-group kernel (see `Blocked.__call__`)."""

    def kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float, scale: float) -> Tensor:
        groups = q.shape[1] // k.shape[1]
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # [n, H, K * bk, D]
        mask = _additive(mask, q.dtype) if mask.dtype == torch.bool else mask.to(q.dtype)  # [n, 1|H, bq, K * bk]
        if q.device.type == "cpu" and not dropout_p:
            return _SinkFlash.apply(q, k, v, sinks, mask, scale, False)
        return group_eager(q, k, v, mask, sinks, dropout_p, scale)

    return kernel


def group_eager(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, sinks: Tensor, dropout_p: float, scale: float) -> Tensor:
    """Explicit sink attention of one group, q [n, H, bq, D], k, v [n, H, K * bk, D], additive mask (with dropout,
    or off CPU)."""
    weights = _with_sink((q.float() @ k.float().transpose(-2, -1)) * scale + mask.float(), sinks).to(q.dtype)
    return (F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights) @ v


class _SinkFlash(torch.autograd.Function):
    """q, k, v [B, H, L, D] (same heads), sinks [H], additive mask [1|B, 1|H, Lq, Lk] or None -> [B, H, Lq, D]."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, scale, is_causal):
        fixed = None if mask is None else mask.detach()
        o, lse = _FLASH(q, k, v, is_causal=is_causal, attn_mask=fixed, scale=scale)  # lse [B, H, Lq], fp32
        total = torch.logaddexp(lse, sinks.detach().float()[:, None])  # L: the sink joins the denominator
        out = o * torch.exp(lse - total)[..., None].to(o.dtype)
        ctx.save_for_backward(q, k, v, sinks, mask, out, total)
        ctx.scale, ctx.is_causal = scale, is_causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, mask, out, total = ctx.saved_tensors
        dout = dout.contiguous()
        dmask = None
        if mask is not None and mask.requires_grad:  # a learned bias: chunked backward with the bias gradient
            b, h, lq, lk = *q.shape[:3], k.shape[-2]
            sink = sdpa_bias._DenseSink(mask, b, h, lk)
            full = mask.detach().expand(b, h, lq, lk)
            bounds = row_chunks(lq, sdpa_bias._rows_per_chunk(q, lk), (1, lq))
            dq, dk, dv = sdpa_bias._chunked_backward(
                q, k, v, out, total, dout, ctx.scale, bounds, lambda r0, r1, s: s.copy_(full[:, :, r0:r1]), sink
            )
            dmask = sink.grad
        else:  # the kernel's own backward, given the output and log-sum-exp of attention over keys + sink
            dq, dk, dv = _FLASH_BACKWARD(dout, q, k, v, out, total, 0.0, ctx.is_causal, attn_mask=mask, scale=ctx.scale)
        on_sink = torch.exp(sinks.detach().float()[:, None] - total)  # the sink's weight [B, H, Lq]
        dsinks = -(on_sink * (dout.float() * out.float()).sum(-1)).sum((0, 2))
        return dq, dk, dv, dsinks.to(sinks.dtype), dmask, None, None
