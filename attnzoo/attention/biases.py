"""Biases: WHAT is added to attention scores. Meaning only; `backends.py` decides how to run them.

A bias is a module with `values(q_idx, kv_idx) -> [H, ...]`: the additive score for query positions
`q_idx` and key positions `kv_idx` (integer tensors broadcast against each other). Everything else derives
from it: `dense(lq, lk)` -> [H, Lq, Lk] for eager and sdpa, and `score_mod()` for FlexAttention.
Subclasses may override `dense` or `score_mod` with faster versions; tests hold them to `values`.

Built-ins are listed in `BIASES` (config short names).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Tensor = torch.Tensor


class Bias(nn.Module):
    """Base class: subclasses implement `values`. `num_heads` is H."""

    learned = False  # True when the bias has trainable parameters (backends that cannot train them refuse)

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads

    def values(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        raise NotImplementedError

    def dense(self, lq: int, lk: int, device=None, dtype=None) -> Tensor:
        """[H, Lq, Lk] additive scores."""
        q_idx = torch.arange(lq, device=device)[:, None]
        kv_idx = torch.arange(lk, device=device)[None, :]
        out = self.values(q_idx, kv_idx).expand(self.num_heads, lq, lk)
        return out if dtype is None else out.to(dtype)

    def score_mod(self, lq: int, lk: int) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
        """FlexAttention `score_mod(score, b, h, q_idx, kv_idx)` adding this bias."""
        table = self.dense(lq, lk)  # [H, Lq, Lk]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx, kv_idx]

        return score_mod


BIASES: dict[str, type[Bias]] = {}
