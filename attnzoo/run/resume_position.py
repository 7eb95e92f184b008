"""Resuming mid epoch: the same samples in the same order, and the random state, as an uninterrupted run.

`ResumeDataPosition`: a run resumed mid epoch skips the batches the saved run had already trained on, so it reads the
same samples in the same order as an uninterrupted run (Lightning restarts a plain DataLoader's epoch from its first
batch), and continues the random number generators (augmentation, dropout) from where the saved run was.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.fabric.utilities.data import _set_sampler_epoch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from torch.utils.data import Sampler

from ..util.checks import WRITES, shown

log = logging.getLogger("attnzoo")


class _SkipFirst(Sampler):
    """Iterates `base` once without its first `n` indices, then becomes `base` again."""

    def __init__(self, base: Any, n: int, owner: Any) -> None:
        self.base, self.n, self.owner = base, n, owner

    def __len__(self) -> int:
        # the whole epoch's length, as Lightning counts it: it adds the batches done before the stop itself, and
        # reads this length again when the skip makes a new iterator (a shorter one cut the epoch short twice)
        return len(self.base)

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
        self._ranks: list[dict[str, Any]] | None = None  # every process's state, in global rank order

    def state_dict(self) -> dict[str, Any]:
        """The random state of every process (Lightning writes rank 0's checkpoint, but every process calls this as
        it saves): under DDP the processes' streams part after the first batch (batches of other lengths draw
        dropout and masks of other sizes), and each must go on from its own."""
        rng = _collect_rng_states(include_cuda=torch.cuda.is_available())
        name, keys, pos, has_gauss, gauss = rng.pop("numpy")  # plain types: checkpoints load with weights_only
        rng["numpy"] = [str(name), torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(gauss)]
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return {"rng": rng}
        ranks: list[Any] = [None] * dist.get_world_size()
        # as numpy arrays: tensors inside an object fail to unpickle in all_gather_object (torch 2.14)
        dist.all_gather_object(ranks, apply_to_collection(rng, torch.Tensor, lambda t: t.cpu().numpy()))
        return {"rng": rng, "rng_ranks": [apply_to_collection(r, np.ndarray, torch.from_numpy) for r in ranks]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng, self._ranks = state.get("rng"), state.get("rng_ranks")

    @staticmethod
    def saved_state_error(state: dict[str, Any]) -> str | None:
        """What in a saved state (`state_dict`) no random number generator takes, or None (checked before a resume:
        `attnzoo.run.resume_check`)."""
        ranks = state.get("rng_ranks")
        if ranks is not None and not isinstance(ranks, list):
            return f"holds rng_ranks {shown(ranks)}, where {WRITES} is a list of random states"
        for where, rng in [("rng", state.get("rng")), *((f"rng_ranks[{i}]", r) for i, r in enumerate(ranks or []))]:
            why = _rng_error(rng) if rng is not None else None
            if why:
                return f"holds an {where} {why}"
        return None

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """A checkpoint written when `trainer.max_steps` or `max_time` cut an epoch short is saved as a mid-epoch
        one. Lightning ends the epoch at such a stop, and would resume at the next epoch: the rest of the cut one
        (and its validation) lost, and the batches done counted against the next. Saved as a stop mid-epoch, a
        resume with a larger budget goes on as the uninterrupted run does."""
        loop = checkpoint.get("loops", {}).get("fit_loop", {})
        epochs, batches = loop.get("epoch_progress"), loop.get("epoch_loop.batch_progress")
        if not epochs or not batches:
            return
        done, total = batches["current"]["processed"], trainer.num_training_batches
        ended = epochs["current"]["processed"] > epochs["current"]["completed"]
        if ended and 0 < done < total < float("inf"):
            for counts in (epochs["current"], epochs["total"]):
                counts["processed"] = counts["completed"]

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        _plan_learning_rate(trainer)
        skipped = self._skip_trained_batches(trainer)
        workers = getattr(trainer.train_dataloader, "num_workers", 0)
        if self._rng is not None and workers > 0 and trainer.is_global_zero:  # a resume, mid-epoch or not
            log.warning(
                "resume: data.num_workers=%d: the loader workers start new random streams, so what is drawn in them "
                "(random crops, flips, shifts, mixup, MLM masks) differs from the uninterrupted run's for the rest of "
                "the run; the batches hold the same samples in the same order. data.num_workers=0 resumes exactly",
                workers,
            )
        if self._rng is not None:  # restored now: Lightning seeds and builds loaders between loading and here
            rng = self._own_rng(trainer)
            name, keys, pos, has_gauss, gauss = rng["numpy"]
            _set_rng_states({**rng, "numpy": (name, keys.numpy(), pos, has_gauss, gauss)})
            self._rng = self._ranks = None
            if not skipped:  # an epoch from its start: its iterator draws its seed as the uninterrupted run's did
                _new_iterator(trainer)

    def _own_rng(self, trainer: L.Trainer) -> dict[str, Any]:
        """This process's saved random state: its own where the saved run had as many processes (a checkpoint from
        before they were all kept, or of another process count: rank 0's, said once)."""
        if self._ranks is not None and len(self._ranks) == trainer.world_size:
            return self._ranks[trainer.global_rank]
        if trainer.world_size > 1 and trainer.is_global_zero:
            saved = len(self._ranks) if self._ranks is not None else 1
            log.warning(
                "resume: the checkpoint holds the random state of %d process%s, this run has %d: every process goes "
                "on from process 0's, so dropout, masks and augmentation draw other values than an uninterrupted "
                "run's", saved, "es" if saved > 1 else "",
                trainer.world_size,
            )  # fmt: skip
        return self._rng

    def _skip_trained_batches(self, trainer: L.Trainer) -> bool:
        """Whether the epoch resumes mid-way, its trained batches skipped."""
        # batches of this epoch that stepped: a checkpoint saved in on_train_batch_end counts its batch as processed
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        loader = trainer.train_dataloader
        if not done or loader is None or done >= trainer.num_training_batches:
            return False
        batch_sampler = getattr(loader, "batch_sampler", None)
        if batch_sampler is None or not hasattr(batch_sampler, "sampler") or not hasattr(batch_sampler, "batch_size"):
            log.warning("resume: the train loader has no batch sampler to skip; its epoch restarts from the start")
            return False
        if callable(getattr(batch_sampler, "skip_batches", None)):  # batches fixed per epoch (length bucketing)
            batch_sampler.skip_batches(done)
        else:
            batch_sampler.sampler = _SkipFirst(batch_sampler.sampler, done * batch_sampler.batch_size, batch_sampler)
        # Lightning made the epoch's iterator before this hook (FitLoop.setup_data), and loader workers fetch ahead
        # as soon as it exists: those batches came from the sampler without the skip (which would then have cut the
        # next epoch instead) and before the sampler was told its epoch (Lightning tells it after this hook). A new
        # iterator reads the sampler as it is now; it is made before the random state is restored, since making one
        # draws from it (the uninterrupted run's draw came at the epoch's start).
        _new_iterator(trainer)
        if trainer.is_global_zero:  # each DDP process skips its own batches; one line says so
            log.info("resume: skipping the %d batches of this epoch the saved run trained on", done)
        return True


def _rng_error(rng: Any) -> str | None:
    """Why the random state `rng` (as `ResumeDataPosition.state_dict` writes it) cannot be restored, or None: tried
    on generators of its own, the process's left as they are."""
    form = "a dict of the random states of torch (a byte tensor), python and numpy (the lists their get_state returns)"
    if not isinstance(rng, dict) or not {"torch", "python", "numpy"} <= set(rng):
        return f"{shown(rng)}, where {WRITES} is {form}"
    cuda = rng.get("torch.cuda", [])
    if not isinstance(cuda, list | tuple) or not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda
    ):
        return f"whose torch.cuda is {shown(cuda)}, where {WRITES} is a list of byte tensors"
    try:
        torch.Generator().set_state(rng["torch"])
        version, state, gauss = rng["python"]
        random.Random().setstate((version, tuple(state), gauss))
        name, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.RandomState().set_state((name, keys.numpy(), pos, has_gauss, gauss))
    except Exception as err:  # noqa: BLE001 (each generator refuses a state in its own way)
        why = f"{type(err).__name__}: {str(err)[:200]}"
        return f"that the generators do not take ({why}), where {WRITES} is {form}"
    return None


def _new_iterator(trainer: L.Trainer) -> None:
    """Make the epoch's train iterator again, its sampler told the epoch (persistent workers are reset). Making one
    draws the loader's base seed from torch's random state, even without workers."""
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is not None and trainer.train_dataloader is not None:
        _set_sampler_epoch(trainer.train_dataloader, trainer.fit_loop.epoch_progress.current.processed)
        iter(fetcher)


def _plan_learning_rate(trainer: L.Trainer) -> None:
    """The learning rate of the first step after a resume, from the schedule as planned now. A schedule over the
    run's budget (`attnzoo.tasks.optim`: a LambdaLR of the step and the total) is planned again over a budget a
    resume extended, but the optimizer's learning rate restored from the checkpoint is the old plan's until the
    scheduler's first step: a finished run extended took its first step at the old plan's end, 0."""
    for config in trainer.lr_scheduler_configs:
        scheduler = config.scheduler
        if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) or scheduler.last_epoch <= 0:
            continue
        groups = scheduler.optimizer.param_groups
        planned = [base * f(scheduler.last_epoch) for base, f in zip(scheduler.base_lrs, scheduler.lr_lambdas,
                                                                         strict=True)]  # fmt: skip
        if any(g["lr"] != lr for g, lr in zip(groups, planned, strict=True)):
            if trainer.is_global_zero:
                log.info("resume: the learning-rate schedule is planned over the budget as it is now: %.3g at step "
                         "%d (%.3g as saved)", planned[0], scheduler.last_epoch, groups[0]["lr"])  # fmt: skip
            for group, lr in zip(groups, planned, strict=True):
                group["lr"] = lr
