"""Faults a run survives: interruption (SIGINT/SIGTERM), crashes during a checkpoint write, non-finite losses.

- `GracefulStop`: a SIGINT or SIGTERM sets a flag; at the end of the current batch every process agrees to
  stop, `last.ckpt` is written (atomically) and `Interrupted` is raised (at the next hook), which
  `attnzoo.fit` turns into a short message and the exit status 128 + signal number (130 / 143), without a traceback.
  In a SLURM job, SIGUSR1 (`#SBATCH --signal=SIGUSR1@90`: the time limit is near) stops the same way, and then
  global rank 0 requeues the job (`scontrol requeue`); started again, it continues the run (`attnzoo.run.train`).
  This replaces Lightning's own requeue (which saves `hpc_ckpt_*.ckpt` from inside the signal handler and trains on).
- `ResumeDataPosition`: a run resumed mid epoch skips the batches the saved run had already trained on, so
  it reads the same samples in the same order as an uninterrupted run (Lightning restarts a plain
  DataLoader's epoch from its first batch).
- `AtomicCheckpointIO`: checkpoints are written to a temporary file in the same directory, fsynced and moved
  over the old one with `os.replace`; a crash mid-write leaves the previous checkpoint intact.
- `FiniteLoss`: a NaN/inf training loss stops training at its step, before the backward pass and any
  checkpoint, with `NonFiniteLossError` naming the step, the batch and what to try.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import Sampler

log = logging.getLogger("attnzoo")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# tests only: "SIGTERM@5" makes a run send itself SIGTERM during the batch of global step 5
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
        else:
            what = f"{name} received: stopped at step {step}, saved {checkpoint}"
        super().__init__(what + (f"; SLURM job {requeued} requeued" if requeued else ""))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StoppedAtOnce(Exception):
    """A second Ctrl+C stopped training at once, without saving the batch in progress (Lightning exits 1 after a
    KeyboardInterrupt); the run continues from its last checkpoint with `--resume <run dir>`."""

    exit_code = 128 + signal.SIGINT

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = run_dir
        super().__init__(
            f"stopped at once by a second Ctrl+C (the batch in progress was not saved); continue from the last "
            f"checkpoint with --resume {run_dir}"
        )


class NonFiniteLossError(RuntimeError):
    """A training loss was NaN or infinite."""


class GracefulStop(L.Callback):
    """Save `last.ckpt` and stop at the end of the batch during which SIGINT or SIGTERM arrived; with
    `slurm_job`, SIGUSR1 too, and global rank 0 then requeues that job."""

    def __init__(self, *, checkpoint: str | Path, slurm_job: str | None = None) -> None:
        self.checkpoint = str(checkpoint)
        self.slurm_job = slurm_job
        self.signals = (*SIGNALS, signal.SIGUSR1) if slurm_job is not None else SIGNALS
        self.signum: int | None = None
        self._stop: Interrupted | None = None
        self._previous: dict[int, Any] = {}
        self._step = 0

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:  # a second Ctrl+C: stop now, without saving
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: saving a checkpoint and stopping after this batch", signal.Signals(signum).name)

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
        self._raise_if_stopped()
        name, _, step = os.environ.get(SELF_SIGNAL_ENV, "").partition("@")
        if name and step != "test" and trainer.global_step == int(step) and self.signum is None:
            os.kill(os.getpid(), signal.Signals[name])

    # the test after fitting: nothing to save (the weights are a checkpoint already), so a signal stops it at once,
    # even inside a long beam search, and `--resume` runs the test again
    def _test_handler(self, signum: int, frame: Any) -> None:
        self._restore()  # a second signal while stopping gets the default behaviour
        step = self._step
        raise Interrupted(signum=signum, step=step, checkpoint=self.checkpoint, phase="test")

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._step = trainer.global_step
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._test_handler)

    def on_test_batch_start(
        self, trainer: L.Trainer, module: L.LightningModule, batch: Any, i: int, n: int = 0
    ) -> None:
        name, _, when = os.environ.get(SELF_SIGNAL_ENV, "").partition("@")
        if name and when == "test":
            os.kill(os.getpid(), signal.Signals[name])

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._restore()

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, out: Any, batch: Any, i: int) -> None:
        # every process must stop at the same batch (a signal may reach only some of them)
        received = torch.tensor([self.signum or 0], device=module.device)
        received = int(trainer.strategy.reduce(received, reduce_op="max").item())
        if not received or self._stop is not None:
            return
        trainer.save_checkpoint(self.checkpoint)  # every process waits until it is written
        requeued = None
        if received == signal.SIGUSR1 and self.slurm_job is not None and trainer.is_global_zero:
            from .cluster import requeue

            requeued = self.slurm_job if requeue(self.slurm_job) else None
        if received == signal.SIGUSR1 and self.slurm_job is not None:
            requeued = trainer.strategy.broadcast(requeued)  # every process says the same
        # raised at the next hook, once Lightning has logged this batch's metrics rows (resume does not redo them)
        self._stop = Interrupted(
            signum=received, step=trainer.global_step, checkpoint=self.checkpoint, requeued=requeued
        )

    def _raise_if_stopped(self) -> None:
        if self._stop is not None:
            raise self._stop

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._raise_if_stopped()

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._raise_if_stopped()  # before ModelCheckpoint's (Lightning runs checkpoint callbacks last)

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        self._restore()


class _SkipFirst(Sampler):
    """Iterates `base` once without its first `n` indices, then becomes `base` again."""

    def __init__(self, base: Any, n: int, owner: Any) -> None:
        self.base, self.n, self.owner = base, n, owner

    def __len__(self) -> int:
        return max(len(self.base) - self.n, 0)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.base, "set_epoch"):
            self.base.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        self.owner.sampler = self.base  # only this one pass skips
        for i, index in enumerate(self.base):
            if i >= self.n:
                yield index


class ResumeDataPosition(L.Callback):
    """On a mid-epoch resume, skip the samples of the batches the saved run already trained on, and continue the
    random number generators (augmentation, dropout) from where the saved run was."""

    def __init__(self) -> None:
        self._rng: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        rng = _collect_rng_states(include_cuda=torch.cuda.is_available())
        name, keys, pos, has_gauss, gauss = rng.pop("numpy")  # plain types: checkpoints load with weights_only
        rng["numpy"] = [str(name), torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(gauss)]
        return {"rng": rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng = state.get("rng")

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._rng is not None:  # restored now: Lightning seeds and builds loaders between loading and here
            name, keys, pos, has_gauss, gauss = self._rng["numpy"]
            _set_rng_states({**self._rng, "numpy": (name, keys.numpy(), pos, has_gauss, gauss)})
            self._rng = None
        # batches of this epoch that stepped: a checkpoint saved in on_train_batch_end counts its batch as processed
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        loader = trainer.train_dataloader
        if not done or loader is None or done >= trainer.num_training_batches:
            return
        batch_sampler = getattr(loader, "batch_sampler", None)
        if batch_sampler is None or not hasattr(batch_sampler, "sampler") or not hasattr(batch_sampler, "batch_size"):
            log.warning("resume: the train loader has no batch sampler to skip; its epoch restarts from the start")
            return
        batch_sampler.sampler = _SkipFirst(batch_sampler.sampler, done * batch_sampler.batch_size, batch_sampler)
        log.info("resume: skipping the %d batches of this epoch the saved run trained on", done)


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that never leaves a partly written checkpoint at the final path."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO: storage_options are not supported, got {storage_options!r}")
        if get_filesystem(path).protocol not in ("file", ("file", "local")):  # remote stores: Lightning's writer
            return super().save_checkpoint(checkpoint, path)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:  # make the rename itself durable
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


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


def callbacks(checkpoint: str | Path, *, slurm_job: str | None = None) -> list[L.Callback]:
    """The reliability callbacks `attnzoo.fit` adds to every run (`slurm_job`: the job to requeue on SIGUSR1), and
    the tokenizer digest in every checkpoint (`attnzoo.run.tokenizer_stamp`)."""
    from .tokenizer_stamp import TokenizerStamp

    return [
        FiniteLoss(),
        GracefulStop(checkpoint=checkpoint, slurm_job=slurm_job),
        ResumeDataPosition(),
        TokenizerStamp(),
    ]


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """The Lightning checkpoint at `path` (tensors memory-mapped with `mmap`); ValueError saying why a file is
    not one (empty, not a PyTorch file, unreadable, no `state_dict`), naming the file."""
    path = Path(path)
    what = f"{str(path)!r} is not a checkpoint"
    try:
        size = path.stat().st_size
    except OSError as err:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: {err.strerror or err}") from None
    if size == 0:
        raise ValueError(f"{what}: the file is empty (a copy or a save that did not finish?)")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{what}: it is not a PyTorch checkpoint file (torch.save writes a zip archive)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 (a damaged archive fails in many ways; each gets this message)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"{what} that can be read ({type(err).__name__}: {first[:300]})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("state_dict"), dict):
        raise ValueError(f"{what} written by attnzoo fit (it holds no state_dict)")
    return obj


def check_checkpoint_shapes(path: str | Path, module: torch.nn.Module) -> int:
    """Raise ValueError naming every parameter whose shape differs between `module` and the checkpoint at `path`,
    and the keys only one of them has (a checkpoint of another model or model size); returns its global step."""
    checkpoint = read_checkpoint(path, mmap=True)
    saved = checkpoint["state_dict"]
    own = module.state_dict()
    shapes = [f"{k} {list(saved[k].shape)} in the checkpoint vs {list(v.shape)} here" for k, v in own.items()
              if k in saved and saved[k].shape != v.shape]  # fmt: skip
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if shapes or missing or unexpected:
        parts = [f"shape mismatch: {'; '.join(shapes[:8])}" + (" ..." if len(shapes) > 8 else "")] if shapes else []
        parts += [f"missing from the checkpoint: {missing[:8]}"] if missing else []
        parts += [f"not in this model: {unexpected[:8]}"] if unexpected else []
        raise ValueError(
            f"checkpoint {str(path)!r} is from a model of another shape ({len(shapes)} mismatched, {len(missing)} "
            f"missing, {len(unexpected)} unexpected keys): {' | '.join(parts)}. Resume with the run's own config.yaml."
        )
    return int(checkpoint.get("global_step", 0))
