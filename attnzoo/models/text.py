"""Text classifier: token embedding + absolute position + the shared `Encoder` + pooling + a linear head.

Notation: B batch, L tokens (plus one when a cls token is prepended), C width.
Rotary embeddings and relative biases are attention parts: set them in the attention config
(`attention: {rotary: rope}` or `{bias: t5}`, usually with `position: none`).
The options `norm`, `norm_eps`, `token_types`, `embed_norm` and `pooler` describe BERT-style encoders (post-norm
blocks, a token-type table, a norm over the embeddings, a tanh pooler), so converted checkpoints
(`attnzoo.pretrained.hf_bert`) run on attnzoo's attention; their defaults build the pre-norm model.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import torch
from torch import nn

from ..attention.factory import layer_shape
from ..attention.positions import POSITIONS
from ..attention.specs import build
from ..layers.encoder import make_encoder
from ..layers.pooling import mean_pool
from ..util.checks import at_least

Tensor = torch.Tensor

POOLINGS = ("cls", "mean", "first")


class TextClassifier(nn.Module):
    """Classifies token sequences; padded tokens (`padding_mask` True) change nothing.

    Args:
        vocab_size, pad_id: from the tokenizer (`TextDataModule.model_inputs()`).
        max_len: the longest input in tokens (sizes a learned position table).
        position: absolute positions added to embeddings, a `POSITIONS` spec: "sinusoidal", "learned", "none",
            or a mapping such as {kind: sinusoidal, base: 500}.
        pooling: "cls" (a learned token prepended), "mean" (over non-pad tokens) or "first" (the first token's
            output, for a tokenizer that starts every text with its own [CLS], as BERT's tokenizer.json does).
        attention: the attention config (`attnzoo.attention.factory.attention_builder`): kind, pattern, bias, ...
        drop_rate: dropout on embeddings, in the MLPs and before the head.
        norm: "pre" (x + f(norm(x)), and a final norm) or "post" (norm(x + f(x)), no final norm: BERT).
        norm_eps: the LayerNorms' epsilon (BERT: 1e-12).
        token_types: rows of a token-type (segment) table added to every token, 0 for none; inputs without
            `token_types` are all of type 0.
        embed_norm: a LayerNorm over the summed embeddings, before dropout (BERT).
        pooler: a dense layer + tanh on the pooled vector before the head (BERT's pooler).
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
        norm: Literal["pre", "post"] = "pre",
        norm_eps: float = 1e-5,
        token_types: int = 0,
        embed_norm: bool = False,
        pooler: bool = False,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"model.pooling: unknown {pooling!r}; valid: {list(POOLINGS)}")
        if norm not in ("pre", "post"):
            raise ValueError(f"model.norm: unknown {norm!r}; valid: ['pre', 'post']")
        at_least("model.num_classes", num_classes, 1)
        if token_types < 0:
            raise ValueError(f"model.token_types ({token_types}) must be >= 0")
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
            norm_layer=partial(nn.LayerNorm, eps=norm_eps),
            post_norm=norm == "post",
        )
        # BERT's parts, created only when asked for (the default model's parameters and their init stay as they were)
        self.type_embed = nn.Embedding(token_types, dim) if token_types else None
        self.embed_norm = nn.LayerNorm(dim, eps=norm_eps) if embed_norm else None
        self.pooler = nn.Linear(dim, dim) if pooler else None
        self.head = nn.Linear(dim, num_classes)

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        """Activation checkpointing of the encoder blocks (`Encoder.set_grad_checkpointing`)."""
        self.encoder.set_grad_checkpointing(enabled, **kwargs)

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None, token_types: Tensor | None = None) -> Tensor:
        """tokens [B, L] long, padding_mask [B, L] bool (True = pad) -> logits [B, num_classes]."""
        x = self.features(tokens, padding_mask, token_types)  # [B, L', C]
        if padding_mask is not None and self.cls_token is not None:
            padding_mask = torch.cat([padding_mask.new_zeros(tokens.shape[0], 1), padding_mask], dim=1)  # [B, 1 + L]
        pooled = mean_pool(x, padding_mask) if self.pooling == "mean" else x[:, 0]  # [B, C]
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(pooled))
        return self.head(self.drop(pooled))

    def features(self, tokens: Tensor, padding_mask: Tensor | None = None, token_types: Tensor | None = None) -> Tensor:
        """The encoder's output [B, L', C] (L' = 1 + L with a cls token first); `token_types` [B, L] long (type 0
        when None) needs `token_types` rows."""
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
        if self.type_embed is not None:
            x = x + self._types(tokens, token_types)
        elif token_types is not None:
            raise ValueError("token_types given, but the model has no token-type table (model.token_types: 0)")
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return self.encoder(self.drop(x), key_padding_mask=padding_mask)  # [B, L', C]

    def _types(self, tokens: Tensor, token_types: Tensor | None) -> Tensor:
        """The token-type embeddings [B, L', C] (a cls token is of type 0)."""
        if token_types is None:
            return self.type_embed.weight[0]  # [C], the same for every token
        if token_types.shape != tokens.shape:
            raise ValueError(f"token_types {tuple(token_types.shape)} must match tokens {tuple(tokens.shape)}")
        if self.cls_token is not None:
            token_types = torch.cat([token_types.new_zeros(tokens.shape[0], 1), token_types], dim=1)  # [B, 1 + L]
        return self.type_embed(token_types)
