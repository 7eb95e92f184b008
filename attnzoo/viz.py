"""`python -m attnzoo.viz <run dir> [--input FILE | --text TEXT | --index N] [--checkpoint best|last|FILE] [--out DIR]`

Attention maps of a trained run for one input: every layer's and head's attention matrix, what the prefix
tokens (class token; AST's class and distillation tokens) read from each patch, drawn over the input, and
attention rollout over the input. The input is an image file (ViT), a WAV file (AST, drawn over its log-mel
spectrogram), a text given with `--text` (text runs), or example `--index` of the run's validation split
(any recipe; runs whose tokens are not patches of the input, such as text, get the matrices).

Runs with cross-attention (text-image) also get `--count` examples of `--split` drawn as where each word looks
in the image.

Maps come from `attnzoo.attention.capture_attention`: the captured calls run on the eager backend (the one
that returns weights), whatever backend the run trained with; the weights are the same up to rounding.

Notation: B batch (1 here), H heads, L tokens (P prefix tokens, then the N patches).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .config import ConfigError
from .drawing.matrices import (
    Canvas,
    image_canvas,
    plot_matrices,
    plot_prefix_maps,
    plot_rollout,
    spectrogram_canvas,
)
from .drawing.rollout import capture, rollout
from .fit import check_rank_format
from .util.files import compressed
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor
# what an image folder trains on (torchvision's ImageFolder: .ppm and .pgm too, no .gif): what viz draws
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


# ---------------------------------------------------------------------------------------------- inputs


def image_input(data: Any, path: Path) -> dict[str, Tensor]:
    """An image file as the run's DataModule prepares validation images: {"image": [1, C, S, S]}."""
    from .data.formats.image_io import load_rgb

    img = load_rgb(str(path))  # as training reads files (`load_rgb`: turned, 8 bits, on white)
    if data.in_chans == 1:
        img = img.convert("L")
    image = data.input_transform()(img)  # [C, S, S]
    return {"image": image[None]}


def audio_input(data: Any, path: Path) -> dict[str, Tensor]:
    """A WAV file as mono audio at the run's sample rate, at its own length: {"audio": [1, T]}."""
    from .data.formats.audio_io import load_clip

    return {"audio": load_clip(path, sample_rate=data.sample_rate)[None]}


def text_input(data: Any, text: str) -> dict[str, Tensor]:
    """A text encoded by the run's tokenizer, cut to its `max_len`: {"tokens": [1, L], "padding_mask": [1, L]}."""
    from .data.formats.text_files import one_line
    from .data.tokenizers.subword import encode_user_text, unknown_note
    from .data.tokenizers.tokenize import truncate

    unknown: list[str] = []
    text = one_line(text)  # as training reads its texts: whitespace runs (newlines, tabs) as one space
    ids = encode_user_text(data.tokenizer, text, unknown)  # "[CLS]" typed in the text is plain text, not a special id
    if unknown:
        log.warning("viz: --text holds %s", unknown_note(unknown))
    if not ids:
        raise ConfigError(f"--text: {text[:80]!r} has no tokens under tokenizer {data.tokenizer.name!r}")
    if len(ids) > data.max_len:
        log.warning("viz: --text has %d tokens; cut to data.max_len %d", len(ids), data.max_len)
        ids = truncate(data.tokenizer, ids, data.max_len)  # as training cut its texts
    tokens = torch.tensor([ids], dtype=torch.long)
    return {"tokens": tokens, "padding_mask": torch.zeros_like(tokens, dtype=torch.bool)}


# data kind -> (file suffixes, how such a file becomes the net's inputs); other modalities add theirs
INPUTS: dict[str, tuple[tuple[str, ...], Callable[[Any, Path], dict[str, Tensor]]]] = {
    "image": (IMAGE_SUFFIXES, image_input),
    "audio": ((".wav",), audio_input),
}


@dataclass
class RunInputs:
    """Stands in for a run's DataModule where viz turns one input (`--input FILE`, `--text`) into the net's inputs:
    all it needs comes from the run directory alone (config.yaml, labels.json, tokenizer.json), so the training
    files are not read (nor decoded at setup) and may be elsewhere: a run directory copied from another machine."""

    cfg: Any
    class_names: list[str]
    tokenizer: Any = None

    @classmethod
    def of(cls, run: Any) -> RunInputs:
        from .data.modules.base import given_class_names

        saved = run.run_dir / "labels.json"
        names = given_class_names(str(saved)) if saved.is_file() else []
        return cls(run.cfg, names, run.tokenizer)

    @property
    def options(self) -> dict[str, Any]:
        return self.cfg.section("data")

    def input_transform(self) -> Callable[[Any], Tensor]:
        from .data.modules.image import eval_transform

        size, chans = self.cfg.section("model")["img_size"], self.in_chans
        return eval_transform(size, chans, ink=bool(self.options.get("ink")), mean=self.options.get("mean"),
                              std=self.options.get("std"))  # fmt: skip

    @property
    def in_chans(self) -> int:
        return int(self.cfg.section("model")["in_chans"])

    def _data_option(self, key: str) -> Any:
        """A data option as the run's data module had it: its config.yaml's value, else the module's default."""
        from .data import DATAMODULES

        kind = self.options["kind"]
        return self.options.get(key, inspect.signature(DATAMODULES[kind]).parameters[key].default)

    @property
    def sample_rate(self) -> int:
        return int(self.cfg.section("model").get("sample_rate") or self._data_option("sample_rate"))

    @property
    def max_len(self) -> int:
        from .run.inference import CONTEXT_LENGTH, context_length

        return context_length(self.cfg) if self.options["kind"] in CONTEXT_LENGTH else int(self._data_option("max_len"))

    @property
    def multilabel(self) -> bool:
        return bool(self.options.get("multilabel", False))

    def decode(self, ids: Tensor) -> str:
        from .data.tokenizers.subword import decode_generated

        return decode_generated(self.tokenizer, ids.tolist())


def canvas_for(
    net: torch.nn.Module,
    inputs: dict[str, Tensor],
    length: int,
    normalization: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Canvas | None:
    """How to draw per-patch values over this input, or None when the tokens are not patches of it;
    `normalization`: an image's (mean, std) per channel (`pixel_normalization`)."""
    prefix = int(getattr(net, "num_prefix_tokens", 0))
    if "image" in inputs and getattr(net, "grid_size", None) is not None:
        grid = tuple(net.grid_size)
        if prefix + grid[0] * grid[1] == length:
            return image_canvas(inputs["image"][0], grid, normalization)
    if "audio" in inputs and hasattr(net, "features") and hasattr(net, "grid_size_for"):
        grid = tuple(net.grid_size_for(inputs["audio"].shape[-1]))  # (time, frequency) patches of the clip
        if prefix + grid[0] * grid[1] == length:
            with torch.no_grad():
                features = net.features(inputs["audio"])[0]  # [F, T]
            return spectrogram_canvas(features, grid)
    return None


def pixel_normalization(cfg: Any) -> tuple[list[float], list[float]] | None:
    """The (mean, std) per channel a run's images are normalized by, to draw them in their own colours: the image
    recipes' `data.mean` / `data.std` (0.5 by default), the text-image recipe's 0.5; None for other runs."""
    from .data.modules.image import normalization

    data, chans = cfg.section("data"), cfg.section("model").get("in_chans")
    if data.get("kind") == "text_image":
        return [0.5] * 3, [0.5] * 3  # its pixels are x / 127.5 - 1
    if data.get("kind") == "image" and isinstance(chans, int):
        return normalization(chans, data.get("mean"), data.get("std"))
    return None


def example_input(run: Any, index: int, split: str = "val") -> tuple[dict[str, Tensor], Any]:
    """(the net's inputs, label) of example `index` of `split`, batched as the run's loader does, less the padding
    at the end of its row (`data.pad_to_multiple`, a short last block): padded positions would be drawn as tokens
    the example does not have. The net reads right padding as nothing, so its output is the same."""
    try:
        loader = run.data.val_dataloader() if split == "val" else run.data.test_dataloader()
    except ValueError as err:  # no test file
        raise ConfigError(f"--split {split}: {err}") from None
    if not 0 <= index < len(loader.dataset):
        raise ConfigError(index_error(index, split, len(loader.dataset)))
    batch = _without_padding(loader.collate_fn([loader.dataset[index]]))
    label = batch.pop("label", None)
    net_inputs = getattr(run.task, "net_inputs", None)  # sequence tasks: the batch also holds labels, texts, ...
    return (net_inputs(batch) if net_inputs is not None else batch), None if label is None else label[0]


def run_label(run_dir: Path) -> str:
    """A run's name for a figure's title: its folder, and the folder above when that is a timestamp (`run.dir/
    run.name/<date-time>`: vit/20250101-120000, not the time alone)."""
    stamped = re.fullmatch(r"\d{8}-\d{6}(-\d+)?", run_dir.name) is not None
    return f"{run_dir.parent.name}/{run_dir.name}" if stamped and run_dir.parent.name else run_dir.name


def index_error(index: int, split: str, size: int, what: str = "examples") -> str:
    """What is wrong with an `--index` outside a split of `size` examples, and the indices that are valid."""
    valid = f"valid: 0-{size - 1}" if size else "none is valid"
    return f"--index {index}: the {split} split has {size} {what} ({valid})"


def _without_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch of one example cut to its real tokens: each tensor of the padding mask's shape [1, L] (tokens, the
    mask, per-token labels) loses the padded end of its row. Unchanged without padding, or with padding that is not
    only at the end (cutting it would move tokens)."""
    from .attention.patterns import right_padded

    mask = batch.get("padding_mask")
    if not isinstance(mask, Tensor) or mask.dim() != 2 or mask.shape[0] != 1:
        return batch
    (real,) = right_padded(mask) or [mask.shape[1]]
    if real in (0, mask.shape[1]):
        return batch
    return {k: v[:, :real] if isinstance(v, Tensor) and v.shape == mask.shape else v for k, v in batch.items()}


# ---------------------------------------------------------------------------------------------- command


def visualize(
    run_dir: Path,
    *,
    input_path: Path | None = None,
    text: str | None = None,
    index: int = 0,
    checkpoint: str = "best",
    out: Path | None = None,
    residual: float = 0.5,
    head_fusion: str = "mean",
    split: str = "val",
    count: int = 4,
    overrides: Sequence[str] = (),
) -> list[Path]:
    """Draw the attention of a run on one input; returns the files written.

    Without an input, example `index` of `split` is drawn; `overrides` (data.* key=value) say where the run's data
    is now. Runs of models with cross-attention (the text-image recipe) also get, for `count` examples of `split`
    from example `index`, where each word looks in the image (`<out>/cross_attention/`).
    """
    from .run import load_run
    from .run.inference import CLASSIFIERS
    from .run.lock import refuse_links
    from .run.rundir import saved_kind

    if not 0.0 <= residual <= 1.0:  # before anything is drawn
        raise ConfigError(f"--residual ({residual}) must be in [0, 1]")
    if out is None:  # drawings go into <run>/viz/
        refuse_links(Path(run_dir), "run directory (viz draws into its viz/ folder)", entries=("viz",))
    one_input = input_path is not None or text is not None
    # what the run takes is checked before it is loaded, and its data read (None: load_run says why it cannot be)
    kind = saved_kind(Path(run_dir))
    if text is not None and kind is not None and (kind not in ("text", "translation") or input_path is not None):
        raise ConfigError(
            f"--text: for runs with data kind 'text' or 'translation' (this run: {kind!r}), without --input"
        )
    if input_path is not None and kind == "translation":
        raise ConfigError("--input: translation runs take a sentence with --text (or --index of --split)")
    if input_path is not None and kind is not None and kind not in INPUTS:
        raise ConfigError(f"--input: runs with data kind {kind!r} take no input files yet; valid: {sorted(INPUTS)}")
    alone = one_input and kind in (*CLASSIFIERS, "translation")  # read without the run's data
    run = load_run(run_dir, checkpoint, (), overrides, with_data=not alone, classifiers=True)
    run.task.eval()  # inference: no dropout, and no SpecAugment masks on the spectrogram drawn under the maps
    data, net, kind = run.data if run.data is not None else RunInputs.of(run), run.net, run.data_kind
    cross_index = index if input_path is None and text is None else 0  # the --index example first
    if hasattr(net, "cross_blocks"):
        check_cross_split(data, split, count, cross_index)
    if kind == "translation":
        name = "text" if text is not None else f"{split}-{index}"  # as the other kinds name their folders
        if out is None and text is not None:
            out = _input_folder(run_dir / "viz", "text", text)
        if text is None:
            pairs = data.pairs.get(split) or []
            if not 0 <= index < len(pairs):
                raise ConfigError(index_error(index, split, len(pairs), "pairs"))
            text = pairs[index][0]
        return [translation_alignment(run, data, text, out or run_dir / "viz" / name)]
    label = None
    if text is not None:
        inputs, name = text_input(data, text), "text"
    elif input_path is None:
        inputs, label = example_input(run, index, split)
        name = f"{split}-{index}"
    else:
        suffixes, make = INPUTS[kind]
        if not input_path.is_file():
            raise ConfigError(f"--input: {str(input_path)!r} is not a file")
        if input_path.suffix.lower() not in suffixes:
            raise ConfigError(f"--input: {input_path.name} is not an {kind} file ({', '.join(suffixes)})")
        try:
            inputs = make(data, input_path)
        except (OSError, ValueError, SyntaxError) as err:  # PIL: UnidentifiedImageError / truncated data are OSErrors
            raise ConfigError(f"--input: cannot read {str(input_path)!r} as an {kind} file: {err}") from None
        name = input_path.stem
    from .models.ast import ClipTooShort

    names: list[str] = []  # the module of each attention call
    try:
        logits, maps = capture(net, inputs, names)
    except ClipTooShort as err:  # the input's fault (shorter than one feature window or patch): name the file
        if input_path is None:
            raise
        raise ConfigError(f"--input {str(input_path)!r}: {err}") from None
    class_names = list(getattr(data, "class_names", []) or [str(i) for i in range(logits.shape[-1])])
    if logits.dim() == 2 and getattr(data, "multilabel", False):  # a set of labels: a sigmoid per class
        probs = logits.float().sigmoid()[0]
        chosen = [i for i in probs.argsort(descending=True).tolist() if probs[i] >= 0.5] or [int(probs.argmax())]
        title = f"{run_label(run_dir)}: predicted " + ", ".join(f"{class_names[i]} ({probs[i]:.2f})" for i in chosen)
        if len(chosen) == 1 and probs[chosen[0]] < 0.5:
            title += ": no class above 0.5"
        if label is not None and label.dim() == 1:
            title += f", labels {', '.join(class_names[i] for i in label.nonzero().flatten().tolist()) or 'none'}"
    elif logits.dim() == 2:  # one prediction per input (classification)
        probs = logits.float().softmax(-1)[0]
        title = f"{run_label(run_dir)}: predicted {class_names[int(probs.argmax())]} ({probs.max():.2f})"
        if label is not None and label.dim() == 0:
            title += f", label {class_names[int(label)]}"
    else:  # a prediction per token (a language model)
        title = f"{run_label(run_dir)}: {name}, {maps[0].shape[-1]} tokens"
    title += "\n(weights captured on the eager backend)"
    if text is not None:
        title += f"\ntext: {text if len(text) <= 80 else text[:77] + '...'}"
    if out is None and (input_path is not None or text is not None):
        source = text if text is not None else str(input_path.resolve())
        out = _input_folder(run_dir / "viz", name if text is not None else input_path.stem, source)
    out = out or run_dir / "viz" / name
    out.mkdir(parents=True, exist_ok=True)
    prefix = int(getattr(net, "num_prefix_tokens", 0))
    # a multimodal model's calls are its image's, its question's and cross-attention: named by module, and only the
    # image's own are drawn over the image
    parts = getattr(net, "patch_attention", None)
    patch_maps = maps if parts is None else [m for m, n in zip(maps, names, strict=True) if n.startswith(parts)]
    labels = None if parts is None else names
    written = [plot_matrices(maps, out / "attention_matrices.png", title=title, prefix=prefix, labels=labels)]
    saved: dict[str, Any] = {"maps": maps, "modules": names, "logits": logits, "class_names": class_names}
    if input_path is not None or text is not None:
        saved["input"] = text if text is not None else str(input_path.resolve())
    # keys projected along the sequence (linformer) are not tokens, even when there are as many rows as tokens
    projected = any(getattr(m, "proj_len", None) is not None for m in net.modules())
    canvas = None
    if patch_maps and not projected:
        canvas = canvas_for(net, inputs, patch_maps[0].shape[-1], pixel_normalization(run.cfg))
    if canvas is not None and all(m.shape[-2:] == patch_maps[0].shape[-2:] for m in patch_maps):
        if prefix:
            written.append(plot_prefix_maps(patch_maps, canvas, prefix, out / "prefix_attention.png", title=title))
        else:  # a ViT without a class token (global_pool avg), a text-image model's image
            log.info("viz: no prefix token (a ViT's model.class_token false; a text-image model's patches): no "
                     "prefix_attention.png; the rollout is the mean patch token's, which average pooling "
                     "reads")  # fmt: skip
        saved["rollout"] = rollout(patch_maps, residual=residual, head_fusion=head_fusion)
        written.append(plot_rollout(saved["rollout"], canvas, prefix, out / "rollout.png", title=title))
    else:
        log.info("viz: the keys are not patches of the input (e.g. text, or linformer's projected keys): matrices only")
    torch.save(saved, out / "maps.pt")
    written.append(out / "maps.pt")
    if hasattr(net, "cross_blocks"):
        written += cross_attention_maps(data, net, split=split, count=count, out=out / "cross_attention",
                                        index=cross_index)  # fmt: skip
    elif getattr(net, "fusion", None) == "film":
        log.info("viz: no cross-attention maps: model.fusion is 'film' (the question steers the image stem instead)")
    return written


def _input_folder(viz: Path, stem: str, resolved: str) -> Path:
    """`viz/<stem>`, or `viz/<stem>-<digest of resolved>` when another input of that stem was drawn there (class
    folders numbered alike: cat/4.jpg and dog/4.jpg; `--text` of two sentences); `resolved`: the input's absolute
    path, or the text: the drawings of one input are not overwritten by another's."""
    import hashlib

    plain = viz / stem
    try:
        maps = plain / "maps.pt"  # a compressed archive is no file viz wrote: drawn over
        drawn = None if compressed(maps) else torch.load(maps, map_location="cpu", weights_only=True).get("input")
    except Exception:  # noqa: BLE001 (nothing drawn there yet, an older drawing, or one cut short: draw over it)
        drawn = None
    if drawn is None or drawn == resolved:  # none there, one of an unrecorded input (an earlier viz), or this file's
        return plain
    folder = viz / f"{stem}-{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"
    log.info("viz: %s holds the drawings of %r: %r goes to %s", plain, drawn, resolved, folder)
    return folder


def translation_alignment(run: Any, data: Any, text: str, out: Path, beam: int | None = None) -> Path:
    """`<out>/alignment.png`: the cross-attention of the run's translation of `text` (beam search of `beam`, default
    the run's `task.beam_size`: the translation `translate` gives), source tokens across and generated tokens down,
    per decoder layer; the maps also go to `<out>/maps.pt`. `data` is the run's DataModule or its `RunInputs`."""
    from .attention import capture_attention
    from .data.tokenizers.subword import unknown_note
    from .drawing.alignment import draw_alignment
    from .translate import source_batch

    task = run.task.eval()
    unknown: list[list[str]] = []
    src, mask, lengths = source_batch(data.tokenizer, [text], data.max_len, unknown)  # [1, S]
    if unknown[0]:
        log.warning("viz: --text holds %s", unknown_note(unknown[0]))
    if lengths[0] > data.max_len:
        log.warning("viz: --text has %d tokens; cut to the model's %d (data.max_len)", lengths[0], data.max_len)
    hyp = task.translate(src, mask, beam_size=task.beam_size if beam is None else beam)[0]  # [T]
    hyp = hyp[hyp != data.tokenizer.pad_id]
    # teacher-forced pass over bos + the hypothesis: row t is what generated token t read
    tgt = torch.cat([torch.tensor([data.tokenizer.bos_id]), hyp[:-1]])[None]  # [1, T]
    net = run.net
    layers = [b.cross_attn for b in net.decoder.blocks if getattr(b, "cross_attn", None) is not None]
    marks: list[int] = []  # the index of the record each cross-attention call appends
    with torch.no_grad(), capture_attention() as records:
        memory = net.encode(src, mask)
        hooks = [m.register_forward_pre_hook(lambda m, a: marks.append(len(records))) for m in layers]
        try:
            net.decode_step(tgt, memory, mask)
        finally:
            for h in hooks:
                h.remove()
    cross = [records[i][0].float() for i in marks]  # [H, T, S] per decoder layer
    source = [_token(data.tokenizer, i) for i in src[0].tolist()]
    target = [_token(data.tokenizer, i) for i in hyp.tolist()]
    translation = data.decode(hyp)
    out.mkdir(parents=True, exist_ok=True)
    saved = {"cross_attention": cross, "source": source, "target": target, "translation": translation, "input": text}
    torch.save(saved, out / "maps.pt")
    title = f"{text}\n-> {translation}\n(cross-attention, heads averaged; captured on the eager backend)"
    path = draw_alignment(cross, source, target, out / "alignment.png", title=title)
    log.info("viz: %s -> %s", text, translation)
    return path


def _token(tokenizer: Any, i: int) -> str:
    """The vocabulary entry of id `i` (subword tokenizers), else its decoded text."""
    if hasattr(tokenizer, "id_to_token"):
        return tokenizer.id_to_token(i) or f"<{i}>"
    return tokenizer.decode([i]) or f"<{i}>"


def check_cross_split(data: Any, split: str, count: int, index: int) -> None:
    """ConfigError, before anything is drawn, when `count` examples of `split` from `index` cannot be drawn."""
    if split not in ("val", "test"):
        raise ConfigError(f"--split: {split!r}; valid: ['val', 'test']")
    if count < 1:
        raise ConfigError(f"--count: {count}; expected at least 1")
    size = len(data.datasets.get(split) or ())
    if not size:
        raise ConfigError(f"--split {split}: the run's data has no {split} examples (its config.yaml names no file "
                          f"for them); use --split {'test' if split == 'val' else 'val'}")  # fmt: skip
    if not 0 <= index < size:
        raise ConfigError(index_error(index, split, size))


def cross_attention_maps(
    data: Any, net: torch.nn.Module, *, split: str, count: int, out: Path, index: int = 0
) -> list[Path]:
    """Cross-attention maps (text queries over image patches) of `count` examples of `split` from example `index`,
    each named by its index in the split."""
    from .drawing.cross_attention import text_image_maps

    check_cross_split(data, split, count, index)
    loader = data.val_dataloader() if split == "val" else data.test_dataloader()
    chosen = range(index, min(index + count, len(loader.dataset)))
    if len(chosen) < count:
        log.warning("viz: --count %d from --index %d: the %s split ends at example %d; drew %d of the %d maps asked",
                    count, index, split, len(loader.dataset) - 1, len(chosen), count)  # fmt: skip
    batch = loader.collate_fn([loader.dataset[i] for i in chosen])
    texts = [data.datasets[split].texts[i] for i in chosen]
    return text_image_maps(net, batch, texts, out, class_names=data.class_names, count=len(chosen),
                           tokenizer=data.tokenizer, first=index)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo viz", description="Attention maps of a trained run for one input.")
    p.add_argument("run_dir", type=Path, help="a run directory written by attnzoo fit")
    p.add_argument("--input", type=Path, help="an input file (image); default: an example of the validation split")
    p.add_argument("--text", help="a text to draw (text runs; translation runs: a sentence whose alignment is drawn)")
    p.add_argument("--index", type=int, default=0, help="the example of --split to draw without --input/--text "
                   "(text-image runs: the first of the examples drawn as cross-attention maps)")  # fmt: skip
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("--out", type=Path, help="output directory (default: <run dir>/viz/<input name>)")
    p.add_argument("--residual", type=float, default=0.5, help="rollout: weight of the residual connection")
    p.add_argument("--head-fusion", default="mean", choices=("mean", "max", "min"), help="rollout: how heads combine")
    p.add_argument("--split", default="val", choices=("val", "test"), help="the split --index counts in")
    p.add_argument("--count", type=int, default=4, help="cross-attention maps: how many examples (text-image runs)")
    p.add_argument("overrides", nargs="*", help="data.* overrides: where the run's data is now, e.g. data.root=DIR")
    args = p.parse_intermixed_args(argv)
    other = [o for o in args.overrides if not o.startswith("data.") or "=" not in o]
    if other:
        p.error(f"{other[0]!r}: viz takes data.* overrides (key=value: where the run's data is now, data.root=DIR)")
    allow_imports(args.allow_imports)
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo viz: error: {err}", file=sys.stderr)
        return 2
    from .run import show_log

    show_log()
    try:
        written = visualize(
            args.run_dir,
            input_path=args.input,
            text=args.text,
            index=args.index,
            checkpoint=args.checkpoint,
            out=args.out,
            residual=args.residual,
            head_fusion=args.head_fusion,
            split=args.split,
            count=args.count,
            overrides=args.overrides,
        )
    except (ConfigError, ValueError) as err:
        print(f"attnzoo viz: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a read-only run directory (a shared copy), a full disk
        where = f" {err.filename}" if err.filename else ""
        print(
            f"attnzoo viz: error: could not write{where}: {err.strerror or err}; give --out DIR somewhere writable",
            file=sys.stderr,
        )
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
