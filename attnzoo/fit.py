"""`python -m attnzoo.fit --config recipes/<recipe>.yaml [--config overlay.yaml ...] [key=value ...]`

Builds data -> model -> task -> Trainer from the config and trains. Each run gets a directory
`<run.dir>/<run.name>/<timestamp>/` holding `config.yaml` (resolved, with derived values), `checkpoints/`
(`last.ckpt`, `best.ckpt`), `metrics.csv`, `summary.json`, and what the DataModule's `save_artifacts(run_dir)`
writes, if it has one (the text data's label vocabulary, `labels.json`).

Resume a stopped run with `--resume <run dir or .ckpt>`: it reuses the run's `config.yaml` (or the
`--config` files given), its directory, and continues from `last.ckpt` (or the given checkpoint).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from .config import Config, ConfigError, build_data, build_net, build_task, load
from .perf import apply_grad_checkpointing, compile_net, resolve_precision

log = logging.getLogger("attnzoo")
RUN_DIR_ENV = "ATTNZOO_RUN_DIR"  # how DDP worker processes (re-running this command) find rank 0's run dir


def _is_rank_zero() -> bool:
    return (
        int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0))) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0
    )


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


def _resolve_precision(cfg: Config) -> None:
    """`trainer.precision: auto` -> the value for this machine, logged and written into `cfg` (the saved config)."""
    trainer_cfg = cfg.section("trainer")
    if trainer_cfg.get("precision") != "auto":
        return
    value, why = resolve_precision("auto", trainer_cfg.get("accelerator", "auto"))
    log.info("trainer.precision: auto -> %s (%s)", value, why)
    OmegaConf.update(cfg.data, "trainer.precision", value)


def build(cfg: Config) -> tuple[Any, Any, dict[str, Any]]:
    """(data, task, context): the DataModule (set up), the LightningModule with its network, the data context."""
    import lightning as L

    L.seed_everything(cfg.data.get("seed", 0), workers=True, verbose=False)
    _resolve_precision(cfg)
    threads = cfg.section("trainer").get("num_threads")
    if threads:  # intra-op threads of each process (torch.set_num_threads)
        import torch

        torch.set_num_threads(threads)
    data = build_data(cfg)
    context = data.model_context()
    net = build_net(cfg, context)
    trainer_cfg = cfg.section("trainer")
    apply_grad_checkpointing(net, trainer_cfg.get("grad_checkpointing"))
    if trainer_cfg.get("compile"):
        compile_net(net)
    task = build_task(cfg, net, context)
    return data, task, context


def make_trainer(cfg: Config, run_dir: Path, task: Any, extra_callbacks: Sequence[Any] = ()) -> tuple[Any, Any]:
    """(Trainer, RunSummary callback) writing into `run_dir`."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from . import reliability
    from .config import TRAINER_EXTRAS
    from .runlog import MetricsCheckpointSync, RunCSVLogger, RunSummary

    run = cfg.section("run")
    monitor = run.get("monitor") or f"val/{task.monitor}"
    mode = run.get("mode") or task.monitor_mode
    ckpt_dir = run_dir / "checkpoints"
    logger = RunCSVLogger(str(run_dir))
    summary = RunSummary()
    callbacks = [
        ModelCheckpoint(
            dirpath=ckpt_dir, filename="best", monitor=monitor, mode=mode, save_last=True, enable_version_counter=False
        ),
        MetricsCheckpointSync(logger),
        summary,
        *reliability.callbacks(ckpt_dir / "last.ckpt"),
        *extra_callbacks,
    ]
    if run.get("save_every_n_steps"):
        callbacks.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                every_n_train_steps=run["save_every_n_steps"],
                enable_version_counter=False,
            )
        )
    kwargs = {k: v for k, v in cfg.section("trainer").items() if k not in TRAINER_EXTRAS}
    plugins = [reliability.AtomicCheckpointIO()]
    trainer = L.Trainer(**kwargs, logger=logger, callbacks=callbacks, plugins=plugins, default_root_dir=str(run_dir))
    return trainer, summary


def fit(
    cfg: Config,
    *,
    resume: str | Path | None = None,
    run_dir: str | Path | None = None,
    extra_callbacks: Sequence[Any] = (),
) -> Path:
    """Train `cfg`; returns the run directory (`run_dir` if given, else a new one under `run.dir`)."""
    ckpt_path = None
    if resume is not None:
        run_dir, ckpt_path = resume_target(resume)
    else:
        run_dir = Path(run_dir) if run_dir is not None else new_run_dir(cfg)
    try:  # bad values the signatures cannot catch (a missing data folder, ...) stop here, before training
        data, task, _ = build(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if ckpt_path is not None:
        from .reliability import check_checkpoint_shapes

        try:
            check_checkpoint_shapes(ckpt_path, task)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from err
    trainer, summary = make_trainer(cfg, run_dir, task, extra_callbacks)
    if trainer.is_global_zero and _is_rank_zero():
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


def _show_attnzoo_log() -> None:
    """Print attnzoo's INFO messages (backend choices, data sizes); Lightning keeps its own handler."""
    logger = logging.getLogger("attnzoo")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", action="append", default=[], help="a recipe YAML; repeat to overlay more files")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.max_epochs=3")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("attnzoo fit", "Train a recipe.")
    p.add_argument("--resume", help="a run directory (continues from its last.ckpt) or a checkpoint file")
    p.add_argument("--run-dir", help="write the run into this directory instead of <run.dir>/<run.name>/<time>")
    args = p.parse_intermixed_args(argv)
    _show_attnzoo_log()
    try:
        if args.resume and args.run_dir:
            raise ConfigError("--run-dir and --resume exclude each other (a resumed run keeps its directory)")
        configs = args.config
        if args.resume and not configs:
            configs = [resume_target(args.resume)[0] / "config.yaml"]
        cfg = load(configs, args.overrides)
    except ConfigError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    from .reliability import Interrupted, NonFiniteLossError

    try:
        run_dir = fit(cfg, resume=args.resume, run_dir=args.run_dir)
    except ConfigError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"attnzoo fit: {err}; continue with --resume {Path(err.checkpoint).parent.parent}", file=sys.stderr)
        return err.exit_code
    except NonFiniteLossError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 1
    if _is_rank_zero():
        print(f"attnzoo: done; summary in {run_dir / 'summary.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
