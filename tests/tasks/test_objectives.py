"""Objectives: every kind's loss and metrics; multi-label BCE + mAP; soft (mixup) labels."""

import pytest
import torch
from sklearn.metrics import average_precision_score
from torch import nn

from attnzoo.tasks import OBJECTIVES
from attnzoo.tasks.classification import ClassificationTask


def labels_for(kind: str, batch: int, classes: int) -> torch.Tensor:
    if OBJECTIVES[kind](num_classes=classes).multilabel:
        return (torch.rand(batch, classes) < 0.4).float()
    return torch.randint(classes, (batch,))


@pytest.mark.parametrize("kind", list(OBJECTIVES))
def test_every_objective_gives_a_finite_loss_and_its_monitored_metric(kind):
    obj = OBJECTIVES[kind](num_classes=6)
    logits, labels = torch.randn(16, 6), labels_for(kind, 16, 6)
    assert torch.isfinite(obj.loss(logits, labels))
    obj.metrics.update(logits, obj.metric_target(labels))
    assert obj.monitor in obj.metrics.compute()


def test_multilabel_is_bce_and_map_matches_sklearn():
    obj = OBJECTIVES["multilabel"](num_classes=4)
    logits = torch.randn(32, 4)
    labels = (torch.rand(32, 4) < 0.5).float()
    labels[0] = 1.0  # every label has a positive
    torch.testing.assert_close(obj.loss(logits, labels), nn.functional.binary_cross_entropy_with_logits(logits, labels))
    obj.metrics.update(logits, obj.metric_target(labels))
    expected = average_precision_score(labels.numpy(), logits.sigmoid().numpy(), average="macro")
    assert obj.metrics.compute()["map"].item() == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="needs multi-hot float labels"):
        obj.loss(logits, torch.randint(4, (32,)))


def test_mixup_soft_labels_train_multiclass_and_count_as_their_heaviest_class():
    obj = OBJECTIVES["multiclass"](num_classes=3)
    soft = torch.tensor([[0.7, 0.3, 0.0], [0.0, 0.4, 0.6]])
    logits = torch.randn(2, 3)
    torch.testing.assert_close(obj.loss(logits, soft), -(soft * logits.log_softmax(-1)).sum(-1).mean())
    assert obj.metric_target(soft).tolist() == [0, 2]


def test_task_refuses_an_objective_that_does_not_match_the_data():
    with pytest.raises(ValueError, match="data's labels are multi-label; use objective multilabel"):
        ClassificationTask(net=nn.Linear(2, 3), num_classes=3, multilabel=True)
    with pytest.raises(ValueError, match="use objective multiclass"):
        ClassificationTask(net=nn.Linear(2, 3), num_classes=3, objective="multilabel")


def test_each_metric_keeps_its_own_state_whatever_the_first_batch():
    # MetricCollection's compute groups merged metrics whose states were equal after the first batch (the sanity
    # check's): macro F1 then followed top-5 accuracy's counts for the rest of the run (val/f1 0.4 at val/acc 0.0),
    # and a resumed run, grouping on another batch, logged other values
    from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

    from attnzoo.tasks.objectives import multiclass

    torch.manual_seed(0)
    metrics = multiclass(num_classes=6).metrics
    alone = {"acc": MulticlassAccuracy(6, top_k=1, average="micro"), "f1": MulticlassF1Score(6, average="macro"),
             "acc5": MulticlassAccuracy(6, top_k=5, average="micro")}  # fmt: skip
    first = torch.eye(6)[[0, 1]] * 10, torch.tensor([0, 1])  # every metric perfect: equal states
    batches = [first, *[(torch.randn(8, 6), torch.randint(0, 6, (8,))) for _ in range(4)]]
    for logits, labels in batches:
        metrics.update(logits, labels)
        for metric in alone.values():
            metric.update(logits, labels)
    got = metrics.compute()
    for name, metric in alone.items():
        torch.testing.assert_close(got[name], metric.compute(), msg=name)
