"""What a converter of pretrained weights gives: an attnzoo model's kind, options and state dict.

Each family module of `attnzoo.pretrained` (a Hugging Face or timm architecture, or attnzoo's own runs) offers
`matches(path) -> bool` and `convert(path) -> Converted`. `MODELS[c.model_kind](**c.options)` builds the network and
`load_state_dict(c.state_dict)` (strict) gives it the checkpoint's weights; with no attention override its outputs
equal the original library's. Reading a checkpoint never runs code: safetensors, or `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..util.files import compressed, read_json_object, unfinished

# a Hugging Face directory's weights, one file or an index of shards (`save_pretrained(max_shard_size=...)`)
WRAPPERS = ("state_dict", "model")  # keys a checkpoint file may hold its tensors under
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# the options that give a checkpoint's tensors their shapes: another value (and more blocks than its `*depth`) builds a
# network its tensors do not fit, so a start takes them from the checkpoint (`attnzoo.run.start`, `load`)
SIZES = ("dim", "embed_dim", "mlp_ratio", "token_types", "patch_size")


def other_sizes(theirs: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """The keys of `mine` that give a network the tensors of `theirs` (a checkpoint's options) do not fit: another
    value of a `SIZES` key, or a `*depth` above the checkpoint's (fewer blocks load its first ones)."""
    keys = []
    for key, value in mine.items():
        if key not in theirs or value == theirs[key]:
            continue
        ints = isinstance(value, int) and isinstance(theirs[key], int)
        deeper = key.endswith("depth") and ints and value > theirs[key]
        if key in SIZES or deeper:
            keys.append(key)
    return keys


class Converted(NamedTuple):
    """A pretrained checkpoint as attnzoo sees it."""

    model_kind: str  # a key of `attnzoo.models.MODELS`
    options: dict[str, Any]  # the model's constructor arguments (config `model:` keys)
    state_dict: dict[str, torch.Tensor]  # attnzoo parameter names -> tensors
    tokenizer: Path | None  # the checkpoint's `tokenizer.json`, when it has one (ids must match the weights)
    source: str  # what was read, for logs and the run summary ("bert (HF) /path/to/dir")
    # data options the weights were trained with that the data cannot tell ({"mean": [...], "std": [...]}: a ViT's
    # pixel normalization, from its preprocessor_config.json); they fill the keys a config leaves unset
    data: dict[str, Any] = {}  # noqa: RUF012 (a NamedTuple's default, never changed in place)
    # the checkpoint's tensors (their names there) the converter left out: no counterpart in the attnzoo model (BERT's
    # pretraining heads, ViTModel's pooler); reported with those the transfer drops
    dropped: tuple[str, ...] = ()


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """`config.json` of a Hugging Face model directory; ValueError naming the file when it is missing, broken or no
    JSON object."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model directory (no config.json)")
    return _json_config(file)


def read_preprocessor_config(path: str | Path) -> dict[str, Any] | None:
    """A Hugging Face directory's `preprocessor_config.json` (its feature extractor or image processor), None when it
    has none; ValueError naming the file when it cannot be read as a JSON object."""
    file = Path(path) / "preprocessor_config.json"
    return _json_config(file) if file.is_file() else None


def _json_config(file: Path) -> dict[str, Any]:
    try:
        return read_json_object(file)
    except ValueError as err:
        raise ValueError(f"{str(file)!r}: {err}") from None


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, or of the first of `WEIGHT_FILES` in a directory (an index: of every shard it
    names); data only, never code."""
    path = Path(path)
    if path.is_dir():
        found = [path / name for name in WEIGHT_FILES if (path / name).is_file()]
        if not found:
            raise ValueError(f"{str(path)!r} holds no weights file (expected one of {list(WEIGHT_FILES)})")
        path = found[0]
    if not path.is_file():
        raise ValueError(f"weights file {str(path)!r} does not exist")
    if path.name.endswith(".index.json"):
        return _read_shards(path)
    try:
        why = unfinished(path) or compressed(path)
    except (OSError, zipfile.BadZipFile) as err:  # a file without read permission, a broken archive
        raise ValueError(f"{str(path)!r} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    if why:
        raise ValueError(f"{str(path)!r} is not a readable checkpoint: {why}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (any unreadable file gets the same clear message)
        refused = re.search(r"GLOBAL ([\w.]+)", str(err))  # weights_only met an object (torch words it variously)
        if isinstance(err, pickle.UnpicklingError) and refused:
            raise ValueError(
                f"{str(path)!r} holds pickled objects other than tensors ({refused.group(1)}: a whole model saved "
                "with torch.save(model), or a training checkpoint's arguments or optimizer), which attnzoo does not "
                "load: reading them could run code. Save the weights alone (model.state_dict(), or the checkpoint's "
                "'state_dict' / 'model' entry, with torch.save or safetensors) and give that file"
            ) from None
        first = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(f"{str(path)!r} is not a readable checkpoint ({type(err).__name__}: {first})") from None
    for key in WRAPPERS:  # a training checkpoint, or DeiT's {"model": ...}
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        held = f"its keys: {sorted(map(str, state))[:8]}" if isinstance(state, dict) else f"a {type(state).__name__}"
        raise ValueError(
            f"{str(path)!r} holds no state dict of tensors ({held}); read: a mapping of names to tensors, or one "
            f"under {' or '.join(map(repr, WRAPPERS))}"
        )
    return state


def _read_shards(index: Path) -> dict[str, torch.Tensor]:
    """The tensors of the shards a Hugging Face weights index names (`weight_map`: tensor -> shard file), each shard
    a file beside the index; ValueError naming the index when it is broken, names a file elsewhere, or a shard lacks
    a tensor it maps there."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{str(index)!r}: not a readable weights index (a JSON 'weight_map'; {err!r})") from None
    if not shards:
        raise ValueError(f"{str(index)!r}: its weight_map names no tensor")
    state: dict[str, torch.Tensor] = {}
    for name in shards:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{str(index)!r} names the shard {name!r}; shards are files beside the index")
        if not name.endswith((".safetensors", ".bin")):
            raise ValueError(f"{str(index)!r} names the shard {name!r}, not a .safetensors or .bin file")
        if not (index.parent / name).is_file():
            raise ValueError(f"{str(index)!r} names the shard {name!r}, which is not a file beside it")
        state.update(read_weights(index.parent / name))
    absent = [key for key in weight_map if key not in state]
    if absent:
        raise ValueError(
            f"{str(index)!r} maps {absent[0]!r} to {weight_map[absent[0]]!r}, which holds no such tensor "
            f"({len(absent)} mapped tensors missing)"
        )
    return state
