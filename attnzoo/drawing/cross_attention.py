"""Cross-attention maps: where each text word looks in the image, per fusion layer, drawn as heatmaps (PNG).

`python -m attnzoo.viz <text-image run dir> [--split val|test] [--count 4]` draws them for a trained run.

Notation: H heads, L text tokens (UTF-8 bytes), N image patches on a (gh, gw) grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .matrices import _pyplot, heat_scale, save_figure

Tensor = torch.Tensor


def word_spans(text: str, length: int) -> list[tuple[str, int, int]]:
    """(word, first token, end token) for each space-separated word whose bytes fall within `length` tokens."""
    spans, start = [], 0
    for word in text.split(" "):
        end = start + len(word.encode("utf-8"))
        if word and end <= length:
            spans.append((word, start, end))
        start = end + 1
    return spans


def offset_spans(text: str, offsets: Sequence[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """`word_spans` for a subword tokenizer: (word, first token, end token) for each space-separated word, from the
    tokens' character offsets into `text` (a `tokenizers` encoding's `offsets`)."""
    spans, start = [], 0
    for word in text.split(" "):
        end = start + len(word)
        inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]  # tokens overlapping the word
        if word and inside:
            spans.append((word, inside[0], inside[-1] + 1))
        start = end + 1
    return spans


def to_pixels(image: Tensor) -> np.ndarray:
    """[C, H, W] in [-1, 1] (the DataModule's normalization) -> float [H, W, 3] in [0, 1]."""
    pixels = ((image.detach().float().cpu() + 1.0) / 2.0).clamp(0, 1)
    if pixels.shape[0] == 1:
        pixels = pixels.expand(3, -1, -1)
    return pixels.permute(1, 2, 0).numpy()  # [H, W, 3]


def draw_cross_attention(
    image: Tensor,
    text: str,
    maps: Sequence[Tensor],
    *,
    grid_size: tuple[int, int],
    path: str | Path,
    title: str | None = None,
    max_words: int = 12,
    spans: Sequence[tuple[str, int, int]] | None = None,
    length: int | None = None,
) -> Path:
    """Draw one example's text-to-image attention: a row per layer; columns for all tokens, then each word.

    Args:
        image: [C, H, W] in [-1, 1].
        text: the example's text; token i is its i-th UTF-8 byte (padding left out).
        maps: one [H, L, N] tensor per cross-attention layer (heads are averaged).
        grid_size: (gh, gw) with gh * gw = N.
        path: the PNG to write.
        title: a line above the figure (e.g. the answer and the prediction).
        max_words: word columns drawn at most (the first words of the text).
        spans, length: for a subword tokenizer, (word, first token, end token) of each word (`offset_spans`) and
            the number of tokens; None: token i is the text's i-th UTF-8 byte.
    """
    if not maps:
        raise ValueError("maps is empty: pass one [H, L, N] tensor per cross-attention layer")
    gh, gw = grid_size
    if length is None:
        length = len(text.encode("utf-8"))
    for i, m in enumerate(maps):
        if m.dim() != 3 or m.shape[-1] != gh * gw or m.shape[1] < length:
            raise ValueError(
                f"maps[{i}] has shape {tuple(m.shape)}; expected [H, L>={length}, N={gh * gw}] for grid {grid_size}"
            )
    pixels = to_pixels(image)
    size = pixels.shape[:2]
    layers = [m.detach().float().cpu().mean(0)[:length] for m in maps]  # [L, N] each, heads averaged

    # the sentence reads left to right: a column per word (after the image and all tokens), a row per layer
    words = word_spans(text, length) if spans is None else [w for w in spans if w[2] <= length]
    cols = [("all tokens", 0, length), *words[:max_words]] if length else []  # an empty text reads nothing
    plt = _pyplot()
    fig, axes = plt.subplots(
        len(layers),
        len(cols) + 1,
        figsize=(1.6 * (len(cols) + 1), 1.7 * len(layers) + 0.9),
        squeeze=False,
    )
    for r, weights in enumerate(layers):
        axes[r, 0].imshow(pixels)
        axes[r, 0].set_ylabel(f"layer {r}", fontsize=10)
        for c, (word, start, end) in enumerate(cols, 1):
            mean = weights[start:end].mean(0)  # [N]
            heat = mean.reshape(1, 1, gh, gw)  # [1, 1, gh, gw]
            heat = torch.nn.functional.interpolate(heat, size=size, mode="bilinear", align_corners=False)[0, 0]
            axes[r, c].imshow(pixels * 0.45)
            axes[r, c].imshow(heat.numpy(), alpha=0.65, **heat_scale(heat))
            axes[r, c].set_xlabel(f"max {mean.max():.2f}", fontsize=7)
            if r == 0:
                axes[r, c].set_title(word, fontsize=10)
    axes[0, 0].set_title("image" if cols else "image (the text has no tokens)", fontsize=10)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    return save_figure(fig, path, f"{text}\n{title}" if title else text)


@torch.no_grad()
def text_image_maps(
    net: torch.nn.Module,
    batch: dict[str, Tensor],
    texts: Sequence[str],
    out_dir: str | Path,
    *,
    class_names: Sequence[str] | None = None,
    count: int = 4,
    tokenizer: Any = None,
    first: int = 0,
) -> list[Path]:
    """Run a text-image net on a batch and draw the cross-attention maps of its first `count` examples, named by
    their index in their split (`first`: the index of the batch's first example).

    The net is called as `net(image, tokens, padding_mask, return_cross_attention=True)` (see
    `attnzoo.models.text_image.TextImageNet`); `texts` are the batch's texts in order, tokenized by `tokenizer`
    (None or bytes: one token per UTF-8 byte; a subword tokenizer: words found by its offsets).
    """
    was_training = net.training
    net.eval()
    logits, maps = net(batch["image"], batch["tokens"], batch["padding_mask"], return_cross_attention=True)
    net.train(was_training)
    names = list(class_names) if class_names is not None else [str(i) for i in range(logits.shape[-1])]
    paths = []
    for i in range(min(count, len(texts))):
        title = f"predicted: {names[int(logits[i].argmax())]}"
        if "label" in batch:
            title += f"   answer: {names[int(batch['label'][i])]}"
        spans = None
        length = int((~batch["padding_mask"][i]).sum())  # the tokens the model read (a long text is cut)
        inner = getattr(tokenizer, "tok", None)  # the `tokenizers.Tokenizer` of a subword tokenizer
        if inner is not None:
            encoding = inner.encode(texts[i], add_special_tokens=False)
            spans = offset_spans(texts[i], encoding.offsets)
        paths.append(
            draw_cross_attention(
                batch["image"][i],
                texts[i],
                [m[i] for m in maps],
                grid_size=net.grid_size,
                path=Path(out_dir) / f"cross_attention_{first + i:03d}.png",
                title=title,
                spans=spans,
                length=length,
            )
        )
    return paths
