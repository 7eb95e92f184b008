"""Cross-attention alignment of a translation: which source tokens each generated target token reads, per decoder
layer (heads averaged) and averaged over layers, drawn as matrices (PNG).

Notation: H heads, T target tokens (rows), S source tokens (columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from .matrices import _pyplot, heat_scale, save_figure

Tensor = torch.Tensor


def draw_alignment(
    maps: Sequence[Tensor],
    source: Sequence[str],
    target: Sequence[str],
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """One panel per decoder layer and one for their mean: target tokens down, source tokens across.

    Args:
        maps: one [H, T, S] (or [T, S]) cross-attention tensor per decoder layer.
        source, target: the S source and T target token strings (axis labels).
        path: the PNG to write.
    """
    if not maps:
        raise ValueError("draw_alignment: no cross-attention maps (the model has no cross-attention layers?)")
    layers = [m.float().mean(0) if m.dim() == 3 else m.float() for m in maps]  # [T, S] each
    for i, m in enumerate(layers):
        if m.shape != (len(target), len(source)):
            raise ValueError(
                f"draw_alignment: map {i} is {list(m.shape)}, expected [{len(target)}, {len(source)}] "
                "(target tokens x source tokens)"
            )
    panels = [*layers, torch.stack(layers).mean(0)] if len(layers) > 1 else layers
    names = [f"layer {i}" for i in range(len(layers))] + (["mean over layers"] if len(layers) > 1 else [])
    plt = _pyplot()
    width = max(3.0, 0.32 * len(source) + 1.5)
    height = max(2.5, 0.3 * len(target) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height), squeeze=False)
    for ax, panel, name in zip(axes[0], panels, names, strict=True):
        ax.imshow(panel.cpu().numpy(), aspect="auto", **heat_scale(panel, "viridis"))
        ax.set_xticks(range(len(source)), list(source), rotation=90, fontsize=8)
        ax.set_yticks(range(len(target)), list(target), fontsize=8)
        ax.set_xlabel("source token")
        ax.set_title(name, fontsize=9)
    axes[0][0].set_ylabel("generated token")
    return save_figure(fig, path, title, fontsize=9)
