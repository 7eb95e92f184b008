"""Key/value heads of loaded weights regrouped to a layer's `num_kv_heads` (multi-head to grouped-query attention).

A self-attention layer's `qkv` rows are [q heads | k heads | v heads], a cross-attention layer's `kv` rows
[k heads | v heads], each head a contiguous block of D rows; query head i reads key/value head i // (H / Hkv). A
checkpoint with more key/value heads than the layer loads by mean-pooling each group of consecutive heads, rows and
biases alike (Ainslie et al., 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
Checkpoints"); one with fewer loads by repeating each head for its group, which computes exactly what it did.

Notation: H query heads, S the checkpoint's key/value heads, Hkv the layer's, D head dim, C input width.
"""

from __future__ import annotations

from typing import Any

import torch

Tensor = torch.Tensor


def regroup(rows: Tensor, heads: int, num_kv_heads: int) -> Tensor:
    """k or v rows [S D, ...] of `heads` (S) heads -> [Hkv D, ...]: groups of S / Hkv consecutive heads mean-pooled
    (in fp32, back in the rows' dtype), or each head repeated Hkv / S times."""
    if heads == num_kv_heads:
        return rows
    per_head = rows.view(heads, -1, *rows.shape[1:])  # [S, D, ...]
    if heads % num_kv_heads == 0:
        groups = per_head.view(num_kv_heads, heads // num_kv_heads, *per_head.shape[1:])  # [Hkv, S / Hkv, D, ...]
        pooled = groups.float().mean(dim=1).to(rows.dtype)  # [Hkv, D, ...]
    else:
        pooled = per_head.repeat_interleave(num_kv_heads // heads, dim=0)  # [Hkv, D, ...]
    return pooled.reshape(-1, *rows.shape[1:])  # [Hkv D, ...]


def loaded_kv_heads(layer: Any, tensor: Tensor) -> int | None:
    """The key/value heads a loaded `qkv` (self-attention) or `kv` (cross) weight or bias holds for `layer`, or None
    when its rows are no such layout for this layer's width and head dim."""
    q_rows = 0 if layer.is_cross else layer.num_heads * layer.head_dim
    kv_rows = tensor.shape[0] - q_rows
    if tensor.dim() not in (1, 2) or kv_rows <= 0 or kv_rows % (2 * layer.head_dim):
        return None
    return kv_rows // (2 * layer.head_dim)


def adapt_loaded(layer: Any, state: dict[str, Tensor], prefix: str) -> None:
    """Regroup the key/value heads of `layer`'s projection in `state` (a load hook's state dict) to its
    num_kv_heads; ValueError naming the tensor when neither head count divides the other. Tensors of another width
    or layout are left for load_state_dict to refuse."""
    name = "kv" if layer.is_cross else "qkv"
    own = getattr(layer, name)
    for part in ("weight", "bias"):
        key = f"{prefix}{name}.{part}"
        tensor, mine = state.get(key), getattr(own, part)
        if tensor is None or mine is None or tensor.shape == mine.shape or tensor.shape[1:] != mine.shape[1:]:
            continue
        heads, hkv = loaded_kv_heads(layer, tensor), layer.num_kv_heads
        if heads is None:
            continue
        if heads % hkv and hkv % heads:
            raise ValueError(
                f"{key} holds {heads} key/value heads and this layer has num_kv_heads {hkv}: one must divide the "
                f"other (fewer heads are mean-pooled groups of the checkpoint's, more repeat them)"
            )
        q_rows = tensor.shape[0] - 2 * heads * layer.head_dim
        q, k, v = tensor.split([q_rows, heads * layer.head_dim, heads * layer.head_dim])
        state[key] = torch.cat([q, regroup(k, heads, hkv), regroup(v, heads, hkv)])
