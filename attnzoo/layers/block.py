"""Transformer blocks that take built modules (attention, mlp), not switches.

Notation: B batch, L tokens, C width, Lc context tokens.
Parameter names follow timm's `Block` (norm1, attn, ls1, norm2, mlp, ls2), so timm weights map one to one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from timm.layers import DropPath, LayerScale
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..attention.biases import Bias

Tensor = torch.Tensor


def own_bias(block: Callable[..., Any], bias: Any) -> Callable[..., Any]:
    """`block` (a block, or its attention sub-layer) as activation checkpointing calls it: computing the shared
    `bias` module itself (`Bias.own_call`), so that its forward and its recomputation compute the same tensors.
    `block` itself for no bias, or a bias tensor."""
    if not isinstance(bias, Bias):
        return block
    return functools.partial(_call_with_own_bias, block, bias)


def _call_with_own_bias(block: nn.Module, bias: Any, *args: Any) -> Any:
    with bias.own_call():
        return block(*args)


def _scale(dim: int, layer_scale: float | None) -> nn.Module:
    return LayerScale(dim, init_values=layer_scale) if layer_scale else nn.Identity()


def _drop(p: float) -> nn.Module:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"drop_path ({p}) must be in [0, 1)")
    return DropPath(p) if p > 0 else nn.Identity()


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)), with drop path and optional layer scale.

    Args:
        dim: width C.
        attn: an attention module called as `attn(x, key_padding_mask=..., bias=...)` (e.g. `Attention`).
        mlp: a module [B, L, C] -> [B, L, C] (e.g. timm's `Mlp`).
        norm_layer: normalization constructor, called with `dim`.
        drop_path: stochastic depth rate of both residual branches.
        layer_scale: initial value of per-channel residual scales (CaiT), None for none.
    """

    def __init__(
        self,
        *,
        dim: int,
        attn: nn.Module,
        mlp: nn.Module,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn
        self.ls1 = _scale(dim, layer_scale)
        self.drop_path1 = _drop(drop_path)
        self.norm2 = norm_layer(dim)
        self.mlp = mlp
        self.ls2 = _scale(dim, layer_scale)
        self.drop_path2 = _drop(drop_path)
        self.checkpoint_attention = False  # set by Encoder.set_grad_checkpointing(attention_only=True)

    def _attend(self, x: Tensor, key_padding_mask: Tensor | None, bias: Tensor | None) -> Tensor:
        kwargs = {"key_padding_mask": key_padding_mask}
        if bias is not None:
            kwargs["bias"] = bias
        return self.attn(self.norm1(x), **kwargs)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
        """x [B, L, C]; `key_padding_mask` bool [B, L] (True = pad); `bias` a shared precomputed bias."""
        if self.checkpoint_attention and torch.is_grad_enabled():
            a = checkpoint(own_bias(self._attend, bias), x, key_padding_mask, bias, use_reentrant=False)
        else:  # called here, not through _attend: one frame less between the model and the kernel
            a = self.attn(self.norm1(x), key_padding_mask=key_padding_mask, **({} if bias is None else {"bias": bias}))
        x = x + self.drop_path1(self.ls1(a))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class PostNormBlock(TransformerBlock):
    """Post-norm block (the original Transformer, BERT): norm1(x + attn(x)), then norm2(x + mlp(x)).

    Same arguments and parameter names as `TransformerBlock`, so a state dict names the same tensors; only where the
    norms sit differs.
    """

    def _attend(self, x: Tensor, key_padding_mask: Tensor | None, bias: Tensor | None) -> Tensor:
        kwargs = {"key_padding_mask": key_padding_mask}
        if bias is not None:
            kwargs["bias"] = bias
        return self.attn(x, **kwargs)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
        """x [B, L, C]; `key_padding_mask` bool [B, L] (True = pad); `bias` a shared precomputed bias."""
        if self.checkpoint_attention and torch.is_grad_enabled():
            a = checkpoint(own_bias(self._attend, bias), x, key_padding_mask, bias, use_reentrant=False)
        else:
            a = self.attn(x, key_padding_mask=key_padding_mask, **({} if bias is None else {"bias": bias}))
        x = self.norm1(x + self.drop_path1(self.ls1(a)))
        return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))


class CrossAttentionBlock(nn.Module):
    """x + cross_attn(norm1(x), context), then x + mlp(norm2(x)); optionally tanh-gated (Flamingo).

    With `gated=True` both branches are multiplied by tanh(gate), gates starting at 0, so the block starts
    as the identity and a pretrained text stack is undisturbed at initialization.

    Args:
        dim: query width C.
        cross_attn: attention built for cross-attention (`Attention(..., context_dim=Cc)`).
        mlp: a module [B, L, C] -> [B, L, C].
    """

    def __init__(
        self,
        *,
        dim: int,
        cross_attn: nn.Module,
        mlp: nn.Module,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
        gated: bool = False,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = cross_attn
        self.ls1 = _scale(dim, layer_scale)
        self.drop_path1 = _drop(drop_path)
        self.norm2 = norm_layer(dim)
        self.mlp = mlp
        self.ls2 = _scale(dim, layer_scale)
        self.drop_path2 = _drop(drop_path)
        self.gated = gated
        if gated:
            self.attn_gate = nn.Parameter(torch.zeros(1))
            self.mlp_gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor, context: Tensor, context_padding_mask: Tensor | None = None) -> Tensor:
        """x [B, L, C] attends to context [B, Lc, Cc]; `context_padding_mask` bool [B, Lc], True = pad."""
        a = self.ls1(self.attn(self.norm1(x), context, key_padding_mask=context_padding_mask))
        if self.gated:
            a = a * self.attn_gate.tanh()
        x = x + self.drop_path1(a)
        m = self.ls2(self.mlp(self.norm2(x)))
        if self.gated:
            m = m * self.mlp_gate.tanh()
        return x + self.drop_path2(m)
