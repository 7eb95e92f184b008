"""ClassificationTask: objectives (loss + metrics), optimizer groups and the warmup/cosine schedule."""

import pytest
import torch
from torch import nn

from attnzoo.tasks import OBJECTIVES, TASKS, ClassificationTask
from attnzoo.tasks.optim import SCHEDULES, check_optimizer, configure_optimizers, make_optimizer


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.fc = nn.Linear(4, classes)

    def forward(self, image):
        return self.fc(self.norm(image))


@pytest.mark.parametrize("num_classes, names", [(10, {"acc", "acc5", "f1"}), (3, {"acc", "f1"})])
def test_multiclass_metrics_match_their_definitions(num_classes, names):
    objective = OBJECTIVES["multiclass"](num_classes=num_classes)
    assert set(objective.metrics) == names and objective.monitor == "acc"
    logits = torch.randn(64, num_classes)
    labels = torch.randint(0, num_classes, (64,))
    values = objective.metrics(logits, labels)
    assert values["acc"] == pytest.approx((logits.argmax(-1) == labels).float().mean().item())
    if "acc5" in names:
        top5 = (logits.topk(5, dim=-1).indices == labels[:, None]).any(-1).float().mean().item()
        assert values["acc5"] == pytest.approx(top5)
    torch.testing.assert_close(objective.loss(logits, labels), nn.functional.cross_entropy(logits, labels))


def test_objective_errors_name_the_key():
    with pytest.raises(ValueError, match="task.objective.kind: unknown 'multiclas'.*did you mean 'multiclass'"):
        ClassificationTask(net=Net(), num_classes=10, objective="multiclas")
    with pytest.raises(ValueError, match="label_smoothing"):
        ClassificationTask(net=Net(), num_classes=10, objective={"kind": "multiclass", "label_smoothing": 1.5})


def test_steps_log_split_metrics():
    task = TASKS["classification"](net=Net(), num_classes=10)
    logged = {}
    task.log = lambda name, value, **kw: logged.__setitem__(name, value)
    task.log_dict = lambda values, **kw: logged.update(values)
    batch = {"image": torch.randn(8, 4), "label": torch.randint(0, 10, (8,))}
    loss = task.training_step(batch, 0)
    assert loss.requires_grad and {"train/loss", "train/acc"} <= set(logged)
    task.validation_step(batch, 0)
    assert {"val/loss", "val/acc", "val/acc5", "val/f1"} <= set(logged)


def test_optimizer_skips_weight_decay_on_norms_and_biases():
    net = Net()
    opt = make_optimizer(net, {"kind": "adamw", "lr": 0.1, "weight_decay": 0.05})
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(net.fc.weight)}
    with pytest.raises(ValueError, match="did you mean 'betas'"):
        check_optimizer({"kind": "adamw", "beta": (0.9, 0.99)})


def test_warmup_cosine_schedule():
    factor = SCHEDULES["cosine"](warmup=0.1, min_lr_ratio=0.01)
    total = 100
    values = [factor(s, total) for s in range(total)]
    assert 0 < values[0] < values[5] < values[9] <= 1.0  # warmup starts above zero
    assert values[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(values[10:], values[11:], strict=False))  # cosine decays monotonically
    assert values[-1] == pytest.approx(0.01, abs=0.01)
    assert SCHEDULES["constant"](warmup=10)(50, total) == 1.0
    assert SCHEDULES["cosine"](warmup=5)(2, total) == pytest.approx(3 / 6)  # >= 1: a step count


def test_configured_scheduler_steps_the_learning_rate_along_the_schedule():
    schedule = SCHEDULES["cosine"](warmup=2)
    spec = {"kind": "sgd", "lr": 0.5}
    configured = configure_optimizers(Net(), spec, schedule, total_steps=10)
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert configured["lr_scheduler"]["interval"] == "step"
    for step in range(10):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * schedule(step, 10))
        optimizer.step()
        scheduler.step()
    assert isinstance(configure_optimizers(Net(), spec, None, total_steps=0), torch.optim.SGD)
