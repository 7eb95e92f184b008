"""`FiniteLoss`: a NaN/inf training loss stops training at its step, before the backward pass and any checkpoint,
with `NonFiniteLossError` naming the step, the batch and what to try."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

TRY = (
    "Try: a lower learning rate (task.optimizer.lr), bf16 instead of fp16 (trainer.precision=bf16-mixed), gradient "
    "clipping (trainer.gradient_clip_val=1.0), or check this batch's inputs for NaN/inf."
)


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
        finite = bool(torch.isfinite(loss).all())
        # every process stops at this step when one loss is non-finite (the others died in the gradient all-reduce
        # otherwise, and process 0 recorded that error, not this one): the highest such process, numbered from 1
        flag = torch.tensor([0 if finite else trainer.global_rank + 1], device=loss.device)
        where = int(trainer.strategy.reduce(flag, reduce_op="max").item()) if trainer.world_size > 1 else int(flag)
        if not where:
            return
        if finite:
            raise NonFiniteLossError(
                f"non-finite training loss in process {where - 1} at global step {trainer.global_step} (epoch "
                f"{trainer.current_epoch}; its log names its batch); training stopped in every process, best/last "
                f"checkpoints were not overwritten. {TRY}"
            )
        raise NonFiniteLossError(
            f"non-finite training loss {loss.item()} at global step {trainer.global_step} "
            f"(epoch {trainer.current_epoch}, batch {self._index}: {describe_batch(self._batch)}); "
            f"training stopped, best/last checkpoints were not overwritten. {TRY}"
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
