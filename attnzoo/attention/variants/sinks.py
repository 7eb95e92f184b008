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
- blocked: the same kernel on each group of blocks (the formula written out with dropout or off CPU).
- flex: out = o * sigmoid(l - s_h) from flex's log-sum-exp (gradients flow through it on CUDA). Compiled flex
  on CPU cannot return the log-sum-exp (torch 2.14), so on CPU sinks run on sdpa or blocked.

A query with no allowed key puts all its weight on the sink: its output is zero, never NaN.

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys, D head dim; n = B * query blocks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import sdpa_bias
from ..attention import Attention
from ..backends import Transform
from ..toeplitz import row_chunks

Tensor = torch.Tensor

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class SinkWeights(Transform):
    """Softmax over the keys plus a sink column of logit s_h (dropped from the weights); see the module docstring."""

    name = "sinks"
    refuses = {"flash": "flash-attn takes no sink logits"}

    def __init__(self, layer: SinkAttention) -> None:
        self.sinks = layer.sinks  # [H]
        self.trains = layer.sinks.requires_grad

    def weights(self, scores: Tensor) -> Tensor:
        column = self.sinks.float().view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # [..., H, Lq, 1]
        return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]  # a row with no key: all on the sink

    def fused(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, is_causal: bool) -> Tensor:
        return _SinkFlash.apply(q, k, v, self.sinks, mask, scale, is_causal)

    def rescale(self, lse: Tensor) -> Tensor:
        return torch.sigmoid(lse - self.sinks.float()[:, None])  # exp(l - L), L = logaddexp(l, s_h)


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
    mha_start = "sink logits at 0: a softmax plus one"
    starts_as_mha = False
    transform_class = SinkWeights

    def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, **kwargs)
        self.sinks = nn.Parameter(torch.zeros(num_heads, device=kwargs.get("device"), dtype=kwargs.get("dtype")))


class _SinkFlash(torch.autograd.Function):
    """q, k, v [B, H, L, D] (same heads), sinks [H], additive mask [1|B, 1|H, Lq, Lk] or None -> [B, H, Lq, D]."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, scale, is_causal):
        fixed = None if mask is None else mask.detach()
        q, k, v = sdpa_bias.unit_stride(q, k, v)
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
