"""`python -m attnzoo.evaluate <run dir> [--checkpoint best|last|FILE] [--split test|val] [key=value ...]`

Test metrics of a saved checkpoint: rebuilds data, model and task from the run's `config.yaml` (plus any
`--config` overlays and overrides, e.g. another data folder), runs the split, prints the metrics and writes
them to `<run dir>/evaluate-<checkpoint>.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import ConfigError, load
from .fit import _show_attnzoo_log, build, run_checkpoint


def evaluate(run_dir: Path, checkpoint: str, split: str, configs: Sequence[str], overrides: Sequence[str]) -> dict:
    import lightning as L

    ckpt = run_checkpoint(run_dir, checkpoint)
    cfg = load([run_dir / "config.yaml", *configs], overrides)
    _use_saved_labels(cfg, run_dir)
    try:
        data, task, _ = build(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    keep = ("accelerator", "precision", "enable_progress_bar", "limit_test_batches", "limit_val_batches")
    trainer_cfg = {k: v for k, v in cfg.section("trainer").items() if k in keep}
    trainer = L.Trainer(**trainer_cfg, devices=1, logger=False)
    run = trainer.test if split == "test" else trainer.validate
    results = run(task, datamodule=data, ckpt_path=str(ckpt), verbose=False)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    report = {"checkpoint": str(ckpt), "split": split, "metrics": metrics}
    name = checkpoint if checkpoint in ("best", "last") else ckpt.stem
    (run_dir / f"evaluate-{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _use_saved_labels(cfg, run_dir: Path) -> None:
    """The run's `labels.json` (its class names in training order) as `data.labels`, unless the config sets it:
    the evaluated data may hold other classes, or the same ones in another order."""
    import inspect

    from omegaconf import OmegaConf

    from .data import DATAMODULES

    saved = run_dir / "labels.json"
    data = cfg.section("data")
    module = DATAMODULES.get(data.get("kind"))
    if saved.is_file() and data.get("labels") is None and module is not None:
        if "labels" in inspect.signature(module).parameters:
            OmegaConf.update(cfg.data, "data.labels", str(saved))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo evaluate", description="Metrics of a saved checkpoint.")
    p.add_argument("run_dir", type=Path, help="a run directory written by attnzoo fit")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--split", choices=("test", "val"), default="test")
    p.add_argument("--config", action="append", default=[], help="overlays on the run's config")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. data.root=/other/images")
    args = p.parse_intermixed_args(argv)
    _show_attnzoo_log()
    try:
        report = evaluate(args.run_dir, args.checkpoint, args.split, args.config, args.overrides)
    except ConfigError as err:
        print(f"attnzoo evaluate: error: {err}", file=sys.stderr)
        return 2
    for key, value in sorted(report["metrics"].items()):
        print(f"{key:20s} {value:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
