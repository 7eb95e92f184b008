"""What a converter of pretrained weights gives: an attnzoo model's kind, options and state dict.

Each family module of `attnzoo.pretrained` (a Hugging Face or timm architecture, or attnzoo's own runs) offers
`matches(path) -> bool` and `convert(path) -> Converted`. `MODELS[c.model_kind](**c.options)` builds the network and
`load_state_dict(c.state_dict)` (strict) gives it the checkpoint's weights; with no attention override its outputs
equal the original library's. Reading a checkpoint never runs code: safetensors, or `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import torch

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class Converted(NamedTuple):
    """A pretrained checkpoint as attnzoo sees it."""

    model_kind: str  # a key of `attnzoo.models.MODELS`
    options: dict[str, Any]  # the model's constructor arguments (config `model:` keys)
    state_dict: dict[str, torch.Tensor]  # attnzoo parameter names -> tensors
    tokenizer: Path | None  # the checkpoint's `tokenizer.json`, when it has one (ids must match the weights)
    source: str  # what was read, for logs and the run summary ("bert (HF) /path/to/dir")


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """`config.json` of a Hugging Face model directory; ValueError naming the file when it is missing or broken."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model directory (no config.json)")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{str(file)!r}: not a readable JSON config ({err})") from None


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, or of the first of `WEIGHT_FILES` in a directory; data only, never code."""
    path = Path(path)
    if path.is_dir():
        found = [path / name for name in WEIGHT_FILES if (path / name).is_file()]
        if not found:
            raise ValueError(f"{str(path)!r} holds no weights file (expected one of {list(WEIGHT_FILES)})")
        path = found[0]
    if not path.is_file():
        raise ValueError(f"weights file {str(path)!r} does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (any unreadable file gets the same clear message)
        first = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(f"{str(path)!r} is not a readable checkpoint ({type(err).__name__}: {first})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{str(path)!r} holds no state dict of tensors")
    return state
