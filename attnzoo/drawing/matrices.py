"""Drawing for `attnzoo.viz`: attention matrices, what the prefix tokens read from each patch, rollout.

A `Canvas` is the input as drawn (an image, or a spectrogram with frequency up) plus how a vector of
per-patch values lays out over it, so the same figures serve ViT images and AST spectrograms.
Notation: H heads, L tokens (P prefix tokens, then N patches).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..util.files import replacing

Tensor = torch.Tensor
DPI = 110  # of the PNGs written


@dataclass
class Canvas:
    """The input as drawn, and `to_grid`: per-patch values [N] -> [rows, cols] in the drawing's orientation."""

    background: np.ndarray  # [Hpx, Wpx] or [Hpx, Wpx, 3] in [0, 1]
    to_grid: Callable[[Tensor], Tensor]
    origin: str = "upper"  # "lower" for spectrograms (low frequencies at the bottom)
    aspect: str = "equal"  # "auto" stretches a spectrogram to the panel
    note: str = ""  # said under the figures (e.g. how patches map onto the spectrogram)


def image_canvas(
    image: Tensor, grid: tuple[int, int], normalization: tuple[Sequence[float], Sequence[float]] | None = None
) -> Canvas:
    """A ViT input [C, S, S], patches in raster order over a (gh, gw) grid. With the (mean, std) per channel it was
    normalized by, it is drawn in its own colours; without, its values are stretched to [0, 1] alike in every
    channel (a stretch per channel drew a red circle pink on teal, and a one-colour image black)."""
    x = image.detach().float().cpu()
    if normalization is not None:
        mean, std = (torch.tensor(v, dtype=x.dtype)[:, None, None] for v in normalization)
        x = (x * std + mean).clamp(0.0, 1.0)
    else:
        x = (x - x.min()) / (x.max() - x.min()).clamp_min(1e-8)
    shown = x[0].numpy() if x.shape[0] == 1 else x.permute(1, 2, 0).numpy()
    return Canvas(shown, lambda v: v.reshape(grid))


def spectrogram_canvas(features: Tensor, grid: tuple[int, int]) -> Canvas:
    """An AST input as log-mel features [F, T]; patch tokens are time-major over a (time, frequency) grid."""
    f = features.detach().float().cpu()
    shown = ((f - f.min()) / (f.max() - f.min()).clamp_min(1e-8)).numpy()
    rows, cols = grid  # (time patches, frequency patches)
    note = "patches overlap along time; each is drawn over its share of the clip"
    return Canvas(shown, lambda v: v.reshape(rows, cols).T, origin="lower", aspect="auto", note=note)  # [freq, time]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _stretch(values: Tensor, shape: Sequence[int]) -> np.ndarray:
    """[rows, cols] -> the canvas's [Hpx, Wpx] (nearest: each patch stays a visible block)."""
    return torch.nn.functional.interpolate(values[None, None].float(), size=tuple(shape), mode="nearest")[0, 0].numpy()


def heat_scale(heat: np.ndarray | Tensor, cmap: str = "inferno") -> dict[str, Any]:
    """imshow's colour scale for attention values: from 0 up, or, where some are negative (differential attention
    subtracts two maps), a diverging scale symmetric about 0, so that a negative weight is not drawn as a 0."""
    low, high = float(heat.min()), float(heat.max())
    if low < 0:
        reach = max(-low, high, 1e-12)
        return {"cmap": "RdBu_r", "vmin": -reach, "vmax": reach}
    return {"cmap": cmap, "vmin": 0.0, "vmax": max(high, 1e-12)}


def _show(ax: Any, canvas: Canvas, heat: np.ndarray | None = None, alpha: float = 0.6) -> None:
    gray = canvas.background.ndim == 2  # [0, 1] as drawn: a grey image keeps its own shades, not stretched
    ax.imshow(canvas.background, cmap="gray" if gray else None, vmin=0.0, vmax=1.0, origin=canvas.origin,
              aspect=canvas.aspect)  # fmt: skip
    if heat is not None:
        ax.imshow(heat, alpha=alpha, origin=canvas.origin, aspect=canvas.aspect, **heat_scale(heat))
    ax.set_xticks([])
    ax.set_yticks([])


def wrap_to_width(fig: Any, text: str, fontsize: float, *, share: float = 0.96) -> str:
    """`text` with each line broken at spaces (a word wider than the figure: inside it) so that no line is wider
    than `share` of `fig`'s width at `fontsize` points."""
    from matplotlib.font_manager import FontProperties

    renderer, font = fig.canvas.get_renderer(), FontProperties(size=fontsize)
    room = share * fig.bbox.width  # display pixels, as the renderer measures

    def fits(line: str) -> bool:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0] <= room

    lines: list[str] = []
    for line in text.split("\n"):
        current = ""
        for word in line.split(" "):
            while word and not fits(word):  # too wide alone (a long run name): cut it where it stops fitting
                cut = next(i for i in range(len(word), 0, -1) if fits(word[:i]) or i == 1)
                if current:
                    lines.append(current)
                    current = ""
                lines.append(word[:cut])
                word = word[cut:]
            candidate = f"{current} {word}" if current else word
            if current and not fits(candidate):
                lines.append(current)
                candidate = word
            current = candidate
        lines.append(current)
    return "\n".join(lines)


def save_figure(fig: Any, path: str | Path, title: str, note: str = "", *, fontsize: int = 10) -> Path:
    """Title `fig` (wrapped to its width) and put a `note` under its panels, lay it out with every label inside
    (constrained layout: the title, the panels' labels and the note each get their room), write it to `path` (PNG,
    folders made) and close it."""
    fig.set_dpi(DPI)  # the title is wrapped, and the layout found, at the resolution written
    if fig.get_layout_engine() is None:  # figures with a colorbar come constrained (made so before the colorbar)
        fig.set_layout_engine("constrained")
    if title:  # a user's text in it ("$5 and $6"): read as written, not as mathtext
        title = wrap_to_width(fig, title.replace("$", r"\$"), fontsize)
        width, height = fig.get_size_inches()
        fig.set_size_inches(width, height + 1.25 * fontsize / 72 * title.count("\n"))  # the room of wrapped lines
        fig.suptitle(title, fontsize=fontsize)
    if note:
        fig.supxlabel(wrap_to_width(fig, note, 8), fontsize=8, color="0.35")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.draw_without_rendering()  # constrained layout settles over two draws (fixed-aspect panels): this is the first
    with replacing(path) as tmp:  # a link there is replaced, not written through
        fig.savefig(tmp, dpi=DPI)
    _pyplot().close(fig)
    return path


def plot_matrices(
    maps: Sequence[Tensor], path: Path, *, title: str, prefix: int = 0, labels: Sequence[str] | None = None
) -> Path:
    """Layers x heads of [Lq, Lk] attention matrices (example 0), one color scale per panel; `labels` names each
    row (the module of each call, where the calls are not one stack of layers), else "layer i".

    Weights are drawn from 0 up; when some are negative (differential attention subtracts two maps), every panel
    takes a diverging scale symmetric about 0 instead, so a negative weight is not drawn as a 0.
    """
    plt = _pyplot()
    layers, heads = len(maps), maps[0].shape[1]
    signed = any(bool((m[0] < 0).any()) for m in maps)
    fig, axes = plt.subplots(layers, heads, figsize=(1.9 * heads + 0.8, 1.9 * layers + 0.7), squeeze=False)
    for i, m in enumerate(maps):
        for h in range(heads):
            ax = axes[i, h]
            weights = m[0, h].cpu().numpy()  # [Lq, Lk]
            if signed:
                reach = max(float(abs(weights).max()), 1e-12)
                scale = {"cmap": "RdBu_r", "vmin": -reach, "vmax": reach}
            else:
                scale = {"cmap": "viridis", "vmin": 0.0}
            ax.imshow(weights, interpolation="nearest", **scale)
            if prefix:  # separate the prefix tokens (class token) from the patches
                line = "0.35" if signed else "white"  # white is the diverging scale's 0
                ax.axhline(prefix - 0.5, color=line, lw=0.6)
                ax.axvline(prefix - 0.5, color=line, lw=0.6)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"head {h}", fontsize=9)
            if h == 0 and labels is not None:
                ax.set_ylabel(f"{labels[i].removesuffix('.attn')}\nquery", fontsize=7)
            elif h == 0:
                ax.set_ylabel(f"layer {i}\nquery", fontsize=9)
            if i == layers - 1:
                ax.set_xlabel("key", fontsize=8)
    note = "negative weights in blue, positive in red, 0 white (scale symmetric about 0 per panel)" if signed else ""
    return save_figure(fig, path, title, note)


def plot_prefix_maps(maps: Sequence[Tensor], canvas: Canvas, prefix: int, path: Path, *, title: str) -> Path:
    """Layers x heads: what the prefix tokens (mean of their rows) read from each patch, over the input."""
    plt = _pyplot()
    layers, heads = len(maps), maps[0].shape[1]
    fig, axes = plt.subplots(layers, heads + 1, figsize=(1.9 * (heads + 1), 1.9 * layers + 0.8), squeeze=False)
    shape = canvas.background.shape[:2]
    for i, m in enumerate(maps):
        _show(axes[i, 0], canvas)
        axes[i, 0].set_ylabel(f"layer {i}", fontsize=9)
        for h in range(heads):
            row = m[0, h, :prefix].mean(0)  # [L]: the prefix tokens' attention, averaged
            ax = axes[i, h + 1]
            _show(ax, canvas, _stretch(canvas.to_grid(row[prefix:]), shape))
            ax.set_xlabel(f"to prefix {row[:prefix].sum():.2f}", fontsize=7)
            if i == 0:
                ax.set_title(f"head {h}", fontsize=9)
    axes[0, 0].set_title("input", fontsize=9)
    return save_figure(fig, path, title, canvas.note)


def plot_rollout(roll: Tensor, canvas: Canvas, prefix: int, path: Path, *, title: str) -> Path:
    """Input | rollout of the prefix tokens (or of the mean token without one) over the patches | overlay."""
    plt = _pyplot()
    heat = roll[0, :prefix].mean(0)[prefix:] if prefix else roll[0].mean(0)  # [N]
    heat = heat / heat.abs().max().clamp_min(1e-12)  # relative: the largest magnitude is 1 (signed: differential)
    heat = _stretch(canvas.to_grid(heat), canvas.background.shape[:2])
    fig, axes = plt.subplots(1, 3, figsize=(8.4, 3.3), layout="constrained")  # before the colorbar takes room
    _show(axes[0], canvas)
    axes[0].set_title("input", fontsize=9)
    im = axes[1].imshow(heat, origin=canvas.origin, aspect=canvas.aspect, **heat_scale(heat))
    axes[1].set_xticks([])
    axes[1].set_yticks([])
    axes[1].set_title("rollout (relative)", fontsize=9)
    fig.colorbar(im, ax=axes[1], fraction=0.046)
    _show(axes[2], canvas, heat, alpha=0.55)
    axes[2].set_title("overlay", fontsize=9)
    return save_figure(fig, path, title, canvas.note)
