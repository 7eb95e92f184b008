"""Training a run: `fit(cfg)` builds it, trains, tests the best checkpoint and writes `summary.json`."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError
from .build import build, make_trainer
from .console import is_rank_zero
from .rundir import RUN_DIR_ENV, new_run_dir, resume_target


def fit(
    cfg: Config,
    *,
    resume: str | Path | None = None,
    run_dir: str | Path | None = None,
    extra_callbacks: Sequence[Any] = (),
) -> Path:
    """Train `cfg`; returns the run directory (`run_dir` if given, else a new one under `run.dir`).

    Args:
        resume: a run directory (continues from its `last.ckpt`) or a checkpoint file inside one.
        run_dir: write the run here instead of `<run.dir>/<run.name>/<timestamp>`.
        extra_callbacks: Lightning callbacks added to the run's own.
    """
    ckpt_path = None
    if resume is not None:
        run_dir, ckpt_path = resume_target(resume)
    else:
        run_dir = Path(run_dir) if run_dir is not None else new_run_dir(cfg)
    data, task, _ = build(cfg)
    if ckpt_path is not None:
        from .reliability import check_checkpoint_shapes

        try:
            check_checkpoint_shapes(ckpt_path, task)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from err
    trainer, summary = make_trainer(cfg, run_dir, task, extra_callbacks)
    if trainer.is_global_zero and is_rank_zero():
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(cfg.to_yaml())
        if hasattr(data, "save_artifacts"):  # what the data derived and a run must keep (label vocabulary, audio stats)
            data.save_artifacts(run_dir)
        print(f"attnzoo: run directory {run_dir}", file=sys.stderr)
    os.environ[RUN_DIR_ENV] = str(run_dir)  # DDP workers started by Lightning inherit it
    try:
        trainer.fit(task, datamodule=data, ckpt_path=str(ckpt_path) if ckpt_path else None)
    finally:
        os.environ.pop(RUN_DIR_ENV, None)
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }
    best = trainer.checkpoint_callback
    if best is not None and best.best_model_path:
        result["best"] = {"path": best.best_model_path, best.monitor: float(best.best_model_score)}
    result.update(summary.report(trainer, task))
    if cfg.section("run").get("test"):
        tested = best.best_model_path if best is not None and best.best_model_path else None  # None: final weights
        out = trainer.test(task, datamodule=data, ckpt_path=tested, verbose=False)
        result["test"] = {k: float(v) for k, v in (out[0] if out else {}).items()}
        result["test"]["checkpoint"] = tested or "final weights (no validation ran, so no best checkpoint)"
    if trainer.is_global_zero:
        (run_dir / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return run_dir
