"""The callbacks `attnzoo.fit` adds to every run, besides checkpointing and metrics (`attnzoo.run.build`)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

from ..util.checks import WRITES, is_integer, shown
from .model_stamp import ModelStamp
from .nan_guard import FiniteLoss
from .resume_position import ResumeDataPosition
from .signals import GracefulStop
from .tokenizer_stamp import TokenizerStamp

log = logging.getLogger("attnzoo")


def callbacks(checkpoint: str | Path, *, model: dict[str, Any], slurm_job: str | None = None) -> list[L.Callback]:
    """Stop on a non-finite loss, stop cleanly on a signal (`slurm_job`: the job to requeue on SIGUSR1), resume at
    the position in the epoch, and record the tokenizer's digest and the run's resolved model section (`model`) in
    every checkpoint."""
    return [
        FiniteLoss(),
        GracefulStop(checkpoint=checkpoint, slurm_job=slurm_job),
        ResumeDataPosition(),
        TokenizerStamp(),
        ModelStamp(model),
    ]


class TrainedAlready(L.Callback):
    """Train no step: a resumed run whose training had finished and whose test had not (stopped by a signal). What
    ended its training is not always in the checkpoint: early stopping's `should_stop` is not, and such a run would
    train another epoch before its test."""

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        trainer.should_stop = True


class RunEarlyStopping(EarlyStopping):
    """Lightning's EarlyStopping, except that patience does not count down while the score has never left `floor`,
    the value of a model that has learned nothing it measures yet: BLEU is exactly 0 until a hypothesis shares a
    4-gram with its reference, which on small data takes a model more epochs than the patience (a translation run
    stopped at epoch 11 with chrF rising and tested its epoch-0 weights). `floor=None`: Lightning's behaviour."""

    def __init__(self, *args: Any, floor: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.floor = floor
        self._said = False

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"EarlyStopping{kwargs!r}"  # Lightning's own key: runs saved before this class resume their state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The saved count and best score, with the patience of this run's config (a resume may raise it to train a
        run that stopped early on; Lightning restores the saved one) and no stopping reason yet (why the resumed
        training ends is its own)."""
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience
        self.stopping_reason, self.stopping_reason_message = EarlyStoppingReason.NOT_STOPPED, None

    @staticmethod
    def saved_state_error(state: dict[str, Any]) -> str | None:
        """What in a saved state (`state_dict`) is not what attnzoo fit writes (Lightning's EarlyStopping's), or
        None."""
        for key in ("wait_count", "stopped_epoch", "patience"):
            if not is_integer(state.get(key)):
                return f"holds {key} {shown(state.get(key))}, where {WRITES} is an integer"
        if not isinstance(state.get("best_score"), torch.Tensor) or state["best_score"].numel() != 1:
            return f"holds best_score {shown(state.get('best_score'))}, where {WRITES} is a one-number tensor"
        reasons = [r.value for r in EarlyStoppingReason]
        if state.get("stopping_reason", reasons[0]) not in reasons:
            return f"holds stopping_reason {shown(state['stopping_reason'])}, where {WRITES} is one of {reasons}"
        return None

    def _evaluate_stopping_criteria(self, current: Any) -> tuple[bool, str | None]:
        if self.floor is not None and float(current) == self.floor and not bool(abs(self.best_score) < float("inf")):
            if not self._said:
                log.info("run.early_stopping: %s is still %g: patience counts from its first other value",
                         self.monitor, self.floor)  # fmt: skip
                self._said = True
            return False, None
        return super()._evaluate_stopping_criteria(current)


LOG_EVERY_S = 60.0  # seconds between `LogProgress` lines within an epoch


class LogProgress(L.Callback):
    """Progress as log lines, where stderr is no terminal (nohup, a SLURM log, `| tee`): Lightning's bar draws only
    its final state there, so hours of steps showed nothing. A line after the first batch of an epoch and then every
    `LOG_EVERY_S` seconds (the batch, the step, the train loss, the time a batch takes, when the epoch ends), and
    one with the val metrics after each validation (global rank 0)."""

    def __init__(self) -> None:
        self._start = self._last = 0.0
        self._seen = 0  # batches of this epoch trained in this process (a resumed one skips those done before)

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._start, self._last, self._seen = time.monotonic(), -math.inf, 0

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, out: Any, batch: Any, i: int) -> None:
        now = time.monotonic()
        self._seen += 1
        if not trainer.is_global_zero or now - self._last < LOG_EVERY_S:
            return
        self._last = now
        total, done = trainer.num_training_batches, i + 1
        each = (now - self._start) / self._seen
        ends = f", the epoch ends in ~{_duration(each * (total - done))}" if math.isfinite(total) else ""
        loss = trainer.callback_metrics.get("train/loss")
        shown = f", train/loss {float(loss):.4f}" if loss is not None else ""
        of = f"/{total}" if math.isfinite(total) else ""
        log.info("epoch %d: batch %d%s, step %d%s, %.2f s a batch%s", trainer.current_epoch, done, of,
                 trainer.global_step, shown, each, ends)  # fmt: skip

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        shown = {k: float(v) for k, v in sorted(trainer.callback_metrics.items()) if k.startswith("val/")}
        if shown:
            log.info("epoch %d, step %d: %s", trainer.current_epoch, trainer.global_step,
                     ", ".join(f"{k} {v:.4f}" for k, v in shown.items()))  # fmt: skip


def _duration(seconds: float) -> str:
    """`seconds` as "42 s", "7 min" or "3.2 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
