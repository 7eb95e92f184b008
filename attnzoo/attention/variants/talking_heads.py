"""Talking-heads attention (Shazeer et al., 2020): learned static mixing of heads before and after the softmax."""

from __future__ import annotations

from typing import Any

from .compose import Chunk, ComposedAttention, HeadComposition


class TalkingHeadsAttention(ComposedAttention):
    """Multi-head attention whose scores and weights are each mixed across heads by a learned [H, H] matrix.

    Both mixings start as the identity (the layer then equals `Attention`). Same heads in and out of each
    mixing (the paper also allows different counts). See `ComposedAttention` for the options.
    """

    kind = "talking_heads"

    def __init__(
        self, dim: int, num_heads: int = 8, *, chunk_size: Chunk = 256, checkpoint: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(dim, num_heads, chunk_size=chunk_size, checkpoint=checkpoint, **kwargs)
        self.pre = HeadComposition(num_heads)
        self.post = HeadComposition(num_heads)
