"""Objectives: the loss and the metrics of a task, built in one place.

An objective is built from `task.objective` (`{kind: multiclass, label_smoothing: 0.1}`) with the data's
context (`num_classes`). `OBJECTIVES` maps config short names to builders; a new kind (e.g. multi-label
BCE + mAP) is one builder here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score


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
    return Objective(nn.CrossEntropyLoss(label_smoothing=label_smoothing), MetricCollection(metrics), "acc", "max")


OBJECTIVES = {"multiclass": multiclass}


def predictions(logits: torch.Tensor) -> torch.Tensor:
    """Class indices [B] from logits [B, K] (for reports)."""
    return logits.argmax(dim=-1)
