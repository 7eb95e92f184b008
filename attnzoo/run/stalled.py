"""`LearningCheck`: says in the log, once, when a classification run is not learning, with the likely cause and
the overrides to try.

Two signs, checked after `epochs` epochs: the training loss has not fallen below chance (ln K for K classes: the
model has not begun to fit its own training data: the learning rate or the data), or validation accuracy is still
near chance (1/K) while the training loss fell below `LOSS_FITS` of ln K (the model fits train but learns nothing
that carries to val: the data, or augmentation that changes what the images show); a loss between the two has just
begun to fall, and is checked again after the next epoch (a conv stem's val accuracy stayed at chance for 5 epochs
of 26 while its loss fell from 2.30 to 2.15, then rose to 0.93). While the learning rate is still warming up (it
rose over the epoch), the check waits for the first epoch after, or the last: a loss near chance at a fraction of the
learning rate is no sign (a text run of 23 steps an epoch is a third of the way through its 200 warmup steps after 3
epochs). Whether it has checked is saved in checkpoints, so a resumed run does not warn twice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import lightning as L

log = logging.getLogger("attnzoo")

LOSS_AT_CHANCE = 0.97  # a mean training loss above this share of ln K has not begun to fall
LOSS_FITS = 0.85  # below this share the model fits its training data: val accuracy near chance then is a sign
ACC_NEAR_CHANCE = 1.5  # val accuracy below this many times 1/K is near chance


# the augmentation a run may have on ({config key: the value that turns it off}), for the hint
AUGMENTATION_OFF = {
    "data.augment": "false",
    "data.trivial_augment": "false",
    "data.mixup_alpha": "0",
    "data.cutmix_alpha": "0",
    "data.time_shift_ms": "0",
    "model.spec_augment": "null",
}


def augmentation_off(cfg: Any) -> list[str]:
    """The overrides that turn off the augmentation the resolved config `cfg` has on (none for text)."""
    on = []
    for key, off in AUGMENTATION_OFF.items():
        section, _, name = key.partition(".")
        value = cfg.section(section).get(name)
        if value and value not in ("none", "false"):  # None, false, 0 and {} are off
            on.append(f"{key}={off}")
    return on


class LearningCheck(L.Callback):
    """Warn once when, after `epochs` epochs, train loss stays at chance or val accuracy stays near chance.

    Args:
        augmentation: the overrides that turn the run's augmentation off (`augmentation_off`), named in the hint.
    """

    def __init__(self, epochs: int = 3, augmentation: Sequence[str] = ()) -> None:
        self.epochs = epochs
        self.augmentation = " ".join(augmentation)
        self.losses: list[float] = []  # this epoch's training losses
        self.start_lr: float | None = None  # the learning rate as this epoch began
        self.checked = False

    def state_dict(self) -> dict[str, Any]:
        return {"checked": self.checked}  # a resumed run does not warn again

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.checked = bool(state_dict.get("checked", False))

    @staticmethod
    def _classes(trainer: L.Trainer, task: L.LightningModule) -> int | None:
        """K, for single-label classification tasks (which monitor accuracy); else None."""
        k = trainer.datamodule.model_inputs().get("num_classes") if trainer.datamodule is not None else None
        return k if getattr(task, "monitor", None) == "acc" and isinstance(k, int) and k > 1 else None

    def on_train_epoch_start(self, trainer: L.Trainer, task: L.LightningModule) -> None:
        self.losses = []
        self.start_lr = _lr(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, task: L.LightningModule, outputs: Any, batch: Any, i: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.losses.append(float(loss))

    def on_validation_epoch_end(self, trainer: L.Trainer, task: L.LightningModule) -> None:
        if not trainer.sanity_checking:  # Lightning validates before the training epoch's end hook
            self._check(trainer, task, trainer.callback_metrics.get("val/acc"))

    def on_train_epoch_end(self, trainer: L.Trainer, task: L.LightningModule) -> None:
        self._check(trainer, task, None)  # an epoch without validation

    def _check(self, trainer: L.Trainer, task: L.LightningModule, acc: Any) -> None:
        k = self._classes(trainer, task)
        epochs = trainer.current_epoch + 1
        if k is None or self.checked or epochs < self.epochs or not self.losses:
            return
        lr, last = _lr(trainer), (trainer.max_epochs or 0) > 0 and epochs >= trainer.max_epochs
        if lr is not None and self.start_lr is not None and lr > self.start_lr and not last:
            return  # the warmup is not over: check after the next epoch (or the last one)
        loss, chance = sum(self.losses) / len(self.losses), math.log(k)
        if LOSS_FITS * chance <= loss < LOSS_AT_CHANCE * chance and not last:
            return  # the loss has begun to fall: val follows later (a conv stem's 96 px symbols: epoch 6)
        self.checked = True
        if not trainer.is_global_zero:  # under DDP: one warning, from the first process's batches
            return
        if loss >= LOSS_AT_CHANCE * chance:
            lr = getattr(task, "optimizer_spec", {}).get("lr")  # as configured (the peak of the schedule)
            tell = (
                f". To tell them apart, see whether it fits without augmentation: {self.augmentation}"
                if self.augmentation
                else ""
            )
            log.warning(
                "not learning: after %d epochs the training loss is %.3f, at chance (ln %d = %.3f): the model has "
                "not begun to fit its training data. Likely causes: the learning rate (task.optimizer.lr=%s; try "
                "task.optimizer.lr=%s), or the data (look at a batch: inputs blank or alike after preprocessing, "
                "labels that do not match the inputs)%s",
                epochs, loss, k, chance, lr, _lower(lr), tell,
            )  # fmt: skip
        elif acc is not None and float(acc) < ACC_NEAR_CHANCE / k:
            also = (
                f", or augmentation that changes what the inputs show; try {self.augmentation}"
                if self.augmentation
                else ""
            )
            log.warning(
                "not learning: after %d epochs val/acc is %.3f, near chance (1/%d = %.3f), while the training loss "
                "fell to %.3f (chance: %.3f): what the model learns from train does not carry to val. Likely causes: "
                "the data (val examples unlike train's, classes that differ between the splits, too few examples "
                "per class)%s; compare with the baseline (run.baseline=true)",
                epochs, float(acc), k, 1 / k, loss, chance, also,
            )  # fmt: skip


def _lr(trainer: L.Trainer) -> float | None:
    """The first parameter group's learning rate now (the schedule moves every group alike); None without one."""
    optimizers = trainer.optimizers
    return float(optimizers[0].param_groups[0]["lr"]) if optimizers and optimizers[0].param_groups else None


def _lower(lr: Any) -> str:
    return f"{lr / 3:.0e}" if isinstance(lr, int | float) and lr > 0 else "1e-4"
