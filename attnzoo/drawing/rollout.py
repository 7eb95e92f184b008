"""Attention rollout (Abnar & Zuidema, 2020) and capturing every attention map of a forward pass.

Notation: B batch, H heads, L tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Tensor = torch.Tensor


def rollout(maps: Sequence[Tensor], *, residual: float = 0.5, head_fusion: str = "mean") -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each token's output draws on each input token.

    Each layer's heads are fused (mean, max or min), the residual connection is modelled as
    `residual * I + (1 - residual) * A`, rows are renormalized, and the layers are multiplied in order.

    Args:
        maps: one [B, H, L, L] self-attention tensor per layer, first layer first.

    Returns:
        [B, L, L]; row i is output token i's attribution over the input tokens (rows sum to 1).
    """
    if not maps:
        raise ValueError("rollout needs at least one attention map")
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual ({residual}) must be in [0, 1]")
    fuse: dict[str, Callable[[Tensor], Tensor]] = {
        "mean": lambda a: a.mean(1),
        "max": lambda a: a.amax(1),
        "min": lambda a: a.amin(1),
    }
    if head_fusion not in fuse:
        raise ValueError(f"head_fusion {head_fusion!r}: valid: {sorted(fuse)}")
    b, _, n, _ = maps[0].shape
    out = torch.eye(n, dtype=torch.float64).expand(b, n, n)  # [B, L, L]
    for i, a in enumerate(maps):
        if a.dim() != 4 or a.shape[-2:] != (n, n):
            raise ValueError(
                f"layer {i}: rollout needs square self-attention maps [B, H, {n}, {n}], got {tuple(a.shape)}"
            )
        a = fuse[head_fusion](a.double())  # [B, L, L]
        a = residual * torch.eye(n, dtype=a.dtype) + (1.0 - residual) * a
        a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
        out = a @ out
    return out.float()


def capture(
    net: torch.nn.Module, inputs: dict[str, Tensor], names: list[str] | None = None
) -> tuple[Tensor, list[Tensor]]:
    """(logits, one [B, H, Lq, Lk] map per attention call) for `inputs`, in eval mode without gradients; `names`,
    when given, gets the name in `net` of the module of each call ("blocks.0.attn")."""
    from ..attention import capture_attention

    was_training = net.training
    net.eval()
    modules: list[torch.nn.Module] = []
    try:
        with torch.no_grad(), capture_attention(modules) as maps:
            logits = net(**inputs)
    finally:
        net.train(was_training)
    if not maps:
        raise ValueError(f"{type(net).__name__} made no attnzoo Attention call: nothing to draw")
    if names is not None:
        named = {id(m): name for name, m in net.named_modules()}
        names += [named.get(id(m), type(m).__name__) for m in modules]
    return logits, [m.float() for m in maps]
