"""Objectives: the loss and the metrics of a task, built in one place.

An objective is built from `task.objective` (`{kind: multiclass, label_smoothing: 0.1}`) with the data's
context (`num_classes`). `OBJECTIVES` maps config short names to builders; a new kind (e.g. multi-label
BCE + mAP) is one builder here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassF1Score,
    MultilabelAveragePrecision,
    MultilabelF1Score,
)


@dataclass
class Objective:
    """`loss(logits, labels)` -> scalar; `metrics` are updated with (logits, labels) for every split.

    `monitor` is the metric (without split prefix) that best-checkpoint selection follows by default,
    with `mode` "max" or "min".
    """

    loss: nn.Module
    metrics: MetricCollection
    monitor: str
    mode: str = "max"
    multilabel: bool = False
    metric_target: Callable[[torch.Tensor], torch.Tensor] = lambda labels: labels
    """labels as the metrics take them (e.g. mixup's soft labels -> class indices)."""


def multiclass(*, num_classes: int, label_smoothing: float = 0.0) -> Objective:
    """Cross entropy; top-1 accuracy `acc`, top-5 `acc5` (more than 5 classes), macro F1 `f1`."""
    if num_classes < 2:
        raise ValueError(f"num_classes ({num_classes}) must be >= 2 for classification")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing ({label_smoothing}) must be in [0, 1)")
    metrics = {
        "acc": MulticlassAccuracy(num_classes, top_k=1, average="micro"),
        "f1": MulticlassF1Score(num_classes, average="macro"),
    }
    if num_classes > 5:
        metrics["acc5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
    loss = nn.CrossEntropyLoss(label_smoothing=label_smoothing)  # takes class indices or soft labels [B, K]
    # compute_groups=False: torchmetrics would merge metrics whose states are equal after the first batch (accuracy,
    # top-5 accuracy and F1 on a batch they all score perfectly), and the merged ones then share one state for good
    return Objective(loss, MetricCollection(metrics, compute_groups=False), "acc", "max", metric_target=_class_indices)


def _class_indices(labels: torch.Tensor) -> torch.Tensor:
    """Class indices [B] from indices [B] or soft labels [B, K] (mixup): the heaviest class."""
    return labels.argmax(dim=-1) if labels.dim() == 2 else labels


def multilabel(*, num_classes: int) -> Objective:
    """Binary cross entropy per label (targets multi-hot [B, K], soft under mixup); mean average precision
    `map` (macro over labels, the AudioSet metric) and micro F1 `f1` at probability 0.5."""
    if num_classes < 1:
        raise ValueError(f"num_classes ({num_classes}) must be >= 1 for multi-label classification")
    metrics = {
        "map": MultilabelAveragePrecision(num_classes, average="macro"),
        "f1": MultilabelF1Score(num_classes, average="micro"),
    }
    return Objective(
        _MultiHotBCE(),
        MetricCollection(metrics, compute_groups=False),
        "map",
        "max",
        multilabel=True,
        metric_target=_binary_targets,
    )


class _MultiHotBCE(nn.BCEWithLogitsLoss):
    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if labels.shape != logits.shape or not labels.is_floating_point():
            raise ValueError(
                f"objective multilabel needs multi-hot float labels shaped like the logits {tuple(logits.shape)}, "
                f"got {labels.dtype} {tuple(labels.shape)} (is the data multi-label?)"
            )
        return super().forward(logits, labels)


def _binary_targets(labels: torch.Tensor) -> torch.Tensor:
    return (labels >= 0.5).long()  # soft (mixup) labels count where they are at least half present


OBJECTIVES = {"multiclass": multiclass, "multilabel": multilabel}


def predictions(logits: torch.Tensor) -> torch.Tensor:
    """Class indices [B] from logits [B, K] (for reports)."""
    return logits.argmax(dim=-1)
