"""What the data chooses where a recipe says `auto`: one function per modality, each {dotted key: (value, why)}.

A DataModule calls its function with what it read (image size, number of training examples, whether it is the
embedded default) and returns the result from `auto_values()`; `attnzoo.run.build` logs each choice and writes
it into the run's config.yaml. The embedded default datasets keep the settings their recipes were measured with;
files get settings that suit 1k-50k examples, chosen on stand-in datasets (benchmarks/standins/, README).
"""

from __future__ import annotations

import math
from typing import Any

Chosen = dict[str, tuple[Any, str]]

IMAGE_KEYS = ("model.patch_size", "model.drop_path_rate", "task.objective.label_smoothing", "trainer.max_epochs")
TEXT_KEYS = ("model.pooling", "model.drop_rate", "trainer.max_epochs")
AUDIO_KEYS = ("model.feature_norm", "model.fstride", "model.tstride", "model.spec_augment", "model.drop_path_rate",
              "task.optimizer.lr", "trainer.max_epochs")  # fmt: skip
TINY_IMAGE = 32  # sides up to this get gentle augmentation (digits, icons)


def epoch_budget(num_train: int, batch_size: int, *, steps: int, low: int, high: int) -> tuple[int, str]:
    """Epochs for about `steps` optimizer steps, within [low, high]: the ceiling early stopping works under."""
    per_epoch = max(1, math.ceil(num_train / batch_size))
    epochs = min(high, max(low, math.ceil(steps / per_epoch)))
    return epochs, f"{num_train} training examples, {per_epoch} steps an epoch: ~{steps} steps, {low}-{high} epochs"


def patch_size(img_size: int, grid: int) -> int:
    """The divisor of `img_size` whose patch grid is closest to `grid` x `grid` (the coarser one on a tie)."""
    divisors = [p for p in range(1, img_size + 1) if img_size % p == 0]
    return min(divisors, key=lambda p: (abs(img_size // p - grid), -p))


def image_data(*, embedded: bool, img_size: int) -> Chosen:
    """Augmentation sized to the image."""
    if embedded:
        why = "the embedded MNIST subset: the recipe's measured settings"
        return {"data.augment": (False, why), "data.crop_scale": (0.8, why), "data.trivial_augment": (False, why),
                "data.mixup_alpha": (0.0, why), "data.cutmix_alpha": (0.0, why)}  # fmt: skip
    if img_size <= TINY_IMAGE:  # small crops and shifts only; no photometric operations, no mixing
        why = f"{img_size}x{img_size} images (<= {TINY_IMAGE}): gentle augmentation"
        return {"data.augment": (True, why), "data.crop_scale": (0.8, why), "data.trivial_augment": (False, why),
                "data.mixup_alpha": (0.0, why), "data.cutmix_alpha": (0.0, why)}  # fmt: skip
    why = f"{img_size}x{img_size} images: standard augmentation"
    return {"data.augment": (True, why), "data.crop_scale": (0.35, why), "data.trivial_augment": (True, why),
            "data.mixup_alpha": (0.2, why), "data.cutmix_alpha": (0.0, why)}  # fmt: skip


def image_model(*, embedded: bool, img_size: int, num_train: int, batch_size: int) -> Chosen:
    """Patch size, regularization and epoch budget of a ViT."""
    if embedded:
        why = "the embedded MNIST subset: the recipe's measured settings"
        return {"model.patch_size": (7, why), "model.drop_path_rate": (0.0, why),
                "task.objective.label_smoothing": (0.0, why), "trainer.max_epochs": (10, why)}  # fmt: skip
    p = patch_size(img_size, 7 if img_size <= TINY_IMAGE else 14)
    regular = "files: regularization for 1k-50k images"
    return {
        "model.patch_size": (p, f"{img_size}x{img_size} images: a {img_size // p}x{img_size // p} patch grid"),
        "model.drop_path_rate": (0.1, regular),
        "task.objective.label_smoothing": (0.1, regular),
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=2000, low=10, high=200),
    }


def audio_data(*, synthetic: bool) -> Chosen:
    """Sample rate, mel bins, mixup and time shifts: the synthetic set keeps its recipe's, files get 16 kHz."""
    if synthetic:
        why = "the embedded synthetic syllables: the recipe's measured settings (8 kHz clips, 0-4 kHz in 32 bins)"
        return {"data.sample_rate": (8000, why), "data.n_mels": (32, why), "data.mixup_alpha": (0.0, why),
                "data.time_shift_ms": (0.0, why)}  # fmt: skip
    # A small AST learning from scratch on ~1k clips learned far slower from the AST paper's 128 bins and stride-10
    # patches (~110 tokens), and slower with mixup or time shifts, than from 32 bins (28 tokens), within minutes of
    # CPU (measured on the stand-ins, benchmarks/recipes.py); they stay options. SpecAugment with a stretch of both
    # axes (`audio_model`) did help, once each clip's mean per bin was subtracted (model.feature_norm: clip)
    why = "audio files: 16 kHz; 32 mel bins, which a small AST learns from fastest"
    slower = "audio files: slowed a small AST's learning from ~1k clips"
    return {"data.sample_rate": (16000, why), "data.n_mels": (32, why), "data.mixup_alpha": (0.0, slower),
            "data.time_shift_ms": (0.0, slower)}  # fmt: skip


def audio_model(*, synthetic: bool, n_mels: int, frames: int, num_train: int, batch_size: int) -> Chosen:
    """AST patch strides, SpecAugment sized to the features, drop path, learning rate and epoch budget."""
    if synthetic:
        why = "the embedded synthetic syllables: the recipe's measured settings"
        return {"model.feature_norm": ("dataset", why), "model.fstride": (16, why), "model.tstride": (6, why),
                "model.spec_augment": (None, why), "model.drop_path_rate": (0.0, why),
                "task.optimizer.lr": (1e-3, why), "trainer.max_epochs": (6, why)}  # fmt: skip
    return {
        "model.feature_norm": (
            "clip",
            "audio files: each clip's mean per mel bin is subtracted (loudness, microphone)",
        ),
        "model.fstride": (16, "audio files: patches side by side along frequency"),
        "model.tstride": (6, "audio files: patches overlapping along time (stride 6 of 16 frames)"),
        "model.spec_augment": (
            {"freq_mask": max(1, n_mels // 8), "time_mask": max(1, round(frames / 10)), "num_masks": 2, "stretch": 0.1},
            f"audio files: masks of up to 1/8 of the {n_mels} mel bins and 1/10 of the {frames} frames, and both axes "
            "stretched by up to 10% (formants and word lengths move as between speakers)",
        ),
        "model.drop_path_rate": (0.1, "audio files: regularization for 1k-50k clips"),
        "task.optimizer.lr": (2e-3, "audio files: a small AST from scratch"),
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=1500, low=10, high=100),
    }


def text_data(*, listops: bool) -> Chosen:
    """The tokenizer: ListOps words for the embedded ListOps, a subword vocabulary learned from a file's train split."""
    if listops:
        why = "the embedded ListOps: its own words"
        return {"data.tokenizer": ("listops", why), "data.lowercase": (False, why)}
    why = "text files: subwords learned from the train split (data.vocab_size)"
    return {"data.tokenizer": ("unigram", why), "data.lowercase": (True, why)}


def text_model(*, listops: bool, num_train: int, batch_size: int) -> Chosen:
    """Pooling, dropout and epoch budget of the text classifier."""
    if listops:
        why = "the embedded ListOps: the recipe's measured settings"
        return {"model.pooling": ("cls", why), "model.drop_rate": (0.0, why), "trainer.max_epochs": (6, why)}
    return {
        "model.pooling": ("mean", "text files: the mean of the tokens (a bag of subwords to start from)"),
        "model.drop_rate": (0.2, "text files: regularization for 1k-50k texts"),
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=2000, low=10, high=100),
    }


TEXT_IMAGE_KEYS = ("trainer.max_epochs", "run.early_stopping.patience")


def text_image_data(*, embedded: bool, img_size: int) -> Chosen:
    """Augmentation of image-question pairs: small shifts only. Flips would turn "left of" into "right of" and
    photometric changes would change colour answers, so neither is ever chosen."""
    if embedded:
        return {"data.augment": (False, "the embedded scenes: fixed settings")}
    shift = max(1, img_size // 16)
    return {"data.augment": (True, f"{img_size}x{img_size} images: shifts of up to {shift} px, no flips or colour")}


def text_image_run(*, embedded: bool, num_train: int, batch_size: int) -> Chosen:
    """Epoch budget and early-stopping patience of the text-image recipe."""
    if embedded:
        why = "the embedded scenes: fixed settings"
        return {"trainer.max_epochs": (EMBEDDED_SCENE_EPOCHS, why), "run.early_stopping.patience": (10, why)}
    epochs, why = epoch_budget(num_train, batch_size, steps=3000, low=10, high=100)
    patience = max(5, math.ceil(epochs / 4))
    return {
        "trainer.max_epochs": (epochs, why),
        "run.early_stopping.patience": (patience, f"a quarter of the {epochs}-epoch budget (at least 5)"),
    }


EMBEDDED_SCENE_EPOCHS = 20
