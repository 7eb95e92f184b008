"""Text classifier: token embedding + absolute position + the shared `Encoder` + pooling + a linear head.

Notation: B batch, L tokens (plus one when a cls token is prepended), C width.
Rotary embeddings and relative biases are attention parts: set them in the attention config
(`attention: {rotary: rope}` or `{bias: t5}`, usually with `position: none`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..attention.factory import layer_shape
from ..attention.positions import POSITIONS
from ..attention.specs import build
from ..layers.encoder import make_encoder
from ..layers.pooling import mean_pool

Tensor = torch.Tensor

POOLINGS = ("cls", "mean")


class TextClassifier(nn.Module):
    """Classifies token sequences; padded tokens (`padding_mask` True) change nothing.

    Args:
        vocab_size, pad_id: from the tokenizer (`TextDataModule.model_inputs()`).
        max_len: the longest input in tokens (sizes a learned position table).
        position: absolute positions added to embeddings, a `POSITIONS` spec: "sinusoidal", "learned", "none",
            or a mapping such as {kind: sinusoidal, base: 500}.
        pooling: "cls" (a learned token prepended) or "mean" (over non-pad tokens).
        attention: the attention config (`attnzoo.attention.factory.attention_builder`): kind, pattern, bias, ...
        drop_rate: dropout on embeddings, in the MLPs and before the head.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        num_classes: int,
        pad_id: int = 0,
        max_len: int = 512,
        dim: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        position: str | dict[str, Any] = "sinusoidal",
        pooling: str = "cls",
        attention: dict[str, Any] | None = None,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        layer_scale: float | None = None,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"model.pooling: unknown {pooling!r}; valid: {list(POOLINGS)}")
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id ({pad_id}) must be in [0, vocab_size ({vocab_size}))")
        self.pad_id, self.max_len, self.pooling = pad_id, max_len, pooling
        self.num_prefix_tokens = 1 if pooling == "cls" else 0
        shape = layer_shape(max_len=max_len, num_prefix_tokens=self.num_prefix_tokens)
        positions = shape["seq_len"]  # the cls token has a position too

        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim)) if pooling == "cls" else None
        self.pos_embed = build(position, POSITIONS, "model.position", dim=dim, max_len=positions)  # None for "none"
        self.drop = nn.Dropout(drop_rate)
        self.encoder = make_encoder(
            dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            attention=attention,
            drop_path_rate=drop_path_rate,
            layer_scale=layer_scale,
            proj_drop=drop_rate,
            layer_shape=shape,
        )
        self.head = nn.Linear(dim, num_classes)

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        """Activation checkpointing of the encoder blocks (`Encoder.set_grad_checkpointing`)."""
        self.encoder.set_grad_checkpointing(enabled, **kwargs)

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """tokens [B, L] long, padding_mask [B, L] bool (True = pad) -> logits [B, num_classes]."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, L], got shape {tuple(tokens.shape)}")
        b, length = tokens.shape
        if length > self.max_len:
            raise ValueError(f"{length} tokens exceed the model's max_len ({self.max_len})")
        if padding_mask is not None and padding_mask.shape != tokens.shape:
            raise ValueError(f"padding_mask {tuple(padding_mask.shape)} must match tokens {tuple(tokens.shape)}")
        x = self.embed(tokens)  # [B, L, C]
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1)  # [B, 1 + L, C]
            if padding_mask is not None:
                padding_mask = torch.cat([padding_mask.new_zeros(b, 1), padding_mask], dim=1)  # [B, 1 + L]
        if self.pos_embed is not None:
            x = self.pos_embed(x)
        x = self.encoder(self.drop(x), key_padding_mask=padding_mask)  # [B, L', C]
        pooled = x[:, 0] if self.pooling == "cls" else mean_pool(x, padding_mask)  # [B, C]
        return self.head(self.drop(pooled))
