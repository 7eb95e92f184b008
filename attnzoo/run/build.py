"""Building a run from its config: data (set up) -> network -> task (LightningModule) -> Trainer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..config import (
    TRAINER_EXTRAS,
    Config,
    ConfigError,
    auto_keys,
    build_data,
    build_net,
    build_task,
    early_stopping_options,
    validate,
)
from .switches import apply_grad_checkpointing, compile_net, resolve_precision

log = logging.getLogger("attnzoo")


def resolve_auto_precision(cfg: Config) -> None:
    """`trainer.precision: auto` -> the value for this machine, logged and written into `cfg` (the saved config)."""
    trainer_cfg = cfg.section("trainer")
    if trainer_cfg.get("precision") != "auto":
        return
    value, why = resolve_precision("auto", trainer_cfg.get("accelerator", "auto"))
    log.info("trainer.precision: auto -> %s (%s)", value, why)
    OmegaConf.update(cfg.data, "trainer.precision", value)


def apply_auto_values(cfg: Config, data: Any) -> None:
    """Write what the data chose for `auto` keys into `cfg` (and so into the run's config.yaml), logging each.

    The DataModule's `auto_values()` gives {dotted key: (value, why)}: its own `data.*` options it resolved, and
    a value for each key of its `AUTO_KEYS`, used where the config says `auto`.
    """
    wanted = set(auto_keys(cfg))
    chosen = data.auto_values() if hasattr(data, "auto_values") else {}
    for key, (value, why) in chosen.items():
        if key.startswith("data.") or key in wanted:
            log.info("%s: auto -> %s (%s)", key, value, why)
            OmegaConf.update(cfg.data, key, value, merge=False, force_add=True)
    missing = sorted(wanted - set(chosen))
    if missing:
        raise ConfigError(f"{missing}: 'auto', but the data chose no value for them here; set values")
    validate(cfg)  # the chosen values, checked as if the config had set them


def build(cfg: Config) -> tuple[Any, Any, dict[str, Any]]:
    """(data, task, context): the DataModule (set up), the LightningModule with its network, the data context.

    Bad values the config's signatures cannot catch (a missing data folder, ...) raise ConfigError here,
    before any training.
    """
    import lightning as L

    L.seed_everything(cfg.data.get("seed", 0), workers=True, verbose=False)
    resolve_auto_precision(cfg)
    trainer_cfg = cfg.section("trainer")
    if trainer_cfg.get("num_threads"):  # intra-op threads of each process (torch.set_num_threads)
        import torch

        torch.set_num_threads(trainer_cfg["num_threads"])
    section = "data"
    try:
        data = build_data(cfg)
        apply_auto_values(cfg, data)
        context = data.model_context()
        section = "model"
        net = build_net(cfg, context)
        apply_grad_checkpointing(net, trainer_cfg.get("grad_checkpointing"))
        if trainer_cfg.get("compile"):
            compile_net(net)
        section = "task"
        task = build_task(cfg, net, context)
    except ConfigError:
        raise
    except ValueError as err:  # a builder's own check; name the section when the message does not
        text = str(err)
        named = text.startswith((f"{section}.", f"{section}:", f"{section} ")) or section == "data"
        raise ConfigError(text if named else f"{section} (kind {cfg.section(section).get('kind')!r}): {text}") from err
    return data, task, context


def check_monitor(cfg: Config, task: Any) -> str:
    """`run.monitor` (default `val/<the objective's monitor>`); ConfigError when the task never logs it."""
    from ..attention.factory import suggest

    monitor = cfg.section("run").get("monitor") or f"val/{task.monitor}"
    logged = getattr(task, "logged_metrics", None)
    if callable(logged):
        known = [*logged(), "epoch", "step"]
        if monitor not in known:
            raise ConfigError(
                f"run.monitor: {monitor!r} (set in {cfg.where('run.monitor')}) is not a metric this run logs; "
                f"valid: {known}{suggest(monitor, known)}"
            )
    return monitor


def make_trainer(cfg: Config, run_dir: Path, task: Any, extra_callbacks: Sequence[Any] = ()) -> tuple[Any, Any]:
    """(Trainer, RunSummary callback) writing into `run_dir`.

    `best.ckpt` follows `run.monitor`; with `run.early_stopping` training stops when it has not improved for
    `patience` validations, `trainer.max_epochs` being the ceiling.
    """
    import lightning as L
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from . import reliability
    from .cluster import slurm_job
    from .metrics import MetricsCheckpointSync, RunCSVLogger, RunSummary
    from .stalled import LearningCheck

    run = cfg.section("run")
    monitor = check_monitor(cfg, task)
    mode = run.get("mode") or task.monitor_mode
    ckpt_dir = run_dir / "checkpoints"
    logger = RunCSVLogger(str(run_dir))
    summary = RunSummary(monitor=monitor, mode=mode)
    callbacks = [
        ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor=monitor, mode=mode, enable_version_counter=False),
        # last.ckpt after every epoch, improved or not (Lightning's save_last follows the best checkpoint's saves)
        ModelCheckpoint(dirpath=ckpt_dir, filename="last", monitor=None, enable_version_counter=False),
        MetricsCheckpointSync(logger),
        summary,
        LearningCheck(),
        *reliability.callbacks(ckpt_dir / "last.ckpt", slurm_job=slurm_job()),
        *extra_callbacks,
    ]
    stopping = early_stopping_options(run.get("early_stopping"))
    if stopping is not None and monitor in ("epoch", "step"):  # counters, not metrics: nothing to wait for
        log.info("run.early_stopping: off, run.monitor is %r (a counter)", monitor)
        stopping = None
    if stopping is not None:
        # checked after each validation only: a run stopped mid-epoch (max_steps) has no val metric to check
        callbacks.append(EarlyStopping(monitor=monitor, mode=mode, check_on_train_epoch_end=False, **stopping))
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
    plugins: list[Any] = [reliability.AtomicCheckpointIO()]
    if slurm_job() is not None:  # SIGUSR1 stops and requeues through GracefulStop, not Lightning's handler
        from lightning.fabric.plugins.environments import SLURMEnvironment

        plugins.append(SLURMEnvironment(auto_requeue=False))
    try:
        trainer = L.Trainer(
            **kwargs, logger=logger, callbacks=callbacks, plugins=plugins, default_root_dir=str(run_dir)
        )
    except (MisconfigurationException, ValueError, ImportError, RuntimeError) as err:  # devices=0, no GPU, ...
        shown = {k: kwargs[k] for k in ("accelerator", "devices", "strategy", "precision") if k in kwargs}
        raise ConfigError(f"trainer {shown}: {err}") from None
    return trainer, summary
