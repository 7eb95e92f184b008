"""Masked language model: the text classifier's encoder (`TextClassifier`, built by the same code with the same
options, so its tensors have the same names) with a token-prediction head instead of a pooled classifier head.

A classifier started from an MLM run (`model.init_from`, `attnzoo.run.start`) loads every tensor of the encoder
(`embed`, `pos_embed`, `encoder`), starts its `head` new and drops `mlm_head` (and nothing else).

Notation: B batch, L tokens, C width, V vocabulary, N predicted positions.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from .text import TextClassifier

Tensor = torch.Tensor


class MLMHead(nn.Module):
    """BERT's prediction head: dense + GELU + LayerNorm, then logits over the vocabulary from `tied` (the token
    embedding table [V, C]) or from a weight of its own, plus a bias. The text classifier's embedding rows have unit
    scale (each of C entries ~ N(0, 1)), so the logits are divided by sqrt(C): they start O(1)."""

    def __init__(self, *, dim: int, vocab_size: int, tied: nn.Embedding | None, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.tied = [tied] if tied is not None else None  # a list: the embedding stays out of this module's tensors
        self.weight = None if tied is not None else nn.Parameter(torch.randn(vocab_size, dim))
        self.scale = dim**-0.5
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        """x [..., C] -> logits [..., V]."""
        weight = self.tied[0].weight if self.tied is not None else self.weight  # [V, C]
        return F.linear(self.norm(F.gelu(self.dense(x))) * self.scale, weight, self.bias)


class MaskedLM(TextClassifier):
    """Predicts the original token at masked positions (BERT's pretraining objective, without next-sentence).

    Args:
        vocab_size, pad_id, max_len: from the tokenizer and data (`MLMDataModule.model_inputs()`).
        dim, depth, num_heads, mlp_ratio, position, attention, drop_rate, drop_path_rate, layer_scale, norm,
            norm_eps: the encoder, as `TextClassifier` takes them; a classifier starting from this model's run is
            built with the run's values (`attnzoo.run.start`), its own dropout aside.
        tie_embeddings: the head's output weights are the token embedding table (BERT); else a table of its own.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        pad_id: int = 0,
        max_len: int = 512,
        dim: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        position: str | dict[str, Any] = "sinusoidal",
        attention: dict[str, Any] | None = None,
        drop_rate: float = 0.1,
        drop_path_rate: float = 0.0,
        layer_scale: float | None = None,
        norm: Literal["pre", "post"] = "pre",
        norm_eps: float = 1e-5,
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__(
            vocab_size=vocab_size,
            num_classes=1,
            pad_id=pad_id,
            max_len=max_len,
            dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            position=position,
            pooling="mean",  # no cls vector: the classifier that starts from this run pools the tokens
            attention=attention,
            drop_rate=drop_rate,
            drop_path_rate=drop_path_rate,
            layer_scale=layer_scale,
            norm=norm,
            norm_eps=norm_eps,
        )
        self.head = None  # the classifier's head: a classifier starting from this run makes its own
        self.mlm_head = MLMHead(dim=dim, vocab_size=vocab_size, tied=self.embed if tie_embeddings else None,
                                norm_eps=norm_eps)  # fmt: skip

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None, select: Tensor | None = None) -> Tensor:
        """tokens [B, L], padding_mask [B, L] bool (True = pad) -> logits [B, L, V]; with `select` [B, L] bool,
        only the selected positions' logits [N, V] (the head's cost grows with V: predict where there are labels)."""
        x = self.features(tokens, padding_mask)  # [B, L, C]
        if select is not None:
            x = x[select]  # [N, C]
        return self.mlm_head(x)
