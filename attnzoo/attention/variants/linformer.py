"""Linformer (Wang et al., 2020): keys and values projected along the sequence to a few rows, O(N k) attention.

With E [k, N] learned, attention reads the k rows E @ K and E @ V (F for values unless shared) instead of
the N keys. A sequence shorter than N uses the first columns of E, and padded keys are zeroed before the
projection, so a padded batch gives exactly what its unpadded sequences give.

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys (<= N = seq_len), P = proj_len rows
(k in the paper), D head dim.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import torch
from torch import nn

from ..attention import Attention, Call
from ..backends import attend

Tensor = torch.Tensor

SHARING = ("heads", "kv", "none")


class LinformerAttention(Attention):
    """Multi-head attention over keys and values projected along the sequence to `proj_len` rows.

    The projected attention runs on any backend (it is dense). Patterns and biases are refused: they are
    defined on the N keys, which no longer exist after the projection. Key padding, grouped-query heads,
    cross-attention (the context is projected), qk-norm and rotary (applied before the projection) work.

    Args:
        seq_len: N, the longest key sequence the layer takes (for a ViT: patches + prefix tokens).
        proj_len: P, rows after the projection (default min(64, seq_len)).
        share: "heads": one projection for keys and one for values, shared by all heads (the paper's
            default); "kv": a single one for both; "none": separate ones per key/value head.
        kwargs: `Attention` options.
    """

    kind = "linformer"
    mha_start = "random projections along the sequence"
    starts_as_mha = False

    @classmethod
    def check_config(cls, options: Mapping[str, Any], parts: Collection[str] = ()) -> None:
        super().check_config(options, parts)
        for option in ("pattern", "bias"):
            if option in parts:
                raise ValueError(
                    f"attention kind 'linformer' cannot use a {option}: keys are projected along the sequence, so "
                    f"there are no (query, key) positions left to mask or bias; use kind 'mha', 'talking_heads' or "
                    f"'dcmha' for {option}s"
                )

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        seq_len: int | None = None,
        proj_len: int | None = None,
        share: str = "heads",
        **kwargs: Any,
    ) -> None:
        for option in ("pattern", "bias"):
            if kwargs.get(option) is not None:
                raise ValueError(
                    f"attention kind 'linformer' cannot use a {option} (got {kwargs[option]!r}): keys are projected "
                    f"along the sequence, so there are no (query, key) positions left to mask or bias; "
                    f"use kind 'mha', 'talking_heads' or 'dcmha' for a {option}"
                )
        if seq_len is None or seq_len <= 0:
            raise ValueError(
                f"attention kind 'linformer' needs seq_len, the longest key sequence (e.g. patches + prefix tokens "
                f"of a ViT), as a positive int; got {seq_len!r}"
            )
        proj_len = min(64, seq_len) if proj_len is None else proj_len
        if not 0 < proj_len <= seq_len:
            raise ValueError(f"proj_len ({proj_len}) must be in [1, seq_len ({seq_len})]")
        if share not in SHARING:
            raise ValueError(f"share must be one of {list(SHARING)}, got {share!r}")
        super().__init__(dim, num_heads, **kwargs)
        self.seq_len, self.proj_len, self.share = seq_len, proj_len, share
        copies = self.num_kv_heads if share == "none" else 1
        std = math.sqrt(2.0 / (proj_len + seq_len))  # xavier-normal for a [P, N] map
        self.proj_k = nn.Parameter(torch.randn(copies, proj_len, seq_len) * std)  # [1 or Hkv, P, N]
        self.proj_v = None if share == "kv" else nn.Parameter(torch.randn(copies, proj_len, seq_len) * std)

    def cannot_decode(self, pattern=None) -> str | None:
        if not self.is_cross:  # cross-attention decodes: the source, and so its projection, is fixed
            return (
                "linformer projects keys and values along the whole sequence (E @ K), so a new token changes every "
                "projected row and nothing can be cached; decode with kind 'mha', 'talking_heads' or 'dcmha'"
            )
        return super().cannot_decode(pattern)

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        if call.pattern is not None or call.bias is not None:
            raise ValueError(
                "attention kind 'linformer' cannot take a pattern, is_causal or attn_mask at call time: keys are "
                "projected along the sequence (use key_padding_mask for padding)"
            )
        lk = k.shape[-2]
        if lk > self.seq_len:
            raise ValueError(f"key length {lk} exceeds seq_len ({self.seq_len}) this Linformer layer was built for")
        if call.key_padding_mask is not None:
            pad = call.key_padding_mask[:, None, :, None]  # [B, 1, Lk, 1]
            k, v = k.masked_fill(pad, 0.0), v.masked_fill(pad, 0.0)
        proj_v = self.proj_k if self.proj_v is None else self.proj_v
        k = self.proj_k[..., :lk].to(k.dtype) @ k  # [1 or Hkv, P, Lk] @ [B, Hkv, Lk, D] -> [B, Hkv, P, D]
        v = proj_v[..., :lk].to(v.dtype) @ v
        out, weights, self.backend_used = attend(
            q,
            k,
            v,
            dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.scale,
            backend=call.backend,
            return_weights=call.return_weights,
        )
        return out, weights  # weights (if asked) are over the P projected rows: [B, H, Lq, P]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, seq_len={self.seq_len}, proj_len={self.proj_len}, share={self.share}"
