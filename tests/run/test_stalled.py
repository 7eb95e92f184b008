"""A run that does not learn says so in its log, with the likely cause and the overrides to try."""

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnzoo.config import load
from attnzoo.run import fit

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FAST = [
    "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.precision=32-true",
    "trainer.num_sanity_val_steps=0", "trainer.max_epochs=3", "run.baseline=false", "run.test=false",
    "model.depth=1", "data.batch_size=8", "data.img_size=16", "data.augment=false", "data.trivial_augment=false",
    "data.ink=false",
]  # fmt: skip


def _folder(root: Path, *, learnable: bool) -> list[str]:
    """Two classes of 16x16 images: black vs white (learnable), or the same noise images in both (not)."""
    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 255, (16, 16, 3), dtype=np.uint8) for _ in range(12)]
    for split, n in (("train", 12), ("val", 4)):
        for c, label in enumerate(("a", "b")):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                image = np.full((16, 16, 3), 255 * c, np.uint8) if learnable else noise[i]
                Image.fromarray(image).save(root / split / label / f"{i}.png")
    return ["data.dataset=folder", f"data.root={root}"]


@pytest.mark.parametrize("learnable", [False, True])
def test_a_run_whose_train_loss_stays_at_chance_says_why_and_what_to_try(tmp_path, caplog, learnable):
    data = _folder(tmp_path / "images", learnable=learnable)
    overrides = [*FAST, *data, f"run.dir={tmp_path}"]
    if learnable:  # a learning rate that fits black vs white within the first epochs
        overrides.append("task.optimizer.lr=1e-2")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        fit(load([RECIPES / "vit.yaml"], overrides))
    warnings = [r.getMessage() for r in caplog.records if "not learning" in r.getMessage()]
    if learnable:
        assert warnings == []
        return
    assert len(warnings) == 1  # once, not every epoch
    text = warnings[0]
    assert "after 3 epochs the training loss is" in text and "at chance (ln 2 = 0.693)" in text
    assert "task.optimizer.lr=0.003" in text and "try task.optimizer.lr=1e-03" in text
    assert "look at a batch" in text and "augmentation" not in text  # this run has none to turn off
    assert not text.startswith("attnzoo:")  # the log's prefix says it already


def test_the_hint_names_only_the_augmentation_the_run_has_on():
    from attnzoo.run.stalled import augmentation_off

    off = ["data.trivial_augment=false", "data.cutmix_alpha=0"]
    vit = load([RECIPES / "vit.yaml"], ["data.augment=true", "data.mixup_alpha=0.2", *off])
    assert augmentation_off(vit) == ["data.augment=false", "data.mixup_alpha=0"]
    assert augmentation_off(load([RECIPES / "text_cls.yaml"])) == []  # text has no augmentation keys
    ast = load(
        [RECIPES / "ast.yaml"], ["data.time_shift_ms=100", "model.spec_augment={freq_mask: 4}", "data.mixup_alpha=0"]
    )
    assert augmentation_off(ast) == ["data.time_shift_ms=0", "model.spec_augment=null"]
    off = load([RECIPES / "ast.yaml"], ["data.time_shift_ms=0", "model.spec_augment={}", "data.mixup_alpha=0"])
    assert augmentation_off(off) == []


@pytest.mark.parametrize(("warmup", "checked_after"), [("0.7", 4), ("100", 5)])
def test_the_check_waits_for_the_learning_rate_warmup_to_end(tmp_path, caplog, warmup, checked_after):
    """3 steps an epoch, 15 in all. Warmup 0.7 (10 steps): after 3 epochs (9 steps) the learning rate is still
    rising, so a loss near chance is no sign yet; epoch 4 passes the peak and ends lower than it began: checked then.
    Warmup 100 steps outlasts the run: checked at the last epoch."""
    data = _folder(tmp_path / "images", learnable=False)
    overrides = [*FAST, *data, f"run.dir={tmp_path}", "trainer.max_epochs=5", f"task.scheduler.warmup={warmup}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        fit(load([RECIPES / "vit.yaml"], overrides))
    warnings = [r.getMessage() for r in caplog.records if "not learning" in r.getMessage()]
    assert len(warnings) == 1 and f"after {checked_after} epochs the training loss is" in warnings[0]


def test_a_resumed_run_does_not_warn_again(tmp_path, caplog):
    data = _folder(tmp_path / "images", learnable=False)
    overrides = [*FAST, *data, f"run.dir={tmp_path}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        run_dir = fit(load([RECIPES / "vit.yaml"], overrides))
        fit(load([RECIPES / "vit.yaml"], [*overrides, "trainer.max_epochs=6"]), resume=run_dir)
    warnings = [r.getMessage() for r in caplog.records if "not learning" in r.getMessage()]
    assert len(warnings) == 1 and "after 3 epochs" in warnings[0]  # the first run's; the resumed run knows it


@pytest.mark.parametrize("rank_zero", [True, False])
def test_under_ddp_only_the_first_process_warns(rank_zero, caplog):
    """Every DDP process warned, each with the mean loss of its own batches (2.311 and 2.245 in one run)."""
    from types import SimpleNamespace

    from attnzoo.run.stalled import LearningCheck

    check = LearningCheck(epochs=1)
    check.losses = [2.31] * 4  # at chance for 10 classes
    data = SimpleNamespace(model_inputs=lambda: {"num_classes": 10})
    trainer = SimpleNamespace(datamodule=data, current_epoch=0, max_epochs=5, optimizers=[],
                              is_global_zero=rank_zero)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        check._check(trainer, SimpleNamespace(monitor="acc", optimizer_spec={"lr": 3e-3}), None)
    assert check.checked and ("not learning" in caplog.text) == rank_zero


def test_val_at_chance_is_a_sign_once_the_model_fits_its_training_data_not_while_its_loss_begins_to_fall(caplog):
    # a conv stem's run on 96 px symbols: val/acc 0.100 for epochs 1-4 while the loss fell from 2.30 to 2.16, then
    # 0.49 at epoch 6 and 0.93 at the end; the check warned after epoch 3 that what it learns does not carry to val
    from types import SimpleNamespace

    from attnzoo.run.stalled import LearningCheck

    check = LearningCheck(epochs=3)
    data = SimpleNamespace(model_inputs=lambda: {"num_classes": 10})
    task = SimpleNamespace(monitor="acc", optimizer_spec={"lr": 3e-3})
    for epoch, loss in ((2, 2.16), (3, 2.0), (4, 1.2)):
        check.losses = [loss] * 4
        trainer = SimpleNamespace(datamodule=data, current_epoch=epoch, max_epochs=26, optimizers=[],
                                  is_global_zero=True)  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="attnzoo"):
            check._check(trainer, task, 0.1)
        assert check.checked == (loss < 0.85 * 2.3026)
    assert caplog.text.count("not learning") == 1 and "after 5 epochs val/acc is 0.100" in caplog.text
    assert "while the training loss fell to 1.200" in caplog.text
