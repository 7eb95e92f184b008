"""Patterns: WHICH (query, key) pairs may interact. Meaning only; `backends.py` decides how to run them.

A pattern gives a `mask_mod(b, h, q_idx, kv_idx) -> bool` (FlexAttention's convention, True = allowed)
and a dense bool mask [Lq, Lk] built from it. Patterns compose with `&` and `|`.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


class Pattern:
    """Base class. Subclasses implement `mask_mod`; everything else derives from it."""

    is_causal = False  # exactly the causal mask (lets sdpa use its is_causal fast path)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        raise NotImplementedError

    def dense_mask(self, lq: int, lk: int, device: torch.device | str | None = None) -> Tensor:
        """bool [Lq, Lk], True where query i may read key j."""
        q_idx = torch.arange(lq, device=device)[:, None]
        kv_idx = torch.arange(lk, device=device)[None, :]
        zero = torch.zeros((), dtype=torch.long, device=device)
        return self.mask_mod(zero, zero, q_idx, kv_idx).expand(lq, lk)

    def __and__(self, other: Pattern) -> Pattern:
        return And(self, other)

    def __or__(self, other: Pattern) -> Pattern:
        return Or(self, other)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class Causal(Pattern):
    """Query i reads keys j <= i (top-left aligned, as `F.scaled_dot_product_attention(is_causal=True)`)."""

    is_causal = True

    def mask_mod(self, b, h, q_idx, kv_idx):
        return q_idx >= kv_idx


class And(Pattern):
    def __init__(self, *parts: Pattern) -> None:
        self.parts = parts
        self.is_causal = all(p.is_causal for p in parts)

    def mask_mod(self, b, h, q_idx, kv_idx):
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out & p.mask_mod(b, h, q_idx, kv_idx)
        return out


class Or(Pattern):
    def __init__(self, *parts: Pattern) -> None:
        self.parts = parts
        self.is_causal = all(p.is_causal for p in parts)

    def mask_mod(self, b, h, q_idx, kv_idx):
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out | p.mask_mod(b, h, q_idx, kv_idx)
        return out


# config short names -> classes (see attnzoo.attention.factory)
PATTERNS: dict[str, type[Pattern]] = {"causal": Causal}
