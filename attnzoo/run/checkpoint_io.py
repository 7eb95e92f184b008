"""Checkpoint files: written atomically, read safely (`weights_only`), checked against a model's shapes.

- `AtomicCheckpointIO`: checkpoints are written to a temporary file in the same directory, fsynced and moved over the
  old one with `os.replace`; a crash mid-write leaves the previous checkpoint intact.
- `RunCheckpoint`: Lightning's ModelCheckpoint, whose best score and paths survive a moved run directory.
- `read_checkpoint`: a checkpoint loaded without running code, or a ValueError saying why the file is not one.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..util.checks import WRITES, is_count, is_number, shown
from ..util.files import SHARED_MODE, compressed, unfinished

log = logging.getLogger("attnzoo")


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that never leaves a partly written checkpoint at the final path, and reads checkpoints
    as data only (`weights_only`, whatever the environment asks of torch.load: a checkpoint may come from anyone)."""

    def load_checkpoint(self, path: Any, *args: Any, weights_only: bool | None = None, **kwargs: Any) -> dict[str, Any]:
        return super().load_checkpoint(path, *args, weights_only=True, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        """Remove a replaced checkpoint file (a link: the link); never a folder, which Lightning's remover deletes
        recursively."""
        if get_filesystem(path).protocol not in ("file", ("file", "local")):
            return super().remove_checkpoint(path)
        path = Path(path)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            log.warning("checkpoints: %s is not a file, so it was left as it is", path)

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
            os.chmod(tmp, SHARED_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:  # make the rename itself durable
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def metric_value(trainer: Any, name: str) -> float | None:
    """The float value of a logged metric this step (`trainer.callback_metrics`), None when it was not logged."""
    value = trainer.callback_metrics.get(name)
    return None if value is None else float(value)


def tie_wins(tie: float | None, best_tie: float | None) -> bool:
    """Whether a validation whose monitored score ties the best one at its floor (BLEU 0) replaces it: by a lower
    tie-break value (val loss); the rule of both the best checkpoint and the summary's best epoch."""
    return tie is not None and (best_tie is None or tie < best_tie)


class RunCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint`, whose record (the best score, the best and last paths) survives a run directory
    that moved or was copied. Lightning keeps only `best_model_path` when the saved `dirpath` differs from its own:
    a resumed run then took any next validation as its best (overwriting best.ckpt with a worse model), and one
    resumed after it finished stopped on the missing best score. The saved paths inside the old directory are read
    as the same files in this one, and paths elsewhere are dropped."""

    def __init__(self, *args: Any, floor: float | None = None, tie_break: str = "val/loss", **kwargs: Any) -> None:
        """`floor`: the monitored value of a model that has learned nothing it measures yet (BLEU 0, before any
        4-gram matches); while the score stays there, the best checkpoint is the one of the lowest `tie_break`
        (val loss) rather than the first (the untrained epoch-0 weights, which a translation run whose BLEU never
        left 0 tested, translated and evaluated with)."""
        super().__init__(*args, **kwargs)
        self.floor, self.tie_break = floor, tie_break
        self.floor_tie: float | None = None  # the tie-break value of the best checkpoint while at the floor
        self._said = False

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"ModelCheckpoint{kwargs!r}"  # Lightning's own key: checkpoints of earlier runs keep loading

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # an every-n-steps save in a batch a validation follows (an epoch's last, or mid-epoch) is one Lightning
        # resumes from past that validation, never run (a run killed during it); last.ckpt follows the validation
        from .signals import validates_next

        if self._every_n_train_steps and (
            trainer.fit_loop.epoch_loop.batch_progress.is_last_batch or validates_next(trainer)
        ):
            return
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)

    def check_monitor_top_k(self, trainer: Any, current: torch.Tensor | None = None) -> bool:
        at_floor = self.floor is not None and current is not None and float(current) == self.floor
        if not at_floor or self.save_top_k != 1:
            return super().check_monitor_top_k(trainer, current)
        best = self.best_model_score
        if best is not None and self.best_k_models and float(best) != self.floor:
            return False  # a score off the floor is better than the floor
        tie = metric_value(trainer, self.tie_break)
        take = best is None or not self.best_k_models or tie_wins(tie, self.floor_tie)
        take = trainer.strategy.reduce_boolean_decision(take)  # every process decides alike
        if take:
            if best is not None and self.best_k_models and not self._said:
                self._said = True
                log.info("checkpoints: %s is still %g: best.ckpt follows the lowest %s (%.4g) until it moves",
                         self.monitor, self.floor, self.tie_break, tie)  # fmt: skip
            self.floor_tie = tie
        return take

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "floor_tie": self.floor_tie}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The saved record, its paths read as the checkpoint file of this callback's own name (best.ckpt, last.ckpt)
        in this run's `dirpath`. Any other path is not taken: Lightning deletes a best or top-k checkpoint it
        replaces, and a checkpoint from a stranger could name any file or folder (`local://~/Documents`, which fsspec
        deletes recursively; `important.ckpt`, a folder beside the run's checkpoints)."""

        inside = self._own_path
        best_k = {inside(k): v for k, v in (state_dict.get("best_k_models") or {}).items()}
        state_dict = {
            **state_dict,
            "dirpath": self.dirpath,
            "best_model_path": inside(state_dict.get("best_model_path", "")),
            "kth_best_model_path": inside(state_dict.get("kth_best_model_path", "")),
            "last_model_path": inside(state_dict.get("last_model_path", "")),
            "best_k_models": {k: v for k, v in best_k.items() if k},
        }
        super().load_state_dict(state_dict)
        self.floor_tie = state_dict.get("floor_tie")

    def _own_path(self, path: Any) -> str:
        """`path` as this callback's own file in this run (no version counter: one name), or "" for any other."""
        if not isinstance(path, str) or not path or "://" in path or self.dirpath is None:
            return ""
        name = Path(path).name
        return str(Path(self.dirpath) / name) if name == f"{self.filename}{self.FILE_EXTENSION}" else ""

    def saved_state_error(self, state: dict[str, Any]) -> str | None:
        """What in a saved state (`state_dict`) is not what attnzoo fit writes, or None: the scores are numbers (or
        None), and a best checkpoint of a monitored metric has its score (the summary reports it)."""
        for key in ("best_model_score", "best_model_path"):  # Lightning reads both
            if key not in state:
                return f"has no {key}, which {WRITES} holds"
        for key in ("best_model_score", "kth_value", "current_score", "floor_tie"):
            if state.get(key) is not None and not is_number(state[key]):
                return f"holds {key} {shown(state[key])}, where {WRITES} is None or a number"
        best_k = state.get("best_k_models")
        if best_k is not None and (not isinstance(best_k, dict) or not all(is_number(v) for v in best_k.values())):
            return f"holds best_k_models {shown(best_k)}, where {WRITES} is a dict of checkpoint paths to scores"
        if self.monitor is not None and state["best_model_score"] is None and self._own_path(state["best_model_path"]):
            return (
                f"names a best checkpoint ({state['best_model_path']!r}) without its score (best_model_score None), "
                f"where {WRITES} holds both"
            )
        return None


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """The Lightning checkpoint at `path` (tensors memory-mapped with `mmap`); ValueError saying why a file is
    not one (empty, not a PyTorch file, unreadable, no `state_dict` of parameter names to tensors), naming the file
    and, in a state_dict, the first key that is wrong."""
    path = Path(path)
    what = f"{str(path)!r} is not a checkpoint"
    try:
        why = unfinished(path) or compressed(path)
    except (OSError, zipfile.BadZipFile) as err:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    if why:
        raise ValueError(f"{what}: {why}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{what}: it is not a PyTorch checkpoint file (torch.save writes a zip archive)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 (a damaged archive fails in many ways; each gets this message)
        found = re.search(r"GLOBAL ([\w.]+)", str(err)) if isinstance(err, pickle.UnpicklingError) else None
        if found:  # torch's weights-only unpickler met a global: an object to build, not tensors and values
            raise ValueError(
                f"{what} attnzoo loads: it holds Python objects besides tensors and plain values ({found.group(1)}), "
                "and unpickling them could run code of the file's own choosing, so it was refused (nothing of it "
                "was run). attnzoo's own checkpoints hold none; if you made this file yourself, save its state_dict"
            ) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"{what} that can be read ({type(err).__name__}: {first[:300]})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("state_dict"), dict):
        raise ValueError(f"{what} written by attnzoo fit (it holds no state_dict)")
    for key, value in obj["state_dict"].items():  # torch's loader and the shape check read names and tensors only
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            why = "is not a parameter name" if not isinstance(key, str) else f"holds a {type(value).__name__}"
            raise ValueError(
                f"{what} written by attnzoo fit: its state_dict maps parameter names to tensors, but its key {key!r} "
                f"{why}"
            )
    return obj


def check_checkpoint_shapes(path: str | Path, module: torch.nn.Module, checkpoint: dict[str, Any] | None = None) -> int:
    """Raise ValueError naming every parameter whose shape differs between `module` and the checkpoint at `path`
    (`checkpoint`: as `read_checkpoint` read it already), and the keys only one of them has (a checkpoint of another
    model or model size); returns its global step."""
    checkpoint = read_checkpoint(path, mmap=True) if checkpoint is None else checkpoint
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
    step = checkpoint.get("global_step", 0)
    if not is_count(step):
        raise ValueError(f"checkpoint {str(path)!r}: its global_step is {shown(step)}, where {WRITES} is a count")
    return step
