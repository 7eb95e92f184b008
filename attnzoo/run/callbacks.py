"""The callbacks `attnzoo.fit` adds to every run, besides checkpointing and metrics (`attnzoo.run.build`)."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from .nan_guard import FiniteLoss
from .resume_position import ResumeDataPosition
from .signals import GracefulStop
from .tokenizer_stamp import TokenizerStamp


def callbacks(checkpoint: str | Path, *, slurm_job: str | None = None) -> list[L.Callback]:
    """Stop on a non-finite loss, stop cleanly on a signal (`slurm_job`: the job to requeue on SIGUSR1), resume at
    the position in the epoch, and record the tokenizer's digest in every checkpoint."""
    return [
        FiniteLoss(),
        GracefulStop(checkpoint=checkpoint, slurm_job=slurm_job),
        ResumeDataPosition(),
        TokenizerStamp(),
    ]
