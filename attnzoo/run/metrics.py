"""What a run writes besides checkpoints: the metrics CSV (kept consistent with checkpoints) and the summary.

`RunCSVLogger` is Lightning's CSVLogger writing `<run>/metrics.csv` as rows are logged, except that an
existing file is kept (a resumed run appends to it). `MetricsCheckpointSync` stores in each checkpoint how
many rows were on disk and the logging step of the batch being saved: Lightning saves in
`on_train_batch_end` and logs that batch's rows (train, and validation at an epoch end) just after, and does
not redo them on resume. Resuming cuts the file back to those rows plus the saved batch's own rows, so rows
logged after the checkpoint (and logged again after resuming) are neither lost nor duplicated.
"""

from __future__ import annotations

import collections
import csv
import resource
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only


class _KeepingWriter(ExperimentWriter):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])

    def _check_log_dir_exists(self) -> None:  # Lightning deletes an existing metrics file here
        pass

    def rows_on_disk(self) -> int:
        if not self._fs.isfile(self.metrics_file_path):
            return 0
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            return sum(1 for _ in csv.DictReader(f))

    def truncate(self, rows: int, step: int) -> None:
        """Keep the first `rows` rows on disk and the rows of `step` right after them; drop the rest."""
        self.metrics = []
        if not self._fs.isfile(self.metrics_file_path):
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            on_disk = list(csv.DictReader(f))
        kept = on_disk[:rows]
        for row in on_disk[rows:]:
            if row.get("step") != str(step):
                break
            kept.append(row)
        with self._fs.open(self.metrics_file_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)


class RunCSVLogger(CSVLogger):
    """`<run_dir>/metrics.csv`: one row per logging step (train) or evaluation (val/test), column `step`."""

    def __init__(self, run_dir: str) -> None:
        super().__init__(save_dir=run_dir, name="", version="", flush_logs_every_n_steps=1)

    @property
    def experiment(self) -> _KeepingWriter:
        if self._experiment is None and rank_zero_only.rank == 0:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment

    def log_hyperparams(self, params: Any = None) -> None:  # the run dir keeps config.yaml instead
        pass


class MetricsCheckpointSync(L.Callback):
    """Flush the metrics CSV with every checkpoint; on resume, cut it back to the rows of that checkpoint."""

    def __init__(self, logger: RunCSVLogger) -> None:
        self.logger = logger
        self.trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        writer = self.logger.experiment
        if writer is None or self.trainer is None:  # not rank 0
            return {}
        writer.save()
        return {"rows": writer.rows_on_disk(), "step": self.trainer.fit_loop.epoch_loop._batches_that_stepped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        writer = self.logger.experiment
        if writer is not None and "rows" in state:
            writer.truncate(state["rows"], state["step"])


class RunSummary(L.Callback):
    """Measures training throughput (samples/s over all processes, training batches only) and the share of
    training time spent waiting for data, and collects the facts of a run for `summary.json`.

    Data wait is the time from the end of one training batch to the start of the next in the same epoch
    (the loader fetching the next batch; Lightning's own bookkeeping between batches is counted too, so
    this is an upper bound); gaps holding a validation loop are not counted.
    """

    def __init__(self) -> None:
        self.train_seconds = 0.0
        self.train_samples = 0
        self.wait_seconds = 0.0
        self._t0 = 0.0
        self._last_end: float | None = None
        self.train_backends: dict[str, int] | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._last_end = None

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._last_end = None

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, idx: int) -> None:
        self._t0 = time.perf_counter()
        if self._last_end is not None:
            self.wait_seconds += self._t0 - self._last_end

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, out: Any, batch: Any, idx: int) -> None:
        self._last_end = time.perf_counter()
        self.train_seconds += self._last_end - self._t0
        self.train_samples += int(batch["label"].shape[0]) * trainer.world_size
        if idx == 0:  # what training runs on (validation and test may take other backends, e.g. inference-only)
            self.train_backends = _backends(module)

    def report(self, trainer: L.Trainer, module: L.LightningModule) -> dict[str, Any]:
        backends = self.train_backends if self.train_backends is not None else _backends(module)
        peak = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        if torch.cuda.is_available():
            peak["peak_cuda_bytes"] = torch.cuda.max_memory_allocated()
        return {
            "parameters": sum(p.numel() for p in module.parameters()),
            "trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
            "train_samples_per_second": self.train_samples / self.train_seconds if self.train_seconds else None,
            "train_seconds": self.train_seconds,
            # time waiting for the next batch / (waiting + training steps), over training batches
            "data_wait_share": (
                self.wait_seconds / (self.wait_seconds + self.train_seconds) if self.train_seconds else None
            ),
            "attention_backends": backends,  # backend -> attention modules that ran on it in training
            "global_step": trainer.global_step,
            "epochs": trainer.current_epoch,
            "world_size": trainer.world_size,
            "precision": str(trainer.precision),
            **peak,
        }


def _backends(module: torch.nn.Module) -> dict[str, int]:
    """Backend name -> how many attention modules ran their last call on it."""
    used = [m.backend_used for m in module.modules() if getattr(m, "backend_used", None) is not None]
    return dict(collections.Counter(used))
