"""Differential attention (Ye et al., ICLR 2025, "Differential Transformer"): the difference of two softmax maps,
which cancels the attention both maps give to irrelevant keys.

Each head's queries and keys are split into two halves (q1, k1), (q2, k2) of width d = D / 2; its values keep
width D. With the paper's reparameterization of the learned scalar lambda,

    lambda  = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init          (lq1, lk1, lq2, lk2 learned [d] vectors)
    head    = (softmax(q1 k1^T / sqrt d) - lambda softmax(q2 k2^T / sqrt d)) v
    out     = (1 - lambda_init) RMSNorm(head)                       (per head, one learned scale for all heads)

lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) for layer l (counted from 1), as in the paper.

Run as two fused `attend()` calls, never as materialized weights: for map m the other half's channels of q and k
are zeroed, so q_m k_m^T is an ordinary dot product over D channels and any backend (sdpa, flash, flex, blocked)
runs it with the values at full width; patterns, biases, key padding, GQA, cross-attention and decoding work as
in `mha`. The halves are the even and the odd channels of each head: rotate-half rotary pairs (c, c + D/2) keep
their parity when D/2 is even, so rotary built for D rotates each half as a rotary of its own (the even half
gets exactly the frequencies of a rotary built for d). qk-norm normalizes each head's D channels. Attention
dropout drops each map's weights independently.

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys, D head dim, d = D / 2.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ...util.checks import finite_number
from ..attention import Attention, Call
from ..backends import attend

Tensor = torch.Tensor


def lambda_init_of(layer_index: int) -> float:
    """The paper's lambda_init for the layer at `layer_index` (0 for the first layer)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


class DifferentialAttention(Attention):
    """Multi-head differential attention; parameters as `Attention` (and timm's) plus the lambda vectors and the
    per-head RMSNorm, so the qkv and proj weights of an MHA checkpoint load into it.

    Args:
        lambda_init: lambda's constant part; None uses the paper's schedule over `layer_index`.
        layer_index: the layer's place in the stack, from 0 (`factory.attention_builder` passes it).
        kwargs: `Attention` options (head_dim must be even; with rotary, a multiple of 4).
    """

    kind = "differential"
    mha_start = "lambda vectors random, head_norm at 1: two half-width maps instead of one"
    starts_as_mha = False

    def __init__(
        self, dim: int, num_heads: int = 8, *, lambda_init: float | None = None, layer_index: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(dim, num_heads, **kwargs)
        head_dim = self.head_dim
        multiple = 4 if self.rotary is not None else 2
        if head_dim % multiple:
            raise ValueError(
                f"differential attention splits each head's queries and keys into even and odd channels: head_dim "
                f"(dim / num_heads = {head_dim}) must be a multiple of {multiple}"
                + (" with rotary (so that rotary pairs stay in one half)" if multiple == 4 else "")
            )
        if isinstance(layer_index, bool) or not isinstance(layer_index, int) or layer_index < 0:
            raise ValueError(f"layer_index must be an int >= 0, got {layer_index!r}")
        if lambda_init is not None and not finite_number(lambda_init):
            raise ValueError(f"lambda_init must be a finite number or None (by layer), got {lambda_init!r}")
        self.lambda_init = lambda_init_of(layer_index) if lambda_init is None else float(lambda_init)
        d = head_dim // 2
        dd = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(d, **dd) * 0.1) for _ in range(4)
        )
        self.head_norm = nn.RMSNorm(head_dim, eps=1e-5, **dd)
        self.map_scale = d**-0.5

    def lambda_(self) -> Tensor:
        """lambda, an fp32 scalar."""
        dot = lambda a, b: (a.float() * b.float()).sum()  # noqa: E731
        return dot(self.lambda_q1, self.lambda_k1).exp() - dot(self.lambda_q2, self.lambda_k2).exp() + self.lambda_init

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        odd = torch.arange(q.shape[-1], device=q.device) % 2  # [D]: 0 for the first half's channels
        options = dict(
            pattern=call.pattern,
            bias=call.bias,
            key_padding_mask=call.key_padding_mask,
            dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.map_scale,
            backend=call.backend,
            return_weights=call.return_weights,
        )
        maps = []
        for half in (0, 1):
            keep = (odd == half).to(q.dtype)  # [D]
            maps.append(attend(q * keep, k * keep.to(k.dtype), v, **options))  # (out [B, H, Lq, D], weights, name)
        (o1, w1, self.backend_used), (o2, w2, _) = maps
        lam = self.lambda_()
        heads = o1.float() - lam * o2.float()  # [B, H, Lq, D], fp32 for the norm (its weight is fp32)
        out = self.head_norm(heads) * (1.0 - self.lambda_init)
        weights = None if w1 is None else w1 - lam.to(w1.dtype) * w2  # the difference map [B, H, Lq, Lk]
        return out.to(q.dtype), weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda_init={self.lambda_init:.3f}"
