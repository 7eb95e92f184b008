"""Pooling a sequence of tokens into one vector.

Notation: B batch, L tokens, C width.
"""

from __future__ import annotations

import torch

from ..attention.patterns import unpadded

Tensor = torch.Tensor


def mean_pool(x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
    """x [B, L, C] -> [B, C], the mean over tokens that are not padding (`padding_mask` bool [B, L], True = pad).

    A sequence of padding alone gives zeros.
    """
    if padding_mask is None:
        return x.mean(dim=1)
    keep = unpadded(padding_mask).unsqueeze(-1).to(x.dtype)  # [B, L, 1]
    return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)
