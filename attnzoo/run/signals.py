"""Interruption by a signal: stop cleanly, say so, and let `--resume` continue.

- `GracefulStop`: a SIGINT or SIGTERM during training sets a flag; at the end of the current batch every process
  agrees to stop, `last.ckpt` is written (atomically, `attnzoo.run.checkpoint_io`) and `Interrupted` is raised (at
  the next hook), which `attnzoo.fit` turns into a short message and the exit status 128 + signal number (130 / 143),
  without a traceback. In a batch that a validation follows (an epoch's last, or mid-epoch with
  `trainer.val_check_interval`) the stop waits for that validation: a checkpoint of the batch's end is one Lightning
  resumes from past the validation, never run. When the validation ends training (early stopping), the run stops
  before its test instead (`--resume` runs the test). In a SLURM job,
  SIGUSR1 (`#SBATCH --signal=SIGUSR1@90`: the time limit is near) stops the same way, and then global rank 0
  requeues the job (`scontrol requeue`); started again, it continues the run (`attnzoo.run.train`). This replaces
  Lightning's own requeue (which saves `hpc_ckpt_*.ckpt` from inside the signal handler and trains on).
- `StopAtOnce`: during the test after fitting (and `attnzoo.evaluate`'s pass), a signal stops at once (the weights
  are a checkpoint already): `Interrupted` with `phase="test"` (`--resume` runs the test again) or `"evaluate"`.
- `StoppedAtOnce`: a second Ctrl+C stops at once, without saving the batch in progress.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import lightning as L
import torch

log = logging.getLogger("attnzoo")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# tests only: "SIGTERM@5" makes a run send itself SIGTERM during the batch of global step 5 ("SIGTERM@test": during
# the test after fitting)
SELF_SIGNAL_ENV = "ATTNZOO_TEST_SELF_SIGNAL"


class Interrupted(Exception):
    """Training stopped on a signal after saving `checkpoint`; resume with `--resume <run dir>`, or, when
    `requeued` names the SLURM job, by the job itself when SLURM starts it again."""

    def __init__(
        self, *, signum: int, step: int, checkpoint: str, requeued: str | None = None, phase: str = "train"
    ) -> None:
        self.signum, self.step, self.checkpoint, self.requeued = signum, step, checkpoint, requeued
        self.phase = phase
        name = signal.Signals(signum).name
        if phase == "test":
            what = f"{name} received during the test: stopped before it finished (training had finished at step {step})"
        elif phase == "evaluate":
            what = f"{name} received: the evaluation of {checkpoint} stopped before it finished; no metrics written"
        else:
            what = f"{name} received: stopped at step {step}, saved {checkpoint}"
        super().__init__(what + (f"; SLURM job {requeued} requeued" if requeued else ""))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StoppedAtOnce(Exception):
    """A second Ctrl+C stopped training at once, without saving the batch in progress (Lightning exits 1 after a
    KeyboardInterrupt), or a signal came before attnzoo's handlers (Lightning's SIGTERMException in the sanity check);
    the run continues from its last checkpoint with `--resume <run dir>`. Exit status 128 + the signal."""

    def __init__(self, run_dir: str | Path, *, trained: bool = True, signum: int = signal.SIGINT) -> None:
        self.run_dir, self.exit_code = run_dir, 128 + signum
        what = "a second Ctrl+C" if signum == signal.SIGINT else signal.Signals(signum).name
        super().__init__(
            f"stopped at once by {what} (the batch in progress was not saved); continue from the last "
            f"checkpoint with --resume {shlex.quote(str(run_dir))}"
            if trained  # before training (the sanity check's validation), Lightning's own handlers answer a signal
            else f"stopped by {'Ctrl+C' if signum == signal.SIGINT else what} before training started: nothing was "
            "trained; start the run again (same command)"
        )


class StopAtOnce(L.Callback):
    """A SIGINT or SIGTERM (or one of `signals`) during a test pass, or with `validation` a validation pass too, stops
    it at once: `Interrupted` with `phase`. Nothing is saved (the weights are a checkpoint already), and a long beam
    search does not finish first."""

    def __init__(
        self,
        *,
        checkpoint: str | Path,
        signals: tuple[int, ...] = SIGNALS,
        phase: str = "test",
        validation: bool = False,
    ) -> None:
        self.checkpoint = str(checkpoint)
        self.signals = signals
        self.phase, self.validation = phase, validation
        self._previous: dict[int, Any] = {}
        self._step = 0

    def _stop_now(self, signum: int, frame: Any) -> None:
        self._restore()  # a second signal while stopping gets the default behaviour
        raise Interrupted(signum=signum, step=self._step, checkpoint=self.checkpoint, phase=self.phase)

    def _start_pass(self, trainer: L.Trainer) -> None:
        self._step = trainer.global_step
        for sig in self.signals:  # after Lightning's own SIGTERM handler (installed when the pass starts)
            self._previous[sig] = signal.signal(sig, self._stop_now)

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    @staticmethod
    def _self_signal() -> None:
        name, _, when = os.environ.get(SELF_SIGNAL_ENV, "").partition("@")
        if name and when == "test":
            os.kill(os.getpid(), signal.Signals[name])

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._start_pass(trainer)

    def on_test_batch_start(
        self, trainer: L.Trainer, module: L.LightningModule, batch: Any, i: int, dataloader_idx: int = 0
    ) -> None:
        self._self_signal()

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._restore()

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.validation:
            self._start_pass(trainer)

    def on_validation_batch_start(
        self, trainer: L.Trainer, module: L.LightningModule, batch: Any, i: int, dataloader_idx: int = 0
    ) -> None:
        if self.validation:
            self._self_signal()

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.validation:
            self._restore()

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        self._restore()


class GracefulStop(StopAtOnce):
    """Save `last.ckpt` and stop at the end of the batch during which SIGINT or SIGTERM arrived; with
    `slurm_job`, SIGUSR1 too, and global rank 0 then requeues that job."""

    def __init__(self, *, checkpoint: str | Path, slurm_job: str | None = None) -> None:
        # the test after fitting stops at once (`StopAtOnce`); `--resume` runs it again
        signals = (*SIGNALS, signal.SIGUSR1) if slurm_job is not None else SIGNALS
        super().__init__(checkpoint=checkpoint, signals=signals)
        self.slurm_job = slurm_job
        self.signum: int | None = None
        self._stop: Interrupted | None = None
        # the signal every process received in a batch a validation follows: stop after the validation (in an epoch's
        # last batch: after the epoch)
        self._after_validation = 0
        self._asked = False  # this callback asked Lightning to stop (trainer.should_stop) after the epoch
        self._ended = False  # that validation ended training: stop before the test
        self._next_epoch = False  # trainer.min_epochs kept training on: stop as the next epoch starts

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:  # a second Ctrl+C: stop now, without saving
            raise KeyboardInterrupt
        self.signum = signum
        log.warning(
            "%s received: saving a checkpoint and stopping after this batch (with gradient accumulation, after the "
            "last batch of its window)",
            signal.Signals(signum).name,
        )

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        # rank 0's path: processes started apart (torchrun on several machines) may each have named another run dir
        own, self.checkpoint = self.checkpoint, trainer.strategy.broadcast(self.checkpoint)
        if self.checkpoint != own:
            run_dir, named = Path(self.checkpoint).parent.parent, Path(own).parent.parent
            log.info("run directory %s (global rank 0's; rank %d had named %s)", run_dir, trainer.global_rank, named)

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        for sig in self.signals:  # after Lightning's own handlers (installed when fit starts): ours replace them
            self._previous[sig] = signal.signal(sig, self._handler)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, i: int) -> None:
        if self._after_validation and self._stop is None:  # after a validation mid-epoch: last.ckpt was written at
            # its end (Lightning's checkpoints save there when validation runs within epochs), and a resume goes on
            self._save_and_stop(trainer, self._after_validation, save=False)
        self._raise_if_stopped()
        name, _, step = os.environ.get(SELF_SIGNAL_ENV, "").partition("@")
        if name and step != "test" and trainer.global_step == int(step) and self.signum is None:
            os.kill(os.getpid(), signal.Signals[name])

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, out: Any, batch: Any, i: int) -> None:
        if trainer.fit_loop.epoch_loop._should_accumulate():
            return  # inside a gradient accumulation window: stop at its optimizer step, or its gradient is lost
        # every process must stop at the same batch (a signal may reach only some of them)
        received = torch.tensor([self.signum or 0], device=module.device)
        received = int(trainer.strategy.reduce(received, reduce_op="max").item())
        if not received or self._stop is not None or self._after_validation:
            return
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch  # alike in every process
        if last or validates_next(trainer):
            self._after_validation = received
            if trainer.is_global_zero:
                log.warning("%s came in %s: stopping after its validation", signal.Signals(received).name,
                            "the epoch's last batch" if last else "a batch a validation follows")  # fmt: skip
            # kept in case the process is killed during the validation (a scheduler's grace period, a second Ctrl+C);
            # the stop after it writes the file again
            trainer.save_checkpoint(self.checkpoint, weights_only=False)
            return
        self._save_and_stop(trainer, received)

    def _save_and_stop(self, trainer: L.Trainer, received: int, *, save: bool = True) -> None:
        """Write `last.ckpt` (unless `save` is False: it is written) and make the `Interrupted` that the next hook
        raises."""
        if save:
            trainer.save_checkpoint(self.checkpoint, weights_only=False)  # every process waits until it is written
        # raised at the next hook, once Lightning has logged this batch's metrics rows (resume does not redo them)
        self._stop = Interrupted(signum=received, step=trainer.global_step, checkpoint=self.checkpoint,
                                 requeued=self._requeue(trainer, received))  # fmt: skip

    def _requeue(self, trainer: L.Trainer, received: int) -> str | None:
        """The SLURM job requeued on SIGUSR1 (by global rank 0; every process says the same), else None."""
        if received != signal.SIGUSR1 or self.slurm_job is None:
            return None
        requeued = None
        if trainer.is_global_zero:
            from .cluster import requeue

            requeued = self.slurm_job if requeue(self.slurm_job) else None
        return trainer.strategy.broadcast(requeued)

    def _raise_if_stopped(self) -> None:
        if self._stop is not None:
            raise self._stop

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._raise_if_stopped()

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._raise_if_stopped()  # before ModelCheckpoint's (Lightning runs checkpoint callbacks last)
        if not self._after_validation or self._stop is not None:
            return
        if not trainer.fit_loop._can_stop_early:  # trainer.min_epochs not reached: Lightning would train on
            self._next_epoch = True  # stop as the next epoch starts, from the last.ckpt of this one's end
        elif trainer.should_stop:  # the validation ended training (early stopping): the stop comes before the test
            self._ended = True
        else:  # the epoch ends as usual (best.ckpt, last.ckpt), then training
            trainer.should_stop = self._asked = True

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._next_epoch and self._stop is None:  # last.ckpt: written as the epoch ended (or, with no checkpoint
            # then, at the end of its last batch before an epoch without validation), which a resume goes on from
            self._save_and_stop(trainer, self._after_validation, save=False)
            self._raise_if_stopped()

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._ended:  # the signal came before the validation that ended training: no test now
            raise Interrupted(signum=self._after_validation, step=trainer.global_step, checkpoint=self.checkpoint,
                              requeued=self._requeue(trainer, self._after_validation), phase="test")  # fmt: skip
        super().on_test_start(trainer, module)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._restore()
        if not self._after_validation or self._ended or self._stop is not None:
            return
        if trainer.should_stop and not self._asked:  # a validation mid-epoch ended training: stop before the test
            self._ended = True
            return
        self._save_and_stop(trainer, self._after_validation)  # a finished epoch: a resume starts the next one
        self._raise_if_stopped()


def validates_next(trainer: L.Trainer) -> bool:
    """Whether Lightning validates after this training batch (`trainer.val_check_interval`, step-based validation),
    as its epoch loop decides it right after the batch; alike in every process."""
    loop = trainer.fit_loop.epoch_loop
    try:
        return bool(loop._should_check_val_fx(trainer.fit_loop._data_fetcher))
    except (AttributeError, TypeError):  # another Lightning's loop: the stop is saved at the batch's end, as before
        return False
