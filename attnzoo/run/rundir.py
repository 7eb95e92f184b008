"""Run directories: where a new run goes, what `--resume` continues, and loading a finished run for a command.

A run directory `<run.dir>/<run.name>/<timestamp>/` holds `config.yaml` (resolved, with derived values),
`checkpoints/` (`last.ckpt`, `best.ckpt`), `metrics.csv`, `summary.json`, and what the DataModule's
`save_artifacts(run_dir)` writes (the text data's label vocabulary, `labels.json`).
"""

from __future__ import annotations

import datetime
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..config import Config, ConfigError, load

RUN_DIR_ENV = "ATTNZOO_RUN_DIR"  # how DDP worker processes (re-running the command) find rank 0's run dir


def new_run_dir(cfg: Config) -> Path:
    """`<run.dir>/<run.name>/<timestamp>`; DDP workers reuse rank 0's through the environment."""
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    run = cfg.section("run")
    base = Path(run.get("dir", "runs")) / run.get("name", cfg.section("model").get("kind", "run"))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = base / stamp, 1
    while path.exists():
        path, n = base / f"{stamp}-{n}", n + 1
    return path


def resume_target(path: str | Path) -> tuple[Path, Path]:
    """(run dir, checkpoint) from a run directory or a checkpoint inside one."""
    path = Path(path)
    if path.is_dir():
        ckpt = path / "checkpoints" / "last.ckpt"
        run_dir = path
    elif path.is_file():
        ckpt, run_dir = path, path.parent.parent
    else:
        raise ConfigError(f"--resume: {str(path)!r} is neither a run directory nor a checkpoint file")
    if not ckpt.is_file():
        raise ConfigError(f"--resume: no checkpoint at {str(ckpt)!r}")
    return run_dir, ckpt


def run_checkpoint(run_dir: Path, checkpoint: str) -> Path:
    """The checkpoint file of a run directory: `best`, `last`, or a path; errors name what is missing."""
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    ckpt = run_dir / "checkpoints" / f"{checkpoint}.ckpt" if checkpoint in ("best", "last") else Path(checkpoint)
    if not ckpt.is_file():
        raise ConfigError(f"--checkpoint: no checkpoint file at {str(ckpt)!r}")
    return ckpt


@dataclass
class LoadedRun:
    """A finished run rebuilt for a command: its config, data (set up), task with the checkpoint's weights."""

    run_dir: Path
    checkpoint: Path
    cfg: Config
    data: Any
    task: Any

    @property
    def net(self) -> Any:
        return self.task.net

    @property
    def data_kind(self) -> str:
        return self.cfg.section("data")["kind"]


def load_run(
    run_dir: str | Path, checkpoint: str = "best", configs: Sequence[str | Path] = (), overrides: Sequence[str] = ()
) -> LoadedRun:
    """Rebuild a run from its `config.yaml` (plus overlays and overrides) and load a checkpoint's weights.

    This is the one way every command (evaluate, viz, ...) reads a run.
    """
    import torch

    from .build import build

    run_dir = Path(run_dir)
    ckpt = run_checkpoint(run_dir, checkpoint)
    cfg = load([run_dir / "config.yaml", *configs], overrides)
    _use_saved_labels(cfg, run_dir)
    data, task, _ = build(cfg)
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    except Exception as err:  # noqa: BLE001 (any unreadable file gets the same message)
        raise ConfigError(f"checkpoint {str(ckpt)!r} cannot be read ({type(err).__name__}: {err})") from None
    try:
        task.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigError(f"checkpoint {str(ckpt)!r} does not fit the model of {run_dir}/config.yaml: {err}") from None
    return LoadedRun(run_dir, ckpt, cfg, data, task)


def _use_saved_labels(cfg: Config, run_dir: Path) -> None:
    """The run's `labels.json` (its class names in training order) as `data.labels`, unless the config sets it:
    the data read now may hold other classes, or the same ones in another order."""
    from ..data import DATAMODULES

    saved = run_dir / "labels.json"
    data: dict[str, Any] = cfg.section("data")
    module = DATAMODULES.get(data.get("kind"))
    if saved.is_file() and data.get("labels") is None and module is not None:
        if "labels" in inspect.signature(module).parameters:
            OmegaConf.update(cfg.data, "data.labels", str(saved))
