"""What a run writes besides checkpoints: the metrics CSV (kept consistent with checkpoints) and the summary.

`metrics.csv` is the run's append-only history. `RunCSVLogger` is Lightning's CSVLogger writing
`<run>/metrics.csv` as rows are logged, except that an existing file is kept (a resumed run appends to it).
`MetricsCheckpointSync` stores in each checkpoint how many rows were on disk and the logging step of the batch
being saved: Lightning saves in `on_train_batch_end` and logs that batch's rows (train, and validation at an
epoch end) just after, and does not redo them on resume. Resuming training drops the train and validation rows
logged after that checkpoint (they are logged again, so none is lost or duplicated); nothing else ever cuts the
file: restoring a checkpoint to test it leaves it alone, and every test pass keeps its row, which names the
step of the checkpoint it scored (`test/checkpoint_step`).
"""

from __future__ import annotations

import collections
import csv
import resource
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only

from ..config import ConfigError
from ..util.checks import WRITES, is_count, is_integer, is_number, shown
from ..util.files import replacing
from .checkpoint_io import metric_value, tie_wins


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
        """Keep the first `rows` rows on disk, the rows of `step` right after them, and every test row; drop the
        other rows (training and validation logged after the checkpoint being resumed)."""
        self.metrics = []
        if not self._fs.isfile(self.metrics_file_path):
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            on_disk = list(csv.DictReader(f))
        kept, saved_batch = on_disk[:rows], True
        for row in on_disk[rows:]:
            saved_batch = saved_batch and row.get("step") == str(step)
            if saved_batch or is_test_row(row):
                kept.append(row)
        if len(kept) == len(on_disk):
            return
        self._replace_rows(kept, self.metrics_keys)

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        """Lightning's rewrite when a column appears (the first validation, the test pass), made whole: it rewrote
        the file in place, so a full disk left it cut short and the rows logged before were lost."""
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            rows = list(csv.DictReader(f))
        self._replace_rows(rows, fieldnames)

    def _replace_rows(self, rows: list[dict[str, Any]], fieldnames: list[str]) -> None:
        """metrics.csv holding `rows` under `fieldnames`: written beside it, then renamed over it (`replacing`)."""
        with replacing(Path(self.metrics_file_path)) as tmp, self._fs.open(str(tmp), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)


def check_history(path: Path) -> None:
    """Raise ConfigError when an existing metrics.csv is not one a run wrote (unreadable text, no `step` column):
    a resume appends to it and cuts it back to its checkpoint, which needs its rows."""
    if not path.is_file():
        return
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            for _ in reader:
                pass
    except (UnicodeDecodeError, csv.Error) as err:
        problem = f"{type(err).__name__}: {err}"
    else:
        problem = "" if not fields or "step" in fields else f"no 'step' column (columns: {fields[:8]})"
    if problem:
        raise ConfigError(
            f"{path} is not a metrics history written by attnzoo ({problem}); move it away to resume (the resumed "
            "run then starts a new metrics.csv)"
        )


def is_test_row(row: dict[str, str]) -> bool:
    """Whether a metrics.csv row was written by a test pass."""
    return any(key.startswith("test/") and value not in ("", None) for key, value in row.items())


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
    """Flush the metrics CSV with every checkpoint; when training resumes from one, drop the train and validation
    rows logged after it. A test pass logs the step of the checkpoint it scores as `test/checkpoint_step`."""

    def __init__(self, logger: RunCSVLogger) -> None:
        self.logger = logger
        self.trainer: L.Trainer | None = None
        self._loaded_step: int | None = None

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self.trainer = trainer
        self._loaded_step = None  # setup runs before a checkpoint is restored

    def on_load_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._loaded_step = int(checkpoint.get("global_step", 0))

    def on_test_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        step = self._loaded_step if self._loaded_step is not None else trainer.global_step  # else: final weights
        module.log("test/checkpoint_step", float(step), on_epoch=True, batch_size=1, sync_dist=True)  # one per rank

    def state_dict(self) -> dict[str, Any]:
        writer = self.logger.experiment
        if writer is None or self.trainer is None:  # not rank 0
            return {}
        writer.save()
        loop = self.trainer.fit_loop.epoch_loop
        progress = loop.batch_progress.current
        # saved in a batch's on_train_batch_end: that batch's rows are logged just after, at this step; saved at an
        # epoch end or after validation: every row of the checkpoint is on disk already (-1 keeps no more)
        step = loop._batches_that_stepped if progress.processed > progress.completed else -1
        return {"rows": writer.rows_on_disk(), "step": step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        resuming = self.trainer is not None and self.trainer.state.fn == TrainerFn.FITTING  # not a test restore
        writer = self.logger.experiment
        if resuming and writer is not None and "rows" in state:
            writer.truncate(state["rows"], state["step"])

    @staticmethod
    def saved_state_error(state: dict[str, Any]) -> str | None:
        """What in a saved state (`state_dict`) is not what attnzoo fit writes, or None: metrics.csv is cut to it."""
        if "rows" in state and not (is_count(state["rows"]) and is_integer(state.get("step"))):
            return f"holds rows {shown(state['rows'])} and step {shown(state.get('step'))}, where {WRITES} is integers"
        return None


class RunSummary(L.Callback):
    """Measures training throughput (samples/s over all processes, training batches only) and the share of
    training time spent waiting for data, and collects the facts of a run for `summary.json`.

    Data wait is the time from the end of one training batch to the start of the next in the same epoch
    (the loader fetching the next batch; Lightning's own bookkeeping between batches is counted too, so
    this is an upper bound); gaps holding a validation loop are not counted.
    """

    def __init__(
        self, *, monitor: str | None = None, mode: str = "max", floor: float | None = None, tie_break: str = "val/loss"
    ) -> None:
        """`floor`, `tie_break`: as the best checkpoint's (`RunCheckpoint`): while the monitored value stays at the
        floor (BLEU 0), the best validation is the one of the lowest `tie_break`, the epoch best.ckpt holds."""
        self.monitor, self.mode, self.floor, self.tie_break = monitor, mode, floor, tie_break
        self.best: tuple[int, float] | None = None  # (epoch, value) of the best monitored validation
        self.best_tie: float | None = None  # its tie-break value, while at the floor
        self.started = False  # whether training began (on_train_start ran)
        self.train_seconds = 0.0
        self.train_samples = 0
        self.wait_seconds = 0.0
        self._t0 = 0.0
        self._last_end: float | None = None
        self.train_backends: dict[str, int] | None = None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.started = True

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._last_end = None

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._last_end = None

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        if trainer.sanity_checking or value is None or not torch.isfinite(value):
            return
        value = float(value)
        tie = metric_value(trainer, self.tie_break)
        better = self.best is None or (value > self.best[1] if self.mode == "max" else value < self.best[1])
        if not better and self.floor is not None and value == self.best[1] == self.floor:
            better = tie_wins(tie, self.best_tie)
        if better:
            self.best, self.best_tie = (trainer.current_epoch, value), tie

    def state_dict(self) -> dict[str, Any]:
        return {"best": list(self.best) if self.best else None, "best_tie": self.best_tie}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = tuple(state["best"]) if state.get("best") else None
        self.best_tie = state.get("best_tie")

    @staticmethod
    def saved_state_error(state: dict[str, Any]) -> str | None:
        """What in a saved state (`state_dict`) is not what attnzoo fit writes, or None."""
        best, tie = state.get("best"), state.get("best_tie")
        if best and not (
            isinstance(best, list | tuple) and len(best) == 2 and is_count(best[0]) and is_number(best[1])
        ):
            return f"holds best {shown(best)}, where {WRITES} is None or [epoch, value]"
        if tie is not None and not is_number(tie):
            return f"holds best_tie {shown(tie)}, where {WRITES} is None or a number"
        return None

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, idx: int) -> None:
        self._t0 = time.perf_counter()
        if self._last_end is not None:
            self.wait_seconds += self._t0 - self._last_end

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, out: Any, batch: Any, idx: int) -> None:
        self._last_end = time.perf_counter()
        self.train_seconds += self._last_end - self._t0
        self.train_samples += batch_samples(batch) * trainer.world_size
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
            "stopped": stop_reason(trainer),
            "best_epoch": self.best[0] if self.best else None,  # epoch (from 0) of the best validation
            "world_size": trainer.world_size,
            "precision": str(trainer.precision),
            **peak,
        }


def stop_reason(trainer: L.Trainer) -> dict[str, Any]:
    """Why `trainer.fit` returned: {"reason": "early_stopping" | "budget" | "signal", "epoch", "message"}.

    `epoch` counts the epochs trained (a stop mid-epoch counts the started one).
    """
    from lightning.pytorch.callbacks import Timer
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    epoch = trainer.current_epoch
    for callback in getattr(trainer, "early_stopping_callbacks", []):
        if callback.stopping_reason != EarlyStoppingReason.NOT_STOPPED:
            return {"reason": "early_stopping", "epoch": epoch, "message": callback.stopping_reason_message}
    if getattr(trainer, "interrupted", False):
        return {"reason": "signal", "epoch": epoch, "message": "interrupted (Lightning caught the signal)"}
    max_steps, max_epochs = getattr(trainer, "max_steps", -1), getattr(trainer, "max_epochs", -1)
    if max_steps not in (None, -1) and trainer.global_step >= max_steps:
        return {"reason": "budget", "epoch": epoch, "message": f"trainer.max_steps ({max_steps}) reached"}
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    if timer is not None and timer.time_remaining() is not None and timer.time_remaining() <= 0:
        return {"reason": "budget", "epoch": epoch, "message": f"trainer.max_time ({timer._duration:.0f} s) reached"}
    if max_epochs not in (None, -1) and epoch >= max_epochs:
        return {"reason": "budget", "epoch": epoch, "message": f"trainer.max_epochs ({max_epochs}) reached"}
    return {"reason": "budget", "epoch": epoch, "message": "a trainer limit was reached"}


def batch_samples(batch: Any) -> int:
    """Examples in a batch: the length of its "label" tensor (classification), else of its first tensor (a
    translation or language-model batch holds text lists besides)."""
    if isinstance(batch, dict):
        first = batch["label"] if "label" in batch else next(v for v in batch.values() if isinstance(v, torch.Tensor))
    else:
        first = next(v for v in batch if isinstance(v, torch.Tensor))
    return int(first.shape[0])


def _backends(module: torch.nn.Module) -> dict[str, int]:
    """Backend name -> how many attention modules ran their last call on it."""
    used = [m.backend_used for m in module.modules() if getattr(m, "backend_used", None) is not None]
    return dict(collections.Counter(used))
