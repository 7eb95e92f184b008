"""Pretrained weights: Hugging Face and timm checkpoints on disk, and attnzoo's own runs (`converted.Converted`).

`convert(path)` asks each family module of `FAMILIES`, in order, whether it reads `path` (`matches(path)`) and
converts with the first that does; `load(path, **overrides)` builds the attnzoo network with the checkpoint's
weights. Family modules are imported by name when first needed, so one that is missing or broken leaves the others
working. Nothing is downloaded: a path that does not exist, and looks like a hub name, gets an error saying to
download it first.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from ..util.files import runs_in
from ..util.names import suggest
from .converted import Converted, other_sizes, read_hf_config, read_weights

log = logging.getLogger("attnzoo")

# family modules of attnzoo.pretrained, asked in this order (attnzoo's own runs first: a run directory is no HF dir)
FAMILIES = ("run_dir", "hf_bert", "hf_gpt2", "hf_bart", "hf_ast", "vit")
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")  # weights files a family may read on their own
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # "bert-base-uncased", "google/vit-base-patch16-224"


def families() -> dict[str, ModuleType]:
    """The family modules that import here ({name: module}); one that does not is logged and left out."""
    found = {}
    for name in FAMILIES:
        try:
            found[name] = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":  # the module exists but needs something missing
                log.warning("attnzoo.pretrained.%s is unavailable: %s", name, err)
        except ImportError as err:
            log.warning("attnzoo.pretrained.%s is unavailable: %s", name, err)
    return found


def heads_stated(path: str | Path, timm_name: str | None = None) -> bool:
    """Whether the checkpoint at `path` states its head count (an attnzoo run directory or .ckpt file through its
    config, a Hugging Face folder's config.json, a timm file with its `timm_name`); else the head count is a guess
    from the width, and another one may be asked for."""
    from . import run_dir

    return run_dir.matches(path) or Path(str(path)).is_dir() or timm_name is not None


def convert(path: str | Path, *, timm_name: str | None = None, tokenizer: str | Path | None = None) -> Converted:
    """The checkpoint at `path` as attnzoo sees it; ValueError naming `path` and what was expected there.
    `timm_name` names the timm architecture of a timm ViT file whose tensors do not tell it (its head count);
    `tokenizer` the tokenizer file (tokenizer.json, vocab.txt, vocab.json) of a BERT/RoBERTa directory that has none
    (its [CLS] id is read from it)."""
    text = str(path)
    path = Path(path).expanduser()
    if not path.exists():
        here = "" if path.is_absolute() else f" (relative to {Path.cwd()})"  # a project's models/ folder, elsewhere
        if HUB_NAME.match(text) and not text.endswith((".ckpt", ".pt", ".pth", ".bin", ".safetensors")):
            raise ValueError(
                f"{text!r} is not a file or directory here{here}. attnzoo downloads nothing at run time: if it is a "
                f"Hugging Face hub name, download it first (on a machine with network: `hf download {text} "
                "--local-dir <dir>`, then copy <dir> here) and give the directory"
            )
        raise ValueError(f"{text!r} does not exist{here}")
    found = families()
    for name, module in found.items():
        if module.matches(path):
            if timm_name is not None and name != "vit":
                raise ValueError(f"timm_name={timm_name!r} is for timm ViT files, but {text!r} is read as {name}")
            if timm_name is not None:
                return module.convert(path, timm_name=timm_name)
            if tokenizer is not None and "tokenizer" in inspect.signature(module.convert).parameters:
                return module.convert(path, tokenizer=tokenizer)
            return module.convert(path)
    if path.is_file() and path.suffix in WEIGHT_SUFFIXES:
        read_weights(path)  # a damaged or foreign file is named as unreadable, with the reason
    hint = runs_in(path)  # a run.dir/run.name folder: its timestamped runs
    if path.is_file() and any(module.matches(path.parent) for module in found.values()):
        hint = f"; it is a file of the model folder {str(path.parent)!r}: give the folder (its config.json, tokenizer)"
    said = ""
    if (path / "config.json").is_file():
        config = read_hf_config(path)  # a broken config.json is named as such, with the reason
        kind = config.get("model_type", config.get("architecture")) if isinstance(config, dict) else None
        said = f" (its config.json names {kind!r})" if kind else " (its config.json names no model_type)"
    raise ValueError(
        f"{text!r} is no checkpoint attnzoo can read{said}: expected "
        f"{'; '.join(getattr(m, 'READS', name) for name, m in found.items())} (a Hugging Face folder holds config.json "
        f"and the weights){hint}"
    )


def load(
    path: str | Path, *, timm_name: str | None = None, tokenizer: str | Path | None = None, **overrides: Any
) -> nn.Module:
    """The attnzoo network of the checkpoint at `path`, with its weights, in training mode as any new module (its
    dropout on: `.eval()` before inference).

    Args:
        timm_name: the timm architecture of a timm ViT file (see `convert`).
        tokenizer: the tokenizer file of a BERT/RoBERTa directory without one (see `convert`).
        overrides: model options replacing the checkpoint's (`num_classes` for a new head, `attention` parts, ...);
            tensors that no longer fit start new when they are the head, and raise otherwise.
    """
    from ..models import MODELS
    from .transfer import source_kind, transfer

    converted = convert(path, timm_name=timm_name, tokenizer=tokenizer)
    if not converted.model_kind and converted.source.startswith("attnzoo run"):  # a .ckpt outside its run directory
        raise ValueError(
            f"{path}: no config.yaml beside it to say which model its tensors are: give the run directory, or keep "
            "the file at <run>/checkpoints/ (the run's config.yaml gives the model's kind and options, its "
            "tokenizer.json the token ids)"
        )
    if converted.model_kind not in MODELS:
        raise ValueError(f"{converted.source}: no attnzoo model kind recorded (got {converted.model_kind!r})")
    heads = converted.options.get("num_heads")
    if heads is None:  # a run's config may leave it to the model's default, which it then trained with
        heads = getattr(inspect.signature(MODELS[converted.model_kind]).parameters.get("num_heads"), "default", None)
    stated = isinstance(heads, int) and heads_stated(path, timm_name)
    if stated and "num_heads" in overrides and overrides["num_heads"] != heads:  # as fit's model.init_from refuses
        raise ValueError(
            f"num_heads={overrides['num_heads']}, but {converted.source} has {heads} heads: its tensors would load "
            "split into other heads and compute another function. Leave num_heads out (key/value heads: "
            "attention={'num_kv_heads': ...})"
        )
    sized = other_sizes(converted.options, overrides)
    if sized:  # as fit's model.init_from refuses, before the network is built
        key = sized[0]
        deeper = " (fewer blocks load its first ones)" if key.endswith("depth") else ""
        raise ValueError(
            f"{key}={overrides[key]!r}, but {converted.source} has {key} {converted.options[key]!r}: its tensors would "
            f"not fit a network of that size. The architecture is the checkpoint's: leave {key} out{deeper}"
        )
    theirs_len, mine_len = converted.options.get("max_len"), overrides.get("max_len")
    learned = converted.options.get("position") == "learned" and overrides.get("position", "learned") == "learned"
    if learned and isinstance(theirs_len, int) and isinstance(mine_len, int) and mine_len > theirs_len:
        raise ValueError(  # the table's shape error named a tensor, not the option
            f"max_len={mine_len}, but {converted.source} has learned positions for {theirs_len} tokens: positions past "
            f"{theirs_len} have no weights. Give max_len <= {theirs_len} (a shorter table keeps its first rows), or "
            "cut the texts"
        )
    # None for an option the checkpoint sets as a mapping (attention=None) keeps the checkpoint's, as {} does
    overrides = {k: v for k, v in overrides.items() if v is not None or not isinstance(converted.options.get(k), dict)}
    options = {**converted.options, **overrides}
    for key in [k for k in overrides if k.endswith("depth") and isinstance(converted.options.get(k), int)]:
        if isinstance(overrides[key], int) and overrides[key] < converted.options[key]:  # as fit's model.init_from
            log.warning("%s=%d, and %s has %d blocks: the first %d are loaded, the others dropped", key, overrides[key],
                        converted.source, converted.options[key], overrides[key])  # fmt: skip
    for key, theirs in converted.options.items():  # attention, cross_attention: an override's entries replace theirs
        if key.endswith("attention") and isinstance(theirs, dict) and isinstance(overrides.get(key), dict):
            options[key] = {**theirs, **overrides[key]}
    if converted.model_kind == "seq2seq" and "decoder_attention" not in converted.options:
        from ..models.seq2seq import decoder_layout

        decoder = decoder_layout(converted.options, overrides)  # the checkpoint's biases keep their place
        if decoder is not None:
            options["decoder_attention"] = decoder
    builder = MODELS[converted.model_kind]
    takes = inspect.signature(builder).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in takes.values()):
        unknown = sorted(set(options) - set(takes))
        if unknown:  # a run's config.yaml of another attnzoo version, or a misspelled override
            given = [k for k in unknown if k in overrides]
            saved = [k for k in unknown if k not in overrides]
            whence = [f"given to load: {given}"] * bool(given) + [f"in its config: {saved}"] * bool(saved)
            raise ValueError(
                f"{converted.source}: model option(s) {unknown} ({'; '.join(whence)}) are not options of model kind "
                f"{converted.model_kind!r}; valid: {sorted(takes)}"
                + "".join(suggest(k, list(takes)) for k in unknown[:1])
            )
    missing = [
        name
        for name, p in inspect.signature(builder).parameters.items()
        if p.default is p.empty and p.kind is not p.VAR_KEYWORD and name not in options
    ]
    if missing:  # a BERT folder without a classifier: the head's size is the caller's
        shown = ", ".join(f"{name}=..." for name in missing)
        raise ValueError(
            f"{converted.source}: the checkpoint does not give {missing} (it has no head of its own); pass "
            f"{'it' if len(missing) == 1 else 'them'}: load(path, {shown}) (a new head)"
        )
    net = builder(**options)
    done = transfer(
        net,
        converted.state_dict,
        source=converted.source,
        source_kind=source_kind(converted.options),
        options=converted.options,
        target=options,
    )
    log.info("loaded %s: %s", converted.source, done.describe())
    return net


__all__ = ["FAMILIES", "Converted", "convert", "families", "heads_stated", "load"]
