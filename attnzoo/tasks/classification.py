"""`ClassificationTask`: the LightningModule of every classification recipe; the network is injected.

Batches are dicts; the net is called as `net(**inputs)` with inputs = batch without "label".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from torch import nn

from ..attention.specs import build
from .objectives import OBJECTIVES, Objective
from .optim import SCHEDULES, configure_optimizers, optimizer_spec
from .preflight import check_trainable_backends

Tensor = torch.Tensor


class ClassificationTask(L.LightningModule):
    """Loss and metrics from `objective`, optimizer and schedule from config; logs `{split}/{metric}`.

    Args:
        net: the model, called as `net(**inputs)` -> logits [B, K].
        num_classes: K (from the data).
        objective: `{kind: multiclass, label_smoothing: ...}` (see `attnzoo.tasks.objectives.OBJECTIVES`).
        optimizer: `{kind: adamw, lr: ..., weight_decay: ..., ...}`, any timm optimizer and its options; None
            (the key left out of the config) is AdamW with lr 1e-3 and weight decay 0.05.
        scheduler: `{kind: cosine | constant, warmup: ...}` stepped every optimizer step, or None.
        multilabel: whether the data's labels are label sets (from the data); must match the objective.
    """

    def __init__(
        self,
        *,
        net: nn.Module,
        num_classes: int,
        objective: Mapping[str, Any] | str = "multiclass",
        optimizer: Mapping[str, Any] | None = None,
        scheduler: Mapping[str, Any] | str | None = "cosine",
        multilabel: bool = False,
    ) -> None:
        super().__init__()
        self.net = net
        built: Objective = build(objective, OBJECTIVES, "task.objective", num_classes=num_classes)
        if built.multilabel != multilabel:
            raise ValueError(
                f"task.objective: {objective!r} is {'multi-label' if built.multilabel else 'single-label'}, but the "
                f"data's labels are {'multi-label' if multilabel else 'single-label'}; use objective "
                f"{'multilabel' if multilabel else 'multiclass'}"
            )
        self.metric_target = built.metric_target
        self.loss_fn = built.loss
        self.monitor, self.monitor_mode = built.monitor, built.mode
        self.train_metrics = built.metrics.clone(prefix="train/")
        self.val_metrics = built.metrics.clone(prefix="val/")
        self.test_metrics = built.metrics.clone(prefix="test/")
        self.optimizer_spec = optimizer_spec(optimizer, {"kind": "adamw", "lr": 1e-3, "weight_decay": 0.05})
        self.schedule = build(scheduler, SCHEDULES, "task.scheduler")

    def setup(self, stage: str) -> None:
        if stage == "fit":  # before the first step: a backend the device cannot train
            check_trainable_backends(self.net, self.trainer.strategy.root_device.type)

    def logged_metrics(self) -> list[str]:
        """The names this task logs during fit (what `run.monitor` may name)."""
        return [f"train/{self.monitor}", "train/loss", *self.val_metrics.keys(), "val/loss"]

    def forward(self, **inputs: Tensor) -> Tensor:
        return self.net(**inputs)

    @staticmethod
    def net_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The keyword arguments of `net` in a batch: everything but the label."""
        return {k: v for k, v in batch.items() if k != "label"}

    def _step(self, batch: dict[str, Tensor], split: str) -> Tensor:
        logits = self.net(**self.net_inputs(batch))
        loss = self.loss_fn(logits, batch["label"])
        n = batch["label"].shape[0]
        metrics = getattr(self, f"{split}_metrics")
        if split == "train":  # only the monitored metric per step; the full set would cost every step
            metric = metrics[self.monitor]
            metric(logits.detach(), self.metric_target(batch["label"]))
            self.log(f"train/{self.monitor}", metric, on_step=True, on_epoch=False, batch_size=n)
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, sync_dist=True, batch_size=n)
        else:
            metrics.update(logits, self.metric_target(batch["label"]))
            self.log_dict(metrics, on_step=False, on_epoch=True, batch_size=n, prog_bar=split == "val")
            self.log(f"{split}/loss", loss, on_step=False, on_epoch=True, sync_dist=True, batch_size=n)
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> Any:
        total = int(self.trainer.estimated_stepping_batches) if self.schedule is not None else 0
        return configure_optimizers(self.net, self.optimizer_spec, self.schedule, total)
