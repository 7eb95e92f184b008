"""DCMHA, dynamically composable multi-head attention (Xiao et al., ICML 2024, "DCFormer").

Scores (before the softmax) and weights (after it) are composed across heads by a static matrix plus
input-dependent terms: low-rank query-wise and key-wise projections and per-head gates (see `compose.py`).
Queries are processed in chunks, so memory stays O(chunk_size x Lk) per head, in training too.
"""

from __future__ import annotations

from typing import Any

from .compose import Chunk, ComposedAttention, HeadComposition


class DCMHAttention(ComposedAttention):
    """Multi-head attention with dynamic head composition; a drop-in for `Attention` (and timm's).

    Built as the identity composition (static mixing = I, dynamic terms exactly 0), so a fresh layer equals
    `Attention` with the same projections: loading a trained MHA checkpoint (strict=False) starts from it.

    Args:
        rank: R, rank of the query-wise and key-wise dynamic projections (the paper uses 2).
        hidden: hidden width of the MLPs computing the dynamic weights (default 2 * num_heads * rank).
        chunk_size, checkpoint, kwargs: see `ComposedAttention`.
    """

    kind = "dcmha"

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        rank: int = 2,
        hidden: int | None = None,
        chunk_size: Chunk = "auto",
        checkpoint: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(dim, num_heads, chunk_size=chunk_size, checkpoint=checkpoint, **kwargs)
        dims = {"query_dim": dim, "key_dim": kwargs.get("context_dim") or dim, "rank": rank, "hidden": hidden}
        self.pre = HeadComposition(num_heads, **dims)
        self.post = HeadComposition(num_heads, **dims)
