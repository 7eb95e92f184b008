"""Encoder-decoder transformer over one shared vocabulary (translation), with tied embeddings.

Notation: B batch, S source tokens, T target tokens, C width, V vocabulary.
The generation protocol (`attnzoo.generation`): `encode(src, src_padding_mask)`, `new_cache()`,
`decode_step(tokens, memory, memory_padding_mask, cache)`.
Rotary embeddings and relative biases are attention parts: set them in the attention configs
(`attention: {rotary: rope}` or `{bias: t5}`, usually with `position: none`).

The options `norm`, `scale_embeddings`, `embed_norm`, `decoder_positions` and `logits_bias` describe BART-style
models (post-norm blocks, unscaled embeddings with a LayerNorm over them, a position table per stack, a fixed bias on
the logits), so converted checkpoints (`attnzoo.pretrained.hf_bart`) run on attnzoo's attention; their defaults
build the pre-norm model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..attention.cache import DecodingCache
from ..attention.factory import layer_shape
from ..attention.positions import POSITIONS
from ..attention.specs import build, no_spec
from ..layers.decoder import check_decoder_attention, make_decoder
from ..layers.encoder import make_encoder

Tensor = torch.Tensor


def _positioned(x: Tensor, pos_embed: nn.Module | None, norm: nn.Module | None, offset: int) -> Tensor:
    """x [B, L, C] plus absolute positions from `offset`, then the embedding norm (either may be None)."""
    if pos_embed is not None:
        x = pos_embed(x, offset=offset)
    return x if norm is None else norm(x)


LAYOUT = ("qkv_bias", "proj_bias")  # attention options that decide which tensors its projections have
DROPOUT = ("attn_drop", "proj_drop")  # a converted checkpoint's attention dropout (BART's attention_dropout, dropout)


def decoder_layout(options: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `decoder_attention` section an override gives a start from a checkpoint (its model `options`): the
    override's, with the projection layout (`LAYOUT`) and dropout (`DROPOUT`) of the checkpoint's decoder (its
    `decoder_attention`, else its `attention`) where the override does not set them, so that its tensors have their
    place and it trains as the checkpoint did; None when the override sets no `decoder_attention` mapping."""
    given = overrides.get("decoder_attention")
    if not isinstance(given, Mapping):
        return None
    theirs = options.get("decoder_attention") or options.get("attention") or {}
    return {**{k: theirs[k] for k in (*LAYOUT, *DROPOUT) if k in theirs}, **given}


class TokenEmbedding(nn.Module):
    """Token embedding scaled by sqrt(C), plus absolute positions from `offset`, an optional LayerNorm, then dropout;
    `logits` reads the same table when tied (Press & Wolf, 2017).

    Args:
        vocab_size, dim, pad_id: V, C and the padding token (its row starts at zero).
        position: a `POSITIONS` spec ("sinusoidal", "learned", "none", or a mapping with options).
        max_len: positions a learned table holds.
        drop_rate: dropout after the sum.
        embed_norm: a LayerNorm over the sum, before dropout (BART's `layernorm_embedding`).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        dim: int,
        pad_id: int,
        position: str | dict[str, Any],
        max_len: int,
        drop_rate: float,
        embed_norm: bool = False,
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
        self.norm = nn.LayerNorm(dim) if embed_norm else None  # created only when asked: the default init stays

    def forward(self, tokens: Tensor, offset: int = 0, positions: Positions | None = None) -> Tensor:
        """tokens [B, L] at positions offset .. offset + L - 1 -> [B, L, C]; `positions` replaces this module's
        positions and norm (a decoder with its own, `Seq2Seq(decoder_positions=True)`)."""
        x = self.embed(tokens)
        if self.scale != 1.0:  # BART without scale_embeddings and GPT-2 do not scale
            x = x * self.scale
        x = positions(x, offset) if positions is not None else _positioned(x, self.pos_embed, self.norm, offset)
        return self.drop(x) if self.training else x  # dropout is the identity in eval

    def logits(self, x: Tensor) -> Tensor:
        """[B, L, C] -> [B, L, V] through the embedding table."""
        return F.linear(x, self.embed.weight)


class Positions(nn.Module):
    """Absolute positions and an optional LayerNorm over the sum, as `TokenEmbedding` adds them: the decoder's own
    where they are not the encoder's (BART learns a position table and an embedding norm per stack)."""

    def __init__(self, *, dim: int, position: str | dict[str, Any], max_len: int, embed_norm: bool = False) -> None:
        super().__init__()
        self.pos_embed = build(position, POSITIONS, "model.position", dim=dim, max_len=max_len)  # None for "none"
        self.norm = nn.LayerNorm(dim) if embed_norm else None

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x [B, L, C] at positions offset .. offset + L - 1 -> [B, L, C]."""
        return _positioned(x, self.pos_embed, self.norm, offset)


def check_tokens(tokens: Tensor, what: str, max_len: int, offset: int = 0) -> None:
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(f"{what} must be long [B, L]; got {tokens.dtype} {list(tokens.shape)}")
    if offset + tokens.shape[1] > max_len:
        raise ValueError(f"{what}: positions up to {offset + tokens.shape[1]} exceed the model's max_len ({max_len})")


class Seq2Seq(nn.Module):
    """Transformer encoder-decoder (Vaswani et al., 2017; pre-norm by default) with a shared source/target vocabulary.

    Args:
        vocab_size, pad_id: from the tokenizer.
        max_len: the longest source or target in tokens (sizes learned position tables; decoding stops there).
        dim, num_heads, mlp_ratio: width C, heads and MLP ratio of every block.
        encoder_depth, decoder_depth: blocks in each stack.
        position: absolute positions added to embeddings (`POSITIONS` spec): "sinusoidal", "learned", "none".
        attention: the self-attention config of both stacks (`attnzoo.attention.factory.attention_builder`).
        decoder_attention: the decoder's self-attention config, when it differs (default `attention`); made
            causal (`attnzoo.layers.decoder.causal`). A start from a checkpoint fills in its projections' layout
            from `attention` (`decoder_layout`).
        cross_attention: the cross-attention config (default: multi-head attention).
        tie_embeddings: the output projection reads the embedding table (else a separate linear head).
        drop_rate: dropout on embeddings and in the MLPs; drop_path_rate: stochastic depth.
        norm: "pre" (x + f(norm(x)), and a final norm per stack) or "post" (norm(x + f(x)), no final norm: BART).
        scale_embeddings: multiply token embeddings by sqrt(C); BART does not.
        embed_norm: a LayerNorm over embeddings plus positions, before dropout (BART's `layernorm_embedding`).
        decoder_positions: the decoder has its own position table (and embedding norm), as BART; default: it reads
            the encoder's.
        logits_bias: a fixed bias [V] added to the logits, loaded from a checkpoint (BART's `final_logits_bias`, a
            buffer there too: it does not train).
    """

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Raise ValueError for `model:` options the decoder refuses whatever the data (config validation calls it)."""
        key = "attention" if options.get("decoder_attention") is None else "decoder_attention"
        sizes = {k: options[k] for k in ("dim", "num_heads") if isinstance(options.get(k), int)}
        check_decoder_attention(options.get(key), f"model.{key}", **sizes)
        cross = options.get("cross_attention")
        if isinstance(cross, Mapping) and not no_spec(cross.get("pattern")):  # it failed at the first decoding
            raise ValueError(
                f"model.cross_attention.pattern: {cross['pattern']!r}: a translation model decodes with a cache, "
                "which reads the whole source in cross-attention; patterns apply to self-attention "
                "(model.attention.pattern, model.decoder_attention.pattern)"
            )

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
        norm: Literal["pre", "post"] = "pre",
        scale_embeddings: bool = True,
        embed_norm: bool = False,
        decoder_positions: bool = False,
        logits_bias: bool = False,
    ) -> None:
        super().__init__()
        if norm not in ("pre", "post"):
            raise ValueError(f"model.norm: unknown {norm!r}; valid: ['pre', 'post']")
        self.pad_id, self.max_len = pad_id, max_len
        self.embed = TokenEmbedding(
            vocab_size=vocab_size,
            dim=dim,
            pad_id=pad_id,
            position=position,
            max_len=max_len,
            drop_rate=drop_rate,
            embed_norm=embed_norm,
        )
        if not scale_embeddings:
            self.embed.scale = 1.0
        common = dict(dim=dim, num_heads=num_heads, mlp_ratio=mlp_ratio, drop_path_rate=drop_path_rate)
        shape = layer_shape(max_len=max_len)  # seq_len (linformer's longest key sequence) from max_len
        post = norm == "post"
        self.encoder = make_encoder(
            depth=encoder_depth, attention=attention, proj_drop=drop_rate, layer_shape=shape, post_norm=post, **common
        )
        self.decoder = make_decoder(
            depth=decoder_depth,
            attention=attention if decoder_attention is None else decoder_attention,
            cross_attention=cross_attention,
            proj_drop=drop_rate,
            what="model.attention" if decoder_attention is None else "model.decoder_attention",
            layer_shape=shape,
            post_norm=post,
            **common,
        )
        self.head = None if tie_embeddings else nn.Linear(dim, vocab_size, bias=False)
        # BART's parts, created only when asked for (the default model's parameters and their init stay as they were)
        self.tgt_positions = (
            Positions(dim=dim, position=position, max_len=max_len, embed_norm=embed_norm) if decoder_positions else None
        )
        self.register_buffer("logits_bias", torch.zeros(vocab_size) if logits_bias else None)  # None: not in the state

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
        x = self.embed(tokens, offset, self.tgt_positions)
        x = self.decoder(x, memory, memory_padding_mask, cache=cache)  # [B, L, C]
        logits = self.embed.logits(x) if self.head is None else self.head(x)  # [B, L, V]
        return logits if self.logits_bias is None else logits + self.logits_bias

    def forward(self, src: Tensor, tgt_in: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: src [B, S], decoder input tgt_in [B, T] (BOS, then the target but its last token)
        -> logits [B, T, V]. Target padding needs no mask: it follows the real tokens, which (causal) never read it.
        """
        return self.decode_step(tgt_in, self.encode(src, src_padding_mask), src_padding_mask)
