"""Decoder-only causal language model: token embedding + positions + masked self-attention blocks + tied head.

Notation: B batch, L tokens, C width, V vocabulary.
The generation protocol (`attnzoo.generation`), with no memory: `new_cache()`,
`decode_step(tokens, None, None, cache)`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from ..attention.cache import DecodingCache
from ..attention.factory import layer_shape
from ..layers.decoder import check_decoder_attention, make_decoder
from .seq2seq import TokenEmbedding, check_tokens

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

# `activation` choices: the MLP's nonlinearity ("gelu_tanh" is GPT-2's `gelu_new`)
ACTIVATIONS = {"gelu": nn.GELU, "gelu_tanh": partial(nn.GELU, approximate="tanh"), "relu": nn.ReLU, "silu": nn.SiLU}


class CausalLM(nn.Module):
    """Predicts each next token from the ones before it (GPT-style, pre-norm).

    Args:
        vocab_size, pad_id: from the tokenizer.
        max_len: the longest sequence in tokens (sizes a learned position table; generation stops there).
        dim, depth, num_heads, mlp_ratio: width C, blocks, heads and MLP ratio.
        position: absolute positions added to embeddings (`POSITIONS` spec): "sinusoidal", "learned", "none"
            (with `attention: {rotary: rope}` or an ALiBi / T5 bias).
        attention: the self-attention config (`attnzoo.attention.factory.attention_builder`), made causal.
        tie_embeddings: the output projection reads the embedding table (else a separate linear head).
        drop_rate: dropout on embeddings and in the MLPs; drop_path_rate: stochastic depth.
        norm_eps: epsilon of every LayerNorm.
        activation: the MLP nonlinearity, a key of `ACTIVATIONS` ("gelu_tanh" is GPT-2's).
        scale_embeddings: multiply token embeddings by sqrt(C) (as `Seq2Seq`); GPT-2 does not.
        freeze_pad_embedding: the `pad_id` row of the embedding gets no gradient (`nn.Embedding(padding_idx)`);
            False when padding reuses a real token (GPT-2 pads with its end-of-text token, whose row must train).

    A loaded learned position table longer than `max_len` (a checkpoint trained on longer sequences) keeps its first
    `max_len` rows, which is exact for sequences up to `max_len`; the log says so.
    """

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Raise ValueError for `model:` options a decoder refuses whatever the data (config validation calls it)."""
        sizes = {k: options[k] for k in ("dim", "num_heads") if isinstance(options.get(k), int)}
        check_decoder_attention(options.get("attention"), "model.attention", **sizes)

    def __init__(
        self,
        *,
        vocab_size: int,
        pad_id: int = 0,
        max_len: int = 256,
        dim: int = 256,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        position: str | dict[str, Any] = "sinusoidal",
        attention: dict[str, Any] | None = None,
        tie_embeddings: bool = True,
        drop_rate: float = 0.1,
        drop_path_rate: float = 0.0,
        norm_eps: float = 1e-5,
        activation: str = "gelu",
        scale_embeddings: bool = True,
        freeze_pad_embedding: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        if not norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {norm_eps!r}")
        self.pad_id, self.max_len = pad_id, max_len
        self.embed = TokenEmbedding(
            vocab_size=vocab_size, dim=dim, pad_id=pad_id, position=position, max_len=max_len, drop_rate=drop_rate
        )
        if not scale_embeddings:
            self.embed.scale = 1.0
        if not freeze_pad_embedding:
            self.embed.embed.padding_idx = None  # the row keeps its initialization (zero), and trains
        self.decoder = make_decoder(
            dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            attention=attention,
            cross=False,
            drop_path_rate=drop_path_rate,
            proj_drop=drop_rate,
            norm_layer=partial(nn.LayerNorm, eps=norm_eps),
            act_layer=ACTIVATIONS[activation],
            layer_shape=layer_shape(max_len=max_len),
        )
        self.head = None if tie_embeddings else nn.Linear(dim, vocab_size, bias=False)

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        """Activation checkpointing of the blocks (`Encoder.set_grad_checkpointing`)."""
        self.decoder.set_grad_checkpointing(enabled, **kwargs)

    def new_cache(self) -> DecodingCache:
        """An empty decoding cache (one per batch of prompts)."""
        return self.decoder.new_cache()

    def decode_step(
        self,
        tokens: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: DecodingCache | None = None,
    ) -> Tensor:
        """tokens [B, L] -> logits [B, L, V]. Without a cache, tokens is the whole prefix; with one, the next L
        tokens (their positions continue at `cache.offset`). A language model has no memory: pass None."""
        if memory is not None or memory_padding_mask is not None:
            raise ValueError("CausalLM has no encoder: decode_step takes memory=None, memory_padding_mask=None")
        offset = 0 if cache is None else cache.offset
        check_tokens(tokens, "tokens", self.max_len, offset)
        x = self.decoder(self.embed(tokens, offset), cache=cache)  # [B, L, C]
        return self.embed.logits(x) if self.head is None else self.head(x)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens [B, L] -> next-token logits [B, L, V]. Right padding needs no mask: real tokens never read it."""
        return self.decode_step(tokens)
