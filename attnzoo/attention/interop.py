"""Weight import from `torch.nn.MultiheadAttention` into `Attention`.

timm's `Attention` needs no converter: its state dict loads into `Attention` as is (same names).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .attention import Attention


def from_multihead_attention(mha: nn.MultiheadAttention, *, cross: bool = False, **kwargs: Any) -> Attention:
    """An `Attention` computing what `mha` computes, with a copy of its weights.

    Args:
        mha: the module to import; `add_bias_kv` and `add_zero_attn` are not supported.
        cross: build a cross-attention `Attention` (`q` and `kv` projections). Implied when `mha` has a
            `kdim`/`vdim` other than `embed_dim`.
        kwargs: passed to `Attention` (pattern, bias, backend, ...).

    Note `Attention` is batch-first; feed it [B, L, C] whatever `mha.batch_first` says.
    """
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("nn.MultiheadAttention with add_bias_kv=True or add_zero_attn=True cannot be imported")
    if mha.kdim != mha.vdim:
        raise ValueError(f"kdim ({mha.kdim}) and vdim ({mha.vdim}) must be equal to import into Attention")
    e = mha.embed_dim
    cross = cross or not mha._qkv_same_embed_dim
    has_bias = mha.in_proj_bias is not None
    attn = Attention(
        e,
        mha.num_heads,
        context_dim=mha.kdim if cross else None,
        qkv_bias=has_bias,
        attn_drop=mha.dropout,
        proj_bias=mha.out_proj.bias is not None,
        **kwargs,
    )
    if mha._qkv_same_embed_dim:
        wq, wk, wv = mha.in_proj_weight.detach().chunk(3)  # 3 x [E, E]
    else:
        wq, wk, wv = mha.q_proj_weight.detach(), mha.k_proj_weight.detach(), mha.v_proj_weight.detach()
    bq, bk, bv = mha.in_proj_bias.detach().chunk(3) if has_bias else (None, None, None)
    with torch.no_grad():
        if cross:
            attn.q.weight.copy_(wq)
            attn.kv.weight.copy_(torch.cat([wk, wv]))
            if has_bias:
                attn.q.bias.copy_(bq)
                attn.kv.bias.copy_(torch.cat([bk, bv]))
        else:
            attn.qkv.weight.copy_(torch.cat([wq, wk, wv]))
            if has_bias:
                attn.qkv.bias.copy_(torch.cat([bq, bk, bv]))
        attn.proj.weight.copy_(mha.out_proj.weight)
        if attn.proj.bias is not None:
            attn.proj.bias.copy_(mha.out_proj.bias)
    return attn
