"""Checkpoint files: written atomically, read safely (`weights_only`), checked against a model's shapes.

- `AtomicCheckpointIO`: checkpoints are written to a temporary file in the same directory, fsynced and moved over the
  old one with `os.replace`; a crash mid-write leaves the previous checkpoint intact.
- `read_checkpoint`: a checkpoint loaded without running code, or a ValueError saying why the file is not one.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that never leaves a partly written checkpoint at the final path, and reads checkpoints
    as data only (`weights_only`, whatever the environment asks of torch.load: a checkpoint may come from anyone)."""

    def load_checkpoint(self, path: Any, *args: Any, weights_only: bool | None = None, **kwargs: Any) -> dict[str, Any]:
        return super().load_checkpoint(path, *args, weights_only=True, **kwargs)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO: storage_options are not supported, got {storage_options!r}")
        if get_filesystem(path).protocol not in ("file", ("file", "local")):  # remote stores: Lightning's writer
            return super().save_checkpoint(checkpoint, path)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:  # make the rename itself durable
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """The Lightning checkpoint at `path` (tensors memory-mapped with `mmap`); ValueError saying why a file is
    not one (empty, not a PyTorch file, unreadable, no `state_dict`), naming the file."""
    path = Path(path)
    what = f"{str(path)!r} is not a checkpoint"
    try:
        size = path.stat().st_size
    except OSError as err:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: {err.strerror or err}") from None
    if size == 0:
        raise ValueError(f"{what}: the file is empty (a copy or a save that did not finish?)")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{what}: it is not a PyTorch checkpoint file (torch.save writes a zip archive)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 (a damaged archive fails in many ways; each gets this message)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"{what} that can be read ({type(err).__name__}: {first[:300]})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("state_dict"), dict):
        raise ValueError(f"{what} written by attnzoo fit (it holds no state_dict)")
    return obj


def check_checkpoint_shapes(path: str | Path, module: torch.nn.Module) -> int:
    """Raise ValueError naming every parameter whose shape differs between `module` and the checkpoint at `path`,
    and the keys only one of them has (a checkpoint of another model or model size); returns its global step."""
    checkpoint = read_checkpoint(path, mmap=True)
    saved = checkpoint["state_dict"]
    own = module.state_dict()
    shapes = [f"{k} {list(saved[k].shape)} in the checkpoint vs {list(v.shape)} here" for k, v in own.items()
              if k in saved and saved[k].shape != v.shape]  # fmt: skip
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if shapes or missing or unexpected:
        parts = [f"shape mismatch: {'; '.join(shapes[:8])}" + (" ..." if len(shapes) > 8 else "")] if shapes else []
        parts += [f"missing from the checkpoint: {missing[:8]}"] if missing else []
        parts += [f"not in this model: {unexpected[:8]}"] if unexpected else []
        raise ValueError(
            f"checkpoint {str(path)!r} is from a model of another shape ({len(shapes)} mismatched, {len(missing)} "
            f"missing, {len(unexpected)} unexpected keys): {' | '.join(parts)}. Resume with the run's own config.yaml."
        )
    return int(checkpoint.get("global_step", 0))
