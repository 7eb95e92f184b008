"""Encoder-decoder transformer over one shared vocabulary (translation), with tied embeddings.

Notation: B batch, S source tokens, T target tokens, C width, V vocabulary.
The generation protocol (`attnzoo.generation`): `encode(src, src_padding_mask)`, `new_cache()`,
`decode_step(tokens, memory, memory_padding_mask, cache)`.
Rotary embeddings and relative biases are attention parts: set them in the attention configs
(`attention: {rotary: rope}` or `{bias: t5}`, usually with `position: none`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention.cache import DecodingCache
from ..attention.factory import layer_shape
from ..attention.positions import POSITIONS
from ..attention.specs import build
from ..layers.decoder import check_decoder_attention, make_decoder
from ..layers.encoder import make_encoder

Tensor = torch.Tensor


class TokenEmbedding(nn.Module):
    """Token embedding scaled by sqrt(C), plus absolute positions from `offset`, then dropout; `logits` reads the
    same table when tied (Press & Wolf, 2017).

    Args:
        vocab_size, dim, pad_id: V, C and the padding token (its row starts at zero).
        position: a `POSITIONS` spec ("sinusoidal", "learned", "none", or a mapping with options).
        max_len: positions a learned table holds.
        drop_rate: dropout after the sum.
    """

    def __init__(
        self, *, vocab_size: int, dim: int, pad_id: int, position: str | dict[str, Any], max_len: int, drop_rate: float
    ) -> None:
        super().__init__()
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id ({pad_id}) must be in [0, vocab_size ({vocab_size}))")
        self.scale = math.sqrt(dim)
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        nn.init.normal_(self.embed.weight, std=dim**-0.5)  # unit scale after * sqrt(C); tied logits start O(1)
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()
        self.pos_embed = build(position, POSITIONS, "model.position", dim=dim, max_len=max_len)  # None for "none"
        self.drop = nn.Dropout(drop_rate)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens [B, L] at positions offset .. offset + L - 1 -> [B, L, C]."""
        x = self.embed(tokens)
        if self.scale != 1.0:  # GPT-2 does not scale
            x = x * self.scale
        if self.pos_embed is not None:
            x = self.pos_embed(x, offset=offset)
        return self.drop(x) if self.training else x  # dropout is the identity in eval

    def logits(self, x: Tensor) -> Tensor:
        """[B, L, C] -> [B, L, V] through the embedding table."""
        return F.linear(x, self.embed.weight)


def check_tokens(tokens: Tensor, what: str, max_len: int, offset: int = 0) -> None:
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(f"{what} must be long [B, L]; got {tokens.dtype} {list(tokens.shape)}")
    if offset + tokens.shape[1] > max_len:
        raise ValueError(f"{what}: positions up to {offset + tokens.shape[1]} exceed the model's max_len ({max_len})")


class Seq2Seq(nn.Module):
    """Pre-norm transformer encoder-decoder (Vaswani et al., 2017) with a shared source/target vocabulary.

    Args:
        vocab_size, pad_id: from the tokenizer.
        max_len: the longest source or target in tokens (sizes learned position tables; decoding stops there).
        dim, num_heads, mlp_ratio: width C, heads and MLP ratio of every block.
        encoder_depth, decoder_depth: blocks in each stack.
        position: absolute positions added to embeddings (`POSITIONS` spec): "sinusoidal", "learned", "none".
        attention: the self-attention config of both stacks (`attnzoo.attention.factory.attention_builder`).
        decoder_attention: the decoder's self-attention config, when it differs (default `attention`); made
            causal (`attnzoo.layers.decoder.causal`).
        cross_attention: the cross-attention config (default: multi-head attention).
        tie_embeddings: the output projection reads the embedding table (else a separate linear head).
        drop_rate: dropout on embeddings and in the MLPs; drop_path_rate: stochastic depth.
    """

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Raise ValueError for `model:` options the decoder refuses whatever the data (config validation calls it)."""
        key = "attention" if options.get("decoder_attention") is None else "decoder_attention"
        sizes = {k: options[k] for k in ("dim", "num_heads") if isinstance(options.get(k), int)}
        check_decoder_attention(options.get(key), f"model.{key}", **sizes)

    def __init__(
        self,
        *,
        vocab_size: int,
        pad_id: int = 0,
        max_len: int = 256,
        dim: int = 256,
        encoder_depth: int = 3,
        decoder_depth: int = 3,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        position: str | dict[str, Any] = "sinusoidal",
        attention: dict[str, Any] | None = None,
        decoder_attention: dict[str, Any] | None = None,
        cross_attention: dict[str, Any] | None = None,
        tie_embeddings: bool = True,
        drop_rate: float = 0.1,
        drop_path_rate: float = 0.0,
    ) -> None:
        super().__init__()
        self.pad_id, self.max_len = pad_id, max_len
        self.embed = TokenEmbedding(
            vocab_size=vocab_size, dim=dim, pad_id=pad_id, position=position, max_len=max_len, drop_rate=drop_rate
        )
        common = dict(dim=dim, num_heads=num_heads, mlp_ratio=mlp_ratio, drop_path_rate=drop_path_rate)
        shape = layer_shape(max_len=max_len)  # seq_len (linformer's longest key sequence) from max_len
        self.encoder = make_encoder(
            depth=encoder_depth, attention=attention, proj_drop=drop_rate, layer_shape=shape, **common
        )
        self.decoder = make_decoder(
            depth=decoder_depth,
            attention=attention if decoder_attention is None else decoder_attention,
            cross_attention=cross_attention,
            proj_drop=drop_rate,
            what="model.attention" if decoder_attention is None else "model.decoder_attention",
            layer_shape=shape,
            **common,
        )
        self.head = None if tie_embeddings else nn.Linear(dim, vocab_size, bias=False)

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        """Activation checkpointing of both stacks (`Encoder.set_grad_checkpointing`)."""
        self.encoder.set_grad_checkpointing(enabled, **kwargs)
        self.decoder.set_grad_checkpointing(enabled, **kwargs)

    def encode(self, src: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        """src [B, S] long, padding mask bool [B, S] (True = pad) -> memory [B, S, C]."""
        check_tokens(src, "src", self.max_len)
        if src_padding_mask is not None and src_padding_mask.shape != src.shape:
            raise ValueError(f"src_padding_mask {list(src_padding_mask.shape)} must match src {list(src.shape)}")
        return self.encoder(self.embed(src), key_padding_mask=src_padding_mask)

    def new_cache(self) -> DecodingCache:
        """An empty decoding cache (one per batch of sources)."""
        return self.decoder.new_cache()

    def decode_step(
        self,
        tokens: Tensor,
        memory: Tensor,
        memory_padding_mask: Tensor | None = None,
        cache: DecodingCache | None = None,
    ) -> Tensor:
        """Target tokens [B, L] -> logits [B, L, V]. Without a cache, tokens is the whole prefix; with one, the
        next L tokens (their positions continue at `cache.offset`)."""
        offset = 0 if cache is None else cache.offset
        check_tokens(tokens, "target tokens", self.max_len, offset)
        x = self.decoder(self.embed(tokens, offset), memory, memory_padding_mask, cache=cache)  # [B, L, C]
        return self.embed.logits(x) if self.head is None else self.head(x)

    def forward(self, src: Tensor, tgt_in: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: src [B, S], decoder input tgt_in [B, T] (BOS, then the target but its last token)
        -> logits [B, T, V]. Target padding needs no mask: it follows the real tokens, which (causal) never read it.
        """
        return self.decode_step(tgt_in, self.encode(src, src_padding_mask), src_padding_mask)
