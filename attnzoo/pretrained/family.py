"""What the family converters share: a Hugging Face directory's model type and tokenizer, checkpoint tensors checked
against the shapes the config implies, and a converted state dict checked against the model it is meant for."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..util.files import read_json_object
from .converted import WEIGHT_FILES

log = logging.getLogger("attnzoo")

Tensor = torch.Tensor


def hf_model_type(path: str | Path) -> str | None:
    """`model_type` of a Hugging Face model directory's config.json; None for anything else, a model_type that is no
    name included (never raises)."""
    file = Path(path) / "config.json"
    try:  # unreadable, no JSON object, or nested too deep for the parser
        config = read_json_object(file) if file.is_file() else {}
    except ValueError:
        return None
    kind = config.get("model_type")
    return kind if isinstance(kind, str) else None


def tokenizer_file(path: str | Path) -> Path | None:
    """The directory's tokenizer file (`tokenizer.json`, else `vocab.txt` or `vocab.json` + `merges.txt`), when it
    has one; a warning when not (a run started from it is refused then, `attnzoo.run.start`, unless data.tokenizer
    names the file)."""
    from ..data.tokenizers.vocab_files import folder_tokenizer

    file = folder_tokenizer(path)
    if file is not None:
        return file
    log.warning(
        "%s has no tokenizer.json, vocab.txt or vocab.json + merges.txt: text tokenized by another tokenizer gets ids "
        "the embedding was not trained on (copy it from where the model was downloaded)", path
    )  # fmt: skip
    return None


def weights_name(path: str | Path) -> str:
    """The weights file `read_weights` reads in a model directory, for messages."""
    path = Path(path)
    found = [path / name for name in WEIGHT_FILES if (path / name).is_file()]
    return str(found[0] if found else path)


def config_value(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """`config[key]` (or `default` when absent or null)."""
    value = config.get(key)
    return default if value is None else value


def refuse(path: str | Path, key: str, value: Any, why: str) -> ValueError:
    """The error for a config.json value a converter cannot reproduce exactly."""
    return ValueError(f"{str(Path(path) / 'config.json')!r}: {key}={value!r} is not supported ({why})")


def take(
    state: dict[str, Tensor], key: str, shape: tuple[int, ...], file: str, prefixes: tuple[str, ...] = ("",)
) -> Tensor:
    """Pop `key` (under the first of `prefixes` that holds it) from a checkpoint, checking its shape; ValueError
    naming the file and the tensor when it is missing or has another shape than config.json implies."""
    for prefix in prefixes:
        if prefix + key in state:
            tensor = state.pop(prefix + key)
            if tuple(tensor.shape) != tuple(shape):
                raise ValueError(
                    f"{file}: tensor {prefix + key!r} has shape {list(tensor.shape)}, but config.json implies "
                    f"{list(shape)} (a checkpoint of another architecture or size?)"
                )
            return tensor
    raise ValueError(f"{file}: tensor {prefixes[0] + key!r} is missing (a checkpoint of another architecture?)")


def check_consumed(state: Mapping[str, Tensor], file: str, ignored: tuple[str, ...] = ()) -> None:
    """ValueError naming the first tensor of a checkpoint that no attnzoo parameter took (ignoring those whose names
    end in one of `ignored`: buffers such as GPT-2's causal mask, or heads the attnzoo model has not)."""
    left = sorted(k for k in state if not k.endswith(ignored))
    if left:
        raise ValueError(f"{file}: unexpected tensor {left[0]!r} ({len(left)} in all; another architecture?)")


def check_fits(model_kind: str, options: Mapping[str, Any], state: Mapping[str, Tensor], file: str) -> None:
    """ValueError naming the file and the first tensor when `state` does not load strictly into
    `MODELS[model_kind](**options)` (built on the meta device: no weights are allocated)."""
    from ..models import MODELS

    with torch.device("meta"):
        own = {k: tuple(v.shape) for k, v in MODELS[model_kind](**options).state_dict().items()}
    missing = sorted(set(own) - set(state))
    if missing:
        raise ValueError(f"{file}: no tensor for {missing[0]!r} ({len(missing)} missing; another architecture?)")
    for key in sorted(state):
        if key not in own:
            raise ValueError(f"{file}: unexpected tensor {key!r} (another architecture?)")
        if tuple(state[key].shape) != own[key]:
            raise ValueError(
                f"{file}: tensor {key!r} has shape {list(state[key].shape)}, the model built from the checkpoint's "
                f"settings expects {list(own[key])}"
            )


# attnzoo block parameter -> the layer's Hugging Face names in ViT-style encoders (ViT, AST): as checkpoints on disk
# have them (under `encoder.layer.N.`), and as transformers 5 names them in memory (under `layers.N.`)
HF_VIT_LAYER = {
    "norm1": ("layernorm_before", "layernorm_before"),
    "q": ("attention.attention.query", "attention.q_proj"),
    "k": ("attention.attention.key", "attention.k_proj"),
    "v": ("attention.attention.value", "attention.v_proj"),
    "attn.proj": ("attention.output.dense", "attention.o_proj"),
    "norm2": ("layernorm_after", "layernorm_after"),
    "mlp.fc1": ("intermediate.dense", "mlp.fc1"),
    "mlp.fc2": ("output.dense", "mlp.fc2"),
}
_QKV = ("q", "k", "v")


def hf_vit_blocks(
    state: dict[str, Tensor], *, depth: int, dim: int, inner: int, qkv_bias: bool, file: str, prefixes: tuple[str, ...]
) -> dict[str, Tensor]:
    """Pop the encoder layers of a Hugging Face ViT-style checkpoint (ViT, AST) and return them as attnzoo's
    `encoder.blocks.N.*`, the separate q, k, v projections fused into `attn.qkv` ([q | k | v], heads contiguous)."""
    c = dim
    legacy = any("encoder.layer." in k for k in state)
    shapes = {"norm1": (c,), "q": (c, c), "k": (c, c), "v": (c, c), "attn.proj": (c, c), "norm2": (c,)}
    shapes |= {"mlp.fc1": (inner, c), "mlp.fc2": (c, inner)}
    out: dict[str, Tensor] = {}
    for i in range(depth):
        names = {
            k: f"encoder.layer.{i}.{old}" if legacy else f"layers.{i}.{new}" for k, (old, new) in HF_VIT_LAYER.items()
        }
        block, qkv = f"encoder.blocks.{i}", {}
        for name, shape in shapes.items():
            weight = take(state, f"{names[name]}.weight", shape, file, prefixes)
            has_bias = qkv_bias or name not in _QKV
            bias = take(state, f"{names[name]}.bias", shape[:1], file, prefixes) if has_bias else None
            if name in _QKV:
                qkv[name] = (weight, bias)
            else:
                out[f"{block}.{name}.weight"], out[f"{block}.{name}.bias"] = weight, bias
        out[f"{block}.attn.qkv.weight"] = torch.cat([qkv[n][0] for n in _QKV])  # [3C, C]
        if qkv_bias:
            out[f"{block}.attn.qkv.bias"] = torch.cat([qkv[n][1] for n in _QKV])  # [3C]
    return out
