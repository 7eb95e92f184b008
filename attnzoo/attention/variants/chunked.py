"""Explicit attention over chunks of queries, with hooks on the scores before the softmax and on the weights after.

For attention kinds that need every head's scores at once (talking heads, DCMHA), so no fused kernel applies.
Memory stays O(chunk x Lk) per head instead of O(Lq x Lk), in training too: each chunk's intermediates are
recomputed in the backward pass (non-reentrant activation checkpointing) instead of being kept.

The math is the eager backend's (fp32 scores and softmax, fully masked rows -> zeros), so with no hooks the
result equals `attend(..., backend="eager")`.

Notation: B batch, H query heads, Hkv key/value heads, Lq queries, Lk keys, c queries in a chunk, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as checkpointed

from ..backends import allowed_mask, barred_pairs, masked_softmax, repeat_kv

Tensor = torch.Tensor
Hook = Callable[[Tensor, slice], Tensor]  # (a [B, H, c, Lk], the chunk's query rows) -> [B, H, c, Lk]


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pre: Hook | None = None,
    post: Hook | None = None,
    pattern: Any | None = None,
    bias: Tensor | Any | None = None,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    chunk_size: int | None = None,
    checkpoint: bool = True,
    return_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention of q [B, H, Lq, D] over k, v [B, Hkv, Lk, D]; returns (out [B, H, Lq, D], weights or None).

    Args:
        pre: applied to the scores (after the bias, before `attn_mask`, masking and the softmax).
        post: applied to the weights after the softmax (masked pairs are 0 there); it must map zeros to zeros
            for masked keys to stay ignored (linear head mixing does).
        pattern, bias, key_padding_mask: as in `attend()`; patterns and bias modules are evaluated per chunk
            (`Pattern.mask_at` of the bound pattern, `values`), so nothing of size Lq x Lk is built.
        attn_mask: an additive mask broadcastable to [B, H, Lq, Lk] (-inf or large negatives where masked), added to
            the scores after `pre`: a mask is not mixed across heads as the bias is.
        chunk_size: queries per chunk; None computes all queries at once.
        checkpoint: recompute each chunk in the backward pass (only when there is more than one chunk).
        return_weights: also return the final weights [B, H, Lq, Lk] (post-hook, pre-dropout).
    """
    lq, lk = q.shape[-2], k.shape[-2]
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive number of queries or None, got {chunk_size}")
    chunk = lq if chunk_size is None else min(chunk_size, lq)
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # [B, H, Lk, D]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    kv_idx = torch.arange(lk, device=q.device)

    def block(q_rows: Tensor, start: int) -> tuple[Tensor, Tensor | None]:
        rows = slice(start, start + q_rows.shape[-2])
        q_idx = torch.arange(lq, device=q.device)[rows]
        scores = (q_rows.float() @ k.float().transpose(-2, -1)) * scale  # [B, H, c, Lk]
        allowed = allowed_mask(pattern, key_padding_mask, lq, lk, q.device, rows)
        if bias is not None:
            values = _bias_rows(bias, rows, q_idx, kv_idx, lq).float()
            if isinstance(bias, Tensor):  # bias modules are finite; the pre hook mixing -inf would make NaN
                values, allowed = barred_pairs(values, allowed)
            scores = scores + values
        if pre is not None:
            scores = pre(scores, rows)
        mask = None
        if attn_mask is not None:
            mask, allowed = barred_pairs(_bias_rows(attn_mask, rows, q_idx, kv_idx, lq).float(), allowed)
            scores = scores + mask
        weights = masked_softmax(scores, allowed)
        if post is not None:
            # a mask of each head's own: mixing heads would carry weight onto its pairs, so the pairs it barred (and
            # those a float mask's large negatives left at zero weight in their own head) stay at zero
            barred = None if allowed is None or allowed.dim() < 4 or allowed.shape[1] == 1 else ~allowed
            if mask is not None and mask.dim() == 4 and mask.shape[1] > 1:
                silenced = (weights == 0) & (mask < 0)
                barred = silenced if barred is None else barred | silenced
            weights = post(weights, rows)
            if barred is not None:
                weights = weights.masked_fill(barred, 0.0)
        weights = weights.to(q.dtype)
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        return dropped @ v.to(q.dtype), (weights if return_weights else None)  # [B, H, c, D]

    recompute = checkpoint and chunk < lq and torch.is_grad_enabled()
    outs, maps = [], []
    for start in range(0, lq, chunk):
        q_rows = q[:, :, start : start + chunk]  # [B, H, c, D]
        if recompute:
            out, weights = checkpointed(block, q_rows, start, use_reentrant=False)
        else:
            out, weights = block(q_rows, start)
        outs.append(out)
        if return_weights:
            maps.append(weights)
    return torch.cat(outs, dim=-2), (torch.cat(maps, dim=-2) if return_weights else None)


def _bias_rows(bias: Tensor | Any, rows: slice, q_idx: Tensor, kv_idx: Tensor, lq: int) -> Tensor:
    """The bias for the chunk's queries, broadcastable to [B, H, c, Lk]."""
    if isinstance(bias, Tensor):
        return bias[..., rows, :] if bias.dim() >= 2 and bias.shape[-2] == lq else bias
    return bias.values(q_idx[:, None], kv_idx[None, :])  # [H, c, Lk] (or broadcastable)
