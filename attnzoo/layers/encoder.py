"""`Encoder`: a stack of blocks with an optional shared bias and activation checkpointing.

Notation: B batch, L tokens, C width, H heads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .block import own_bias

Tensor = torch.Tensor


class Encoder(nn.Module):
    """Runs `blocks` in order; `norm` at the end.

    Args:
        blocks: `TransformerBlock`s (anything called as `block(x, key_padding_mask=..., bias=...)`).
        norm: final normalization, or None.
        shared_bias: a bias module (`attnzoo.attention.biases`) computed once per forward and given to
            every block (T5 style); None when each attention has its own.
    """

    def __init__(
        self, blocks: Sequence[nn.Module], *, norm: nn.Module | None = None, shared_bias: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm if norm is not None else nn.Identity()
        self.shared_bias = shared_bias
        self.checkpoint_every = 0  # 0: off; k: every k-th block (blocks 0, k, 2k, ...)

    def set_grad_checkpointing(self, enabled: bool = True, *, every: int = 1, attention_only: bool = False) -> None:
        """Recompute activations in backward instead of storing them (non-reentrant; same outputs and grads).

        Args:
            every: checkpoint blocks 0, every, 2*every, ... (1 = all blocks).
            attention_only: checkpoint only the attention sub-layer of those blocks (selective checkpointing).
        """
        if every < 1:
            raise ValueError(f"every ({every}) must be >= 1")
        chosen = [enabled and i % every == 0 for i in range(len(self.blocks))]
        for block, on in zip(self.blocks, chosen, strict=True):
            if attention_only and not hasattr(block, "checkpoint_attention"):
                raise ValueError(f"attention_only checkpointing needs blocks with `checkpoint_attention`: {block}")
            if hasattr(block, "checkpoint_attention"):
                block.checkpoint_attention = on and attention_only
        self.checkpoint_every = every if enabled and not attention_only else 0

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """x [B, L, C] -> [B, L, C]; `key_padding_mask` bool [B, L], True = pad."""
        bias = self.shared_bias
        # a shared bias is computed once for all blocks (as a dense tensor, or as the offset table CPU sdpa reads)
        with bias.once_per_call() if bias is not None else contextlib.nullcontext():
            for i, block in enumerate(self.blocks):
                if self.checkpoint_every and i % self.checkpoint_every == 0 and torch.is_grad_enabled():
                    x = checkpoint(own_bias(block, bias), x, key_padding_mask, bias, use_reentrant=False)
                else:
                    x = block(x, key_padding_mask, bias)
        return self.norm(x)


def make_encoder(
    *,
    dim: int,
    depth: int,
    num_heads: int,
    mlp_ratio: float = 4.0,
    attention: dict | None = None,
    drop_path_rate: float = 0.0,
    layer_scale: float | None = None,
    proj_drop: float = 0.0,
    final_norm: bool = True,
    norm_layer=nn.LayerNorm,
    layer_shape: Mapping[str, Any] | None = None,
    post_norm: bool = False,
) -> Encoder:
    """A pre-norm `Encoder` of `depth` `TransformerBlock`s with attention from an attention config (post-norm
    `PostNormBlock`s with `post_norm`, as BERT; those have no final norm: `final_norm` is ignored).

    Args:
        attention: the `model.attention` config (see `attnzoo.attention.factory.attention_builder`).
        drop_path_rate: stochastic depth, rising linearly from 0 to this over the blocks.
        norm_layer: normalization constructor called with `dim` (timm's ViT uses LayerNorm with eps=1e-6).
        layer_shape: what the attention layers know of the tokens (`attnzoo.attention.factory.layer_shape`).
    """
    from timm.layers import Mlp

    from ..attention.factory import attention_builder
    from .block import PostNormBlock, TransformerBlock

    if depth < 1:
        raise ValueError(f"depth ({depth}) must be >= 1")
    make_attention = attention_builder(attention, **(layer_shape or {}))
    rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()  # cpu: also under torch.device("meta")
    block = PostNormBlock if post_norm else TransformerBlock
    blocks = [
        block(
            dim=dim,
            attn=make_attention(dim, num_heads, layer_index=index),
            mlp=Mlp(dim, int(dim * mlp_ratio), drop=proj_drop),
            norm_layer=norm_layer,
            drop_path=rate,
            layer_scale=layer_scale,
        )
        for index, rate in enumerate(rates)
    ]
    return Encoder(blocks, norm=norm_layer(dim) if final_norm and not post_norm else None)


# the options of `trainer.grad_checkpointing` (a mapping), each a keyword of `Encoder.set_grad_checkpointing`
CHECKPOINTING_KEYS = ("enabled", "every", "attention_only")


def checkpointing_options(value: Any, *, key: str = "trainer.grad_checkpointing") -> dict[str, Any]:
    """Normalize `true/false` or `{enabled, every, attention_only}` to keyword arguments of set_grad_checkpointing."""
    if isinstance(value, bool) or value is None:
        return {"enabled": bool(value), "every": 1, "attention_only": False}
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected true/false or a mapping with keys {list(CHECKPOINTING_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(CHECKPOINTING_KEYS))
    if unknown:
        raise ValueError(f"{key}: unknown keys {unknown}; valid: {list(CHECKPOINTING_KEYS)}")
    opts = {"enabled": value.get("enabled", True), "every": value.get("every", 1)}
    opts["attention_only"] = value.get("attention_only", False)
    if not isinstance(opts["enabled"], bool) or not isinstance(opts["attention_only"], bool):
        raise ValueError(f"{key}: enabled and attention_only must be true/false, got {value!r}")
    if isinstance(opts["every"], bool) or not isinstance(opts["every"], int) or opts["every"] < 1:
        raise ValueError(f"{key}.every: expected an int >= 1, got {opts['every']!r}")
    return opts
