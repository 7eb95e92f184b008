"""Sigmoid attention (Ramapuram et al., 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"):
each weight is a sigmoid of its own score, with no normalization over the row.

    out_i = sum_j sigmoid(x_ij + b) v_j        x_ij: scaled scores (+ bias) of allowed keys, b = -log n

As in the paper, n is the sequence length the model is built for (`seq_len`, which models pass in the layer shape), a
constant: padding then changes nothing, and decoding with a cache gives what a full forward gives. Backends
(`backend` / "auto"):

- eager: the formula; returns the weights.
- blocked: the formula on each group of blocks the pattern reads (the blocked backend runs `SigmoidWeights`), so
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
from typing import Any

import torch
import torch.nn.functional as F

from ...util.checks import finite_number
from ..attention import Attention
from ..backends import Transform

Tensor = torch.Tensor

WHY_NOT = "its weights are sigmoids, and the sdpa and flash kernels compute a softmax inside (no fused sigmoid kernel)"


class SigmoidWeights(Transform):
    """sigmoid(score + b) for each pair on its own; flex runs it as a softmax of logsigmoid(score + b) times the
    row's exp(logsumexp)."""

    name = "sigmoid"
    refuses = {"sdpa": WHY_NOT, "flash": WHY_NOT}

    def __init__(self, layer: SigmoidAttention) -> None:
        self.b = layer.b

    def weights(self, scores: Tensor) -> Tensor:
        return torch.sigmoid(scores + self.b)  # sigmoid(-inf) = 0, with zero gradient

    def score_mod(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return F.logsigmoid(score + self.b)

    def rescale(self, lse: Tensor) -> Tensor:
        return torch.exp(lse)  # a row with no key: lse = -inf, zeros


class SigmoidAttention(Attention):
    """Multi-head attention with elementwise sigmoid weights, sigmoid(q k / sqrt(D) + b), b = -log n.

    State-dict compatible with `Attention` (and timm's); it has no parameters of its own.

    Args:
        seq_len: n, the longest sequence the layer sees (models pass it in the layer shape): b = -log n.
        b: the constant added to every score, instead of -log seq_len.
        kwargs: `Attention` options; `backend` one of "auto", "eager", "blocked", "flex".
    """

    kind = "sigmoid"
    mha_start = "elementwise sigmoids instead of the softmax"
    starts_as_mha = False
    transform_class = SigmoidWeights

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
        elif not finite_number(b):
            raise ValueError(f"b must be a finite number, got {b!r}")
        super().__init__(dim, num_heads, **kwargs)
        self.b = float(b)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, b={self.b:.4g}"
