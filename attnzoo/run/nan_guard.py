"""`FiniteLoss`: a NaN/inf training loss stops training at its step, before the backward pass and any checkpoint,
with `NonFiniteLossError` naming the step, the batch and what to try."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch


class NonFiniteLossError(RuntimeError):
    """A training loss was NaN or infinite."""


class FiniteLoss(L.Callback):
    """Raise `NonFiniteLossError` before the backward pass of a NaN/inf loss."""

    def __init__(self) -> None:
        self._batch: Any = None
        self._index = -1

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, i: int) -> None:
        self._batch, self._index = batch, i

    def on_before_backward(self, trainer: L.Trainer, module: L.LightningModule, loss: torch.Tensor) -> None:
        if torch.isfinite(loss).all():
            return
        raise NonFiniteLossError(
            f"non-finite training loss {loss.item()} at global step {trainer.global_step} "
            f"(epoch {trainer.current_epoch}, batch {self._index}: {describe_batch(self._batch)}); "
            f"training stopped, best/last checkpoints were not overwritten. Try: a lower learning rate "
            f"(task.optimizer.lr), bf16 instead of fp16 (trainer.precision=bf16-mixed), gradient clipping "
            f"(trainer.gradient_clip_val=1.0), or check this batch's inputs for NaN/inf."
        )


def describe_batch(batch: Any) -> str:
    """`key: shape dtype [min, max] (n non-finite)` for each tensor of a batch dict."""
    if not isinstance(batch, dict):
        return type(batch).__name__
    parts = []
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor):
            continue
        text = f"{key} {list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
        if value.is_floating_point() and value.numel():
            bad = int((~torch.isfinite(value)).sum())
            text += f" [{value.min().item():.3g}, {value.max().item():.3g}]" + (f" ({bad} non-finite)" if bad else "")
        parts.append(text)
    return ", ".join(parts)
