"""What several test modules share (recipes, quick-run overrides, fakes), so no test module imports another."""

from __future__ import annotations

import json
from pathlib import Path

from attnzoo.config import Config

ROOT = Path(__file__).resolve().parents[2]  # the repository
VIT = ROOT / "recipes" / "vit.yaml"
QUICK = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.precision=32-true",
]
# a ViT small enough that a few optimizer steps take well under a second
TINY = ["model.embed_dim=16", "model.depth=1", "model.num_heads=2", "model.patch_size=7", "model.mlp_ratio=1.0"]
# a deterministic CPU trainer of 2 epochs of 4 batches, one thread, no test pass: for any recipe
TINY_TRAINER = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.precision=32-true",
    "trainer.num_threads=1",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "run.test=false",
]
# a tiny deterministic ViT run on that trainer, augmentation on (so random state matters on resume)
TINY_RUN = [*TINY_TRAINER, *TINY, "data.batch_size=8", "data.augment=true"]
# a smoke run's length: two optimizer steps, one validation and one test batch, every step logged
SMOKE_STEPS = [
    "trainer.max_steps=2",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
]
# the sizes a checkpoint gives the model (`model.init_from`): a recipe's smoke sizes give way to them
START_SIZES = ("model.depth", "model.dim", "model.encoder_depth", "model.decoder_depth")


def smoke_overrides(cfg: Config, *, started: bool = False) -> list[str]:
    """The recipe's `smoke:` mapping as `key=value` overrides; `started`: without the sizes a checkpoint gives
    (`START_SIZES`)."""
    overrides = [f"{k}={json.dumps(v)}" for k, v in cfg.section("smoke").items()]
    return [o for o in overrides if not o.startswith(START_SIZES)] if started else overrides


def runs_inside(root):
    """What fit and ablate leave in a data folder given as data.root=. (run.dir runs/ made there): a run directory,
    its attention plots of viz, and an ablation's report plots."""
    from PIL import Image

    from attnzoo.util.files import RUN_CONFIG_HEADER

    run = root / "runs" / "vit" / "20261128-090000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(RUN_CONFIG_HEADER + "model: {}\n")
    (run / "viz").mkdir()
    Image.new("RGB", (8, 8)).save(run / "viz" / "rollout.png")
    (run / "examples.txt").write_text("an example the run wrote\n")
    ablation = root / "runs" / "ablate" / "vit-window"
    ablation.mkdir(parents=True)
    (ablation / "ablation.json").write_text("{}")
    Image.new("RGB", (8, 8)).save(ablation / "metric.png")
