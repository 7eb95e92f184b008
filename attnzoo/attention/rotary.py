"""Rotary position embeddings applied to q [B, H, Lq, D] and k [B, Hkv, Lk, D] inside `Attention`.

Interface used by `Attention`: `rotary(q, k) -> (q, k)`.
"""

from __future__ import annotations

from torch import nn

ROTARY: dict[str, type[nn.Module]] = {}
