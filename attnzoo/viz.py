"""`python -m attnzoo.viz <run dir> [--input FILE] [--index N] [--checkpoint best|last|FILE] [--out DIR]`

Attention maps of a trained run for one input: every layer's and head's attention matrix, what the class
token reads from each patch (drawn over the input), and attention rollout over the input. The input is an
image file (image recipes) or, without `--input`, example `--index` of the run's validation split.

Maps come from `attnzoo.attention.capture_attention`: the captured calls run on the eager backend (the one
that returns weights), whatever backend the run trained with; the weights are the same up to rounding.

Notation: B batch (1 here), H heads, L tokens (P prefix tokens, then the N = gh * gw patches).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .config import ConfigError, load
from .fit import _show_attnzoo_log

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


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


def capture(net: torch.nn.Module, inputs: dict[str, Tensor]) -> tuple[Tensor, list[Tensor]]:
    """(logits, one [B, H, Lq, Lk] map per attention call) for `inputs`, in eval mode without gradients."""
    from .attention import capture_attention

    was_training = net.training
    net.eval()
    try:
        with torch.no_grad(), capture_attention() as maps:
            logits = net(**inputs)
    finally:
        net.train(was_training)
    if not maps:
        raise ValueError(f"{type(net).__name__} made no attnzoo Attention call: nothing to draw")
    return logits, [m.float() for m in maps]


# ---------------------------------------------------------------------------------------------- inputs


def image_input(data: Any, path: Path) -> dict[str, Tensor]:
    """An image file as the run's DataModule prepares validation images: {"image": [1, C, S, S]}."""
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("L" if data.in_chans == 1 else "RGB")
        image = data._transform(train=False, in_memory=False)(img)  # [C, S, S]
    return {"image": image[None]}


# data kind -> how a file (or text) becomes the net's inputs; recipes of other modalities add theirs
INPUTS: dict[str, Callable[[Any, Path], dict[str, Tensor]]] = {"image": image_input}


def example_input(data: Any, index: int) -> tuple[dict[str, Tensor], Any]:
    """(inputs, label) of validation example `index`, batched as the run's loader does."""
    loader = data.val_dataloader()
    if not 0 <= index < len(loader.dataset):
        raise ConfigError(f"--index {index}: the validation split has {len(loader.dataset)} examples")
    batch = loader.collate_fn([loader.dataset[index]])
    label = batch.pop("label", None)
    return batch, None if label is None else label[0]


# ---------------------------------------------------------------------------------------------- drawing


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _to_display(image: Tensor) -> Any:
    """[C, H, W] (normalized) -> [H, W] or [H, W, 3] in [0, 1] for imshow, stretched per channel."""
    x = image.detach().float().cpu()
    lo = x.flatten(1).amin(1)[:, None, None]
    hi = x.flatten(1).amax(1)[:, None, None]
    x = (x - lo) / (hi - lo).clamp_min(1e-8)
    return x[0].numpy() if x.shape[0] == 1 else x.permute(1, 2, 0).numpy()


def _upsample(grid_values: Tensor, size: Sequence[int]) -> Any:
    """[gh, gw] -> [H, W] (nearest: each patch stays a visible block)."""
    return torch.nn.functional.interpolate(grid_values[None, None], size=tuple(size), mode="nearest")[0, 0].numpy()


def plot_matrices(maps: Sequence[Tensor], path: Path, *, title: str, prefix: int = 0) -> Path:
    """Layers x heads of [Lq, Lk] attention matrices (example 0), one color scale per panel."""
    plt = _pyplot()
    layers, heads = len(maps), maps[0].shape[1]
    fig, axes = plt.subplots(layers, heads, figsize=(1.9 * heads + 0.8, 1.9 * layers + 0.7), squeeze=False)
    for i, m in enumerate(maps):
        for h in range(heads):
            ax = axes[i, h]
            ax.imshow(m[0, h].cpu().numpy(), cmap="viridis", vmin=0.0, interpolation="nearest")
            if prefix:  # separate the prefix tokens (class token) from the patches
                ax.axhline(prefix - 0.5, color="white", lw=0.6)
                ax.axvline(prefix - 0.5, color="white", lw=0.6)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"head {h}", fontsize=9)
            if h == 0:
                ax.set_ylabel(f"layer {i}\nquery", fontsize=9)
            if i == layers - 1:
                ax.set_xlabel("key", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_query_maps(
    maps: Sequence[Tensor], image: Tensor, grid: tuple[int, int], prefix: int, path: Path, *, title: str, query: int = 0
) -> Path:
    """Layers x heads: what token `query` (the class token) reads from each patch, over the input."""
    plt = _pyplot()
    shown = _to_display(image)
    size = image.shape[-2:]
    layers, heads = len(maps), maps[0].shape[1]
    fig, axes = plt.subplots(layers, heads + 1, figsize=(1.9 * (heads + 1), 1.9 * layers + 0.7), squeeze=False)
    for i, m in enumerate(maps):
        axes[i, 0].imshow(shown, cmap="gray")
        axes[i, 0].set_ylabel(f"layer {i}", fontsize=9)
        for h in range(heads):
            row = m[0, h, query, prefix:].reshape(grid)  # [gh, gw]
            ax = axes[i, h + 1]
            ax.imshow(shown, cmap="gray")
            ax.imshow(_upsample(row, size), cmap="inferno", alpha=0.6, vmin=0.0)
            ax.set_xlabel(f"to prefix {m[0, h, query, :prefix].sum():.2f}" if prefix else "", fontsize=7)
            if i == 0:
                ax.set_title(f"head {h}", fontsize=9)
    axes[0, 0].set_title("input", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_rollout(roll: Tensor, image: Tensor, grid: tuple[int, int], prefix: int, path: Path, *, title: str) -> Path:
    """Input | rollout of the class token over the patches | both overlaid."""
    plt = _pyplot()
    shown, size = _to_display(image), image.shape[-2:]
    heat = roll[0, 0, prefix:] if prefix else roll[0].mean(0)  # [N]: class token, or the mean over patch tokens
    heat = _upsample(heat.reshape(grid) / heat.max().clamp_min(1e-12), size)
    fig, axes = plt.subplots(1, 3, figsize=(8, 3.2))
    axes[0].imshow(shown, cmap="gray")
    axes[0].set_title("input", fontsize=9)
    im = axes[1].imshow(heat, cmap="inferno", vmin=0.0, vmax=1.0)
    axes[1].set_title("rollout (relative)", fontsize=9)
    fig.colorbar(im, ax=axes[1], fraction=0.046)
    axes[2].imshow(shown, cmap="gray")
    axes[2].imshow(heat, cmap="inferno", alpha=0.55, vmin=0.0, vmax=1.0)
    axes[2].set_title("overlay", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------- command


def load_run(run_dir: Path, checkpoint: str = "best", overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    """(data, net) of a run: its config rebuilt, the checkpoint's weights loaded."""
    from .fit import build

    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    ckpt = run_dir / "checkpoints" / f"{checkpoint}.ckpt" if checkpoint in ("best", "last") else Path(checkpoint)
    if not ckpt.is_file():
        raise ConfigError(f"--checkpoint: no checkpoint file at {str(ckpt)!r}")
    cfg = load([run_dir / "config.yaml"], overrides)
    try:
        data, task, _ = build(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    task.load_state_dict(state["state_dict"])
    return data, task.net


def visualize(
    run_dir: Path,
    *,
    input_path: Path | None = None,
    index: int = 0,
    checkpoint: str = "best",
    out: Path | None = None,
    residual: float = 0.5,
    head_fusion: str = "mean",
) -> list[Path]:
    """Draw the attention of a run on one input; returns the files written."""
    data, net = load_run(run_dir, checkpoint)
    kind = load([run_dir / "config.yaml"]).section("data")["kind"]
    label = None
    if input_path is None:
        inputs, label = example_input(data, index)
        name = f"val-{index}"
    else:
        if kind not in INPUTS:
            raise ConfigError(f"--input: runs with data kind {kind!r} take no input files yet; valid: {sorted(INPUTS)}")
        if not input_path.is_file():
            raise ConfigError(f"--input: {str(input_path)!r} is not a file")
        if kind == "image" and input_path.suffix.lower() not in IMAGE_SUFFIXES:
            raise ConfigError(f"--input: {input_path.name} is not an image file ({', '.join(IMAGE_SUFFIXES)})")
        inputs, name = INPUTS[kind](data, input_path), input_path.stem
    logits, maps = capture(net, inputs)
    names = list(getattr(data, "class_names", []) or [str(i) for i in range(logits.shape[-1])])
    probs = logits.float().softmax(-1)[0]
    title = f"{run_dir.name}: predicted {names[int(probs.argmax())]} ({probs.max():.2f})"
    if label is not None and label.dim() == 0:
        title += f", label {names[int(label)]}"
    title += "\n(weights captured on the eager backend)"
    out = out or run_dir / "viz" / name
    out.mkdir(parents=True, exist_ok=True)
    prefix = int(getattr(net, "num_prefix_tokens", 0))
    grid = getattr(net, "grid_size", None)
    square = [m for m in maps if m.shape[-1] == m.shape[-2]]
    written = [plot_matrices(maps, out / "attention_matrices.png", title=title, prefix=prefix)]
    saved: dict[str, Any] = {"maps": maps, "logits": logits, "class_names": names}
    # keys projected along the sequence (linformer) are not tokens, even when there are as many rows as tokens
    projected = any(getattr(m, "proj_len", None) is not None for m in net.modules())
    over_patches = grid is not None and all(m.shape[-1] == prefix + grid[0] * grid[1] for m in maps)
    if "image" in inputs and over_patches and not projected:
        image = inputs["image"][0]
        written.append(plot_query_maps(maps, image, tuple(grid), prefix, out / "class_token.png", title=title))
        saved["rollout"] = rollout(square, residual=residual, head_fusion=head_fusion)
        written.append(plot_rollout(saved["rollout"], image, tuple(grid), prefix, out / "rollout.png", title=title))
    else:
        log.info("viz: the maps are not over an image's patch grid (e.g. linformer's projected keys): matrices only")
    torch.save(saved, out / "maps.pt")
    written.append(out / "maps.pt")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo viz", description="Attention maps of a trained run for one input.")
    p.add_argument("run_dir", type=Path, help="a run directory written by attnzoo fit")
    p.add_argument("--input", type=Path, help="an input file (image); default: an example of the validation split")
    p.add_argument("--index", type=int, default=0, help="the validation example to draw without --input")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--out", type=Path, help="output directory (default: <run dir>/viz/<input name>)")
    p.add_argument("--residual", type=float, default=0.5, help="rollout: weight of the residual connection")
    p.add_argument("--head-fusion", default="mean", choices=("mean", "max", "min"), help="rollout: how heads combine")
    args = p.parse_args(argv)
    _show_attnzoo_log()
    try:
        written = visualize(
            args.run_dir,
            input_path=args.input,
            index=args.index,
            checkpoint=args.checkpoint,
            out=args.out,
            residual=args.residual,
            head_fusion=args.head_fusion,
        )
    except (ConfigError, ValueError) as err:
        print(f"attnzoo viz: error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
