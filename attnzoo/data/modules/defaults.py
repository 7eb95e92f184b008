"""What the data chooses where a recipe says `auto`: one function per modality, each {dotted key: (value, why)}.

A DataModule calls its function with what it read (image size, number of training examples, whether it is the
embedded default) and returns the result from `auto_values()`; `attnzoo.run.build` logs each choice and writes
it into the run's config.yaml. The embedded default datasets keep the settings their recipes were measured with;
files get settings that suit 1k-50k examples, chosen on stand-in datasets (benchmarks/standins/, README).
"""

from __future__ import annotations

import math
from typing import Any

from ..tokenizers.subword import KINDS as SUBWORD_KINDS

Chosen = dict[str, tuple[Any, str]]

IMAGE_KEYS = (
    "model.patch_size",
    "model.stem",
    "model.drop_path_rate",
    "task.objective.label_smoothing",
    "task.optimizer.lr",
    "trainer.max_epochs",
)
TEXT_KEYS = ("model.pooling", "model.drop_rate", "task.objective.label_smoothing", "task.optimizer.lr",
             "trainer.max_epochs")  # fmt: skip
AUDIO_KEYS = ("model.feature_norm", "model.fstride", "model.tstride", "model.spec_augment", "model.drop_path_rate",
              "task.optimizer.lr", "trainer.max_epochs")  # fmt: skip
SEQUENCE_KEYS = ("task.optimizer.lr", "trainer.max_epochs")  # translation and language models
# the peak learning rate of AdamW for a recipe's model from random weights (or from an attnzoo run of the same small
# size: fine-tuning an MLM run at 1e-3 or 3e-4 instead of 3e-3 lost 1-4 points, benchmarks/results/mlm_finetune.md);
# a pretrained Hugging Face or timm checkpoint is fine-tuned at `FINETUNE_LR` instead (attnzoo/run/start.py)
SCRATCH_LR = {"text": 3e-3, "image": 3e-3, "sequence": 2e-3}
SCRATCH_WHY = "the rate the recipe was measured with for its small model (from random weights, or a run of it)"
TINY_IMAGE = 32  # sides up to this get gentle augmentation (digits, icons)
# data.* keys that only size or shape a DataModule's embedded default data, by data.kind: (the key that selects
# files, its value for the embedded data, the embedded-only keys). With files they mean nothing: set in a recipe,
# they are left out (logged); set on the command line, they are an error (`attnzoo.run.build.embedded_only_keys`).
EMBEDDED_ONLY = {
    "translation": ("train", None, ("num_train", "num_val", "num_test")),
    "text": ("train", None, ("listops",)),
    "text_image": ("train", None, ("num_train", "num_val", "held_out")),
    "audio": ("source", "synthetic", ("synthetic",)),
}


def embedded_only(kind: str, options: dict[str, Any]) -> tuple[list[str], str]:
    """The keys of `options` (a `data:` section) that configure only the embedded data, which `options` does not
    use, and the option that replaces it ("data.train ('pairs.tsv')"); ([], "") when the embedded data is used."""
    if kind not in EMBEDDED_ONLY:
        return [], ""
    selector, embedded, keys = EMBEDDED_ONLY[kind]
    value = options.get(selector, embedded)
    if value == embedded:
        return [], ""
    return [k for k in keys if options.get(k) is not None], f"data.{selector} ({value!r})"


def epoch_budget(
    num_train: int, batch_size: int, *, steps: int, low: int, high: int, drop_last: bool = False
) -> tuple[int, str]:
    """Epochs for about `steps` optimizer steps, within [low, high]: the ceiling early stopping works under.
    `drop_last`: the training loader drops a last partial batch when the split holds more than one batch
    (`DataModule.full_batches` on one process)."""
    full = drop_last and num_train > batch_size
    per_epoch = num_train // batch_size if full else max(1, math.ceil(num_train / batch_size))
    epochs = min(high, max(low, math.ceil(steps / per_epoch)))
    return epochs, f"{num_train} training examples, {per_epoch} steps an epoch: ~{steps} steps, {low}-{high} epochs"


MIN_GRID = 4  # the coarsest patch grid a chosen patch size gives (a side without one is moved, or refused)
MAX_TOKENS = 64  # patch tokens a ViT of the recipe's size learns from within minutes of CPU (an 8x8 grid at most)


def patch_size(img_size: int, max_tokens: int = MAX_TOKENS) -> int:
    """The smallest divisor of `img_size` whose patch grid has at most `max_tokens` tokens."""
    return min(p for p in range(1, img_size + 1) if img_size % p == 0 and (img_size // p) ** 2 <= max_tokens)


def auto_patch_size(img_size: int) -> int:
    """`patch_size` of a side with a patch grid of at least 4x4; ValueError naming sides near it that have one (a
    side set in `data.img_size`: the side chosen from the images has one already)."""
    p = patch_size(img_size)
    if img_size // p >= MIN_GRID or img_size <= 8:  # up to 8 px: one pixel per patch
        return p
    near = sorted((s for s in range(max(8, img_size - 16), img_size + 17) if s // patch_size(s) >= MIN_GRID),
                  key=lambda s: (abs(s - img_size), s))[:2]  # fmt: skip
    raise ValueError(
        f"data.img_size {img_size}: no patch size divides it into a grid of {MIN_GRID}x{MIN_GRID} to "
        f"{int(MAX_TOKENS**0.5)}x{int(MAX_TOKENS**0.5)} patches (the only one of at most {MAX_TOKENS} tokens is "
        f"{img_size // p}x{img_size // p}); use a side such as {' or '.join(map(str, sorted(near)))}, or set "
        "model.patch_size"
    )


def image_stem(img_size: int, patch: int) -> tuple[str, str]:
    """A convolutional stem for images larger than `TINY_IMAGE` whose patch is a multiple of 4 (two strided 3x3
    convolutions or more, `attnzoo.models.vit.stem_strides`): a linear map of an 8x8 patch learned the 64 px
    stand-ins' symbols and shapes far later than strided 3x3 convolutions did, and of a 12x12 patch the 96 px
    symbols (benchmarks/results/images64.md); small images keep the linear patch embedding they learn well from."""
    if img_size <= TINY_IMAGE:
        return "patch", f"{img_size}x{img_size} images: a linear map of each patch"
    if patch % 4:
        return "patch", f"patch {patch} is not a multiple of 4, which two strided 3x3 convolutions need"
    from ...models.vit import stem_strides

    strides = " x ".join(map(str, stem_strides(patch)))
    why = f"{img_size}x{img_size} images: strided convolutions ({strides}) down to the {patch}-pixel patch grid"
    return "conv", why


def image_data(*, embedded: bool, img_size: int, drawing: bool = False, mixed_polarity: bool = False) -> Chosen:
    """Augmentation sized to the image, and kept to operations that cannot change a label.

    Args:
        drawing: the images are drawings, text or symbols on a flat background (`attnzoo.data.image_stats`).
        mixed_polarity: drawings whose training images are light-on-dark and dark-on-light in every class.
    """
    if embedded:
        why = "the embedded MNIST subset: the recipe's measured settings"
        return {"data.augment": (False, why), "data.crop_scale": (0.8, why), "data.trivial_augment": (False, why),
                "data.mixup_alpha": (0.0, why), "data.cutmix_alpha": (0.0, why), "data.ink": (False, why)}  # fmt: skip
    kind = "drawings" if drawing else "photographs"
    ink = (
        (True, "drawings, light-on-dark and dark-on-light in every class: strokes are read as their distance from "
               "the background colour, so both polarities look alike")
        if drawing and mixed_polarity
        else (False, f"{kind}" + (" of one polarity" if drawing else "") + ": pixels as they are")
    )  # fmt: skip
    # Off: a run from scratch on a few thousand images has ~1,200 steps to learn in; mixed targets are harder still
    # (issue 29's run with mixup 0.2 stayed near chance). Not measured on its own; `data.mixup_alpha` is an option
    no_mix = f"{img_size}x{img_size} {kind}: no mixing of batches in a run of ~1,200 steps (mixed targets learn slower)"
    if img_size <= TINY_IMAGE:  # small crops and shifts only; no photometric operations, no mixing
        why = f"{img_size}x{img_size} images (<= {TINY_IMAGE}): gentle augmentation"
        return {"data.augment": (True, why), "data.crop_scale": (0.8, why), "data.trivial_augment": (False, why),
                "data.mixup_alpha": (0.0, why), "data.cutmix_alpha": (0.0, why), "data.ink": ink}  # fmt: skip
    scale = 0.8 if drawing else 0.5  # larger crops cut a symbol's strokes or an object out
    safe = (
        "safe",
        f"{img_size}x{img_size} {kind}: one mild operation per image, none that can change a label (no solarize, "
        "posterize or equalize; shifts and rotations of at most 10% / 15 degrees)",
    )
    return {
        "data.augment": (True, f"{img_size}x{img_size} {kind}: random-resized crops"),
        "data.crop_scale": (scale, f"{img_size}x{img_size} {kind}: crops keep {scale:.0%}-100% of the image, "
                                   "so the object stays in"),
        "data.trivial_augment": safe,
        "data.mixup_alpha": (0.0, no_mix),
        "data.cutmix_alpha": (0.0, no_mix),
        "data.ink": ink,
    }  # fmt: skip


def image_model(
    *, embedded: bool, img_size: int, num_train: int, batch_size: int, patch_size: int | None = None
) -> Chosen:
    """Patch size for a token budget, regularization, learning rate and epoch budget of a ViT; the stem for
    `patch_size` where the config sets it, else for the patch chosen."""
    if embedded:
        why = "the embedded MNIST subset: the recipe's measured settings"
        chosen = {"model.patch_size": (7, why)}
        if patch_size is None and img_size % 7:  # data.img_size resized the digits to a side 7 does not divide
            side = auto_patch_size(img_size)
            grid = img_size // side
            chosen["model.patch_size"] = (side, f"{img_size}x{img_size} images: a {grid}x{grid} patch grid (the "
                                                "recipe's 7 does not divide the side)")  # fmt: skip
        return {**chosen, "model.stem": ("patch", why), "model.drop_path_rate": (0.0, why),
                "task.objective.label_smoothing": (0.0, why), "task.optimizer.lr": (SCRATCH_LR["image"], why),
                "trainer.max_epochs": (10, why)}  # fmt: skip
    chosen: Chosen = {}
    if patch_size is None:
        patch_size = auto_patch_size(img_size)
        grid = img_size // patch_size
        why = f"{img_size}x{img_size} images: a {grid}x{grid} patch grid ({grid * grid} tokens; at most {MAX_TOKENS})"
        chosen["model.patch_size"] = (patch_size, why)
    regular = "files: regularization for 1k-50k images"
    return {
        **chosen,
        "model.stem": image_stem(img_size, patch_size),
        "model.drop_path_rate": (0.1, regular),
        "task.objective.label_smoothing": (0.1, regular),
        "task.optimizer.lr": (SCRATCH_LR["image"], SCRATCH_WHY),
        # larger images: ~1,200 steps of 64 tokens, about 4 minutes of one CPU core for the recipe's model
        "trainer.max_epochs": epoch_budget(
            num_train, batch_size, steps=2000 if img_size <= TINY_IMAGE else 1200, low=10, high=200
        ),
    }


def audio_data(*, synthetic: bool) -> Chosen:
    """Sample rate, mel bins, mixup and time shifts: the synthetic set keeps its recipe's, files get 16 kHz."""
    if synthetic:
        why = "the embedded synthetic syllables: the recipe's measured settings"
        sizes = f"{why} (8 kHz clips, 0-4 kHz in 32 bins)"  # a start's own rate and bins replace these two
        return {"data.sample_rate": (8000, sizes), "data.n_mels": (32, sizes), "data.mixup_alpha": (0.0, why),
                "data.time_shift_ms": (0.0, why)}  # fmt: skip
    # A small AST learning from scratch on ~1k clips learned far slower from the AST paper's 128 bins and stride-10
    # patches (~110 tokens), and slower with mixup or time shifts, than from 32 bins (28 tokens), within minutes of
    # CPU (measured on the stand-ins, benchmarks/recipes.py); they stay options. SpecAugment with a stretch of both
    # axes (`audio_model`) did help, once each clip's own mean was subtracted (model.feature_norm: clip or level)
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
            "level",
            "audio files: each clip's mean level is subtracted (loudness); its spectrum's shape is kept, which tells "
            "steady sounds apart (hum, engines, rain)",
        ),
        "model.fstride": (16, "audio files: patches side by side along frequency"),
        "model.tstride": (6, "audio files: patches overlapping along time (stride 6 of 16 frames)"),
        "model.spec_augment": (
            {"freq_mask": max(1, n_mels // 8), "time_mask": max(1, round(frames / 10)), "num_masks": 2, "stretch": 0.1},
            f"audio files: masks of up to 1/8 of the {n_mels} mel bins and 1/10 of the {frames} frames, and both axes "
            "stretched by up to 10% (formants and word lengths move as between speakers)",
        ),
        "model.drop_path_rate": (0.1, "audio files: regularization for 1k-50k clips"),
        "task.optimizer.lr": (2e-3, "audio files: the rate measured for a small AST from random weights"),
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=1500, low=10, high=100, drop_last=True),
    }


def text_data(*, listops: bool, tokenizer: Any = "auto") -> Chosen:
    """The tokenizer: ListOps words for the embedded ListOps, a subword vocabulary learned from a file's train split.
    Lowercasing is a choice of a vocabulary learned here only: a tokenizer file (e.g. the one `model.init_from` brings)
    or a fixed one normalizes text its own way."""
    if listops:
        why = "the embedded ListOps: its own words"
        return {"data.tokenizer": ("listops", why), "data.lowercase": (False, why)}
    if tokenizer != "auto" and tokenizer not in SUBWORD_KINDS:
        return {"data.lowercase": (False, f"not used: data.tokenizer {str(tokenizer)!r} is not learned here, and "
                                          "normalizes text its own way")}  # fmt: skip
    why = "text files: subwords learned from the train split (data.vocab_size)"
    return {"data.tokenizer": ("unigram", why), "data.lowercase": (True, why)}


def text_model(*, listops: bool, num_train: int, batch_size: int) -> Chosen:
    """Pooling, dropout, learning rate and epoch budget of the text classifier."""
    if listops:
        why = "the embedded ListOps: the recipe's measured settings"
        return {"model.pooling": ("cls", why), "model.drop_rate": (0.0, why),
                "task.objective.label_smoothing": (0.0, why), "task.optimizer.lr": (SCRATCH_LR["text"], why),
                "trainer.max_epochs": (6, why)}  # fmt: skip
    # dropout 0.4 and label smoothing 0.1 (0.2 and 0 before) raised mean test accuracy 0.6-1.9 points on three
    # stand-ins from scratch and 2.8 fine-tuned from an MLM run (benchmarks/results/mlm_finetune.md, "Regularization")
    regular = "text files: regularization for 1k-50k texts"
    return {
        "model.pooling": ("mean", "text files: the mean of the tokens (a bag of subwords to start from)"),
        "model.drop_rate": (0.4, regular),
        "task.objective.label_smoothing": (0.1, regular),
        "task.optimizer.lr": (SCRATCH_LR["text"], SCRATCH_WHY),
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=2000, low=10, high=100, drop_last=True),
    }


def sequence_data(*, embedded: bool, what: str, tokenizer: Any = "auto") -> Chosen:
    """Whether a learned subword vocabulary splits numbers into single digits: for files, yes (numbers are copied
    and translated digit by digit); the embedded data keep the setting their recipes were measured with (with
    digits split the embedded CLDR phrases reached test BLEU 96.5 instead of 98.9: their numbers are mostly spelled
    out, and a year became 4 tokens to get right). A tokenizer not learned here (a file, e.g. GPT-2's or BART's
    that `model.init_from` brings) splits as it was made to."""
    if tokenizer not in ("auto", None) and tokenizer not in SUBWORD_KINDS:
        return {"data.split_digits": (False, f"not used: data.tokenizer {str(tokenizer)!r} is not learned here, and "
                                             "splits numbers its own way")}  # fmt: skip
    if embedded:
        return {"data.split_digits": (False, f"{what}: the recipe's measured settings")}
    return {"data.split_digits": (True, "files: each digit a token of its own, numbers copied digit by digit")}


def translation_model(*, embedded: bool, num_train: int, batch_size: int) -> Chosen:
    """The learning rate (`SCRATCH_LR`) and epoch budget of a translation model: the budget is the ceiling under
    which early stopping on val BLEU works, long enough that the cosine schedule anneals on a few thousand pairs."""
    lr = {"task.optimizer.lr": (SCRATCH_LR["sequence"], SCRATCH_WHY)}
    if embedded:
        return {**lr, "trainer.max_epochs": (6, "the embedded CLDR phrases: the recipe's measured settings")}
    return {
        **lr,
        "trainer.max_epochs": epoch_budget(num_train, batch_size, steps=2500, low=10, high=100, drop_last=True),
    }


def lm_model(*, embedded: bool, num_blocks: int, batch_size: int) -> Chosen:
    """The learning rate (`SCRATCH_LR`) and epoch budget of a language model (early stopping on val perplexity stops
    it when it starts to overfit)."""
    lr = {"task.optimizer.lr": (SCRATCH_LR["sequence"], SCRATCH_WHY)}
    if embedded:
        return {
            **lr,
            "trainer.max_epochs": (6, "the embedded Python Language Reference: the recipe's measured settings"),
        }
    epochs, why = epoch_budget(num_blocks, batch_size, steps=3000, low=5, high=100, drop_last=True)
    return {**lr, "trainer.max_epochs": (epochs, why.replace("training examples", "training blocks"))}


TEXT_IMAGE_KEYS = ("trainer.max_epochs", "run.early_stopping.patience")


def text_image_data(*, embedded: bool, img_size: int) -> Chosen:
    """Augmentation of image-question pairs: small shifts only. Flips would turn "left of" into "right of" and
    photometric changes would change colour answers, so neither is ever chosen."""
    if embedded:
        return {"data.augment": (False, "the embedded scenes: fixed settings")}
    shift = max(1, img_size // 16)
    return {"data.augment": (True, f"{img_size}x{img_size} images: shifts of up to {shift} px, no flips or colour")}


def text_image_run(*, embedded: bool, num_train: int, batch_size: int) -> Chosen:
    """Epoch budget and early-stopping patience of the text-image recipe. Val accuracy can sit still for tens of
    epochs before the net finds a feature only some questions need (the scenes' shapes, for counting them: 30-40
    epochs), so patience is long."""
    if embedded:
        why = "the embedded scenes: fixed settings (counting shapes is found after 30-50 epochs)"
        return {
            "trainer.max_epochs": (EMBEDDED_SCENE_EPOCHS, why),
            "run.early_stopping.patience": (EMBEDDED_SCENE_EPOCHS, why + "; best.ckpt is tested"),
        }
    epochs, why = epoch_budget(num_train, batch_size, steps=TEXT_IMAGE_STEPS, low=10, high=100)
    return {"trainer.max_epochs": (epochs, why), "run.early_stopping.patience": text_image_patience(epochs)}


def text_image_patience(epochs: int, *, embedded: bool = False, given: bool = False) -> tuple[int, str]:
    """(patience, why) for an epoch budget of the text-image recipe (`given`: the one trainer.max_epochs sets)."""
    budget = f"{epochs}-epoch budget" + (" trainer.max_epochs sets" if given else "")
    if embedded:
        return epochs, f"the whole {budget} (the embedded scenes: counting shapes is found after 30-50 epochs)"
    return max(10, math.ceil(epochs / 3)), f"a third of the {budget} (at least 10)"


EMBEDDED_SCENE_EPOCHS = 60
TEXT_IMAGE_STEPS = 5000  # optimizer steps of the text-image recipe on files (the embedded scenes: 60 x 94)


def mlm_model(*, num_train: int, batch_size: int) -> Chosen:
    """The learning rate (`SCRATCH_LR`) and epoch budget of masked-language-model pretraining (early stopping on val
    perplexity is the usual stop)."""
    epochs, why = epoch_budget(num_train, batch_size, steps=MLM_STEPS, low=5, high=200, drop_last=True)
    return {"task.optimizer.lr": (SCRATCH_LR["sequence"], SCRATCH_WHY),
            "trainer.max_epochs": (epochs, why.replace("training examples", "training texts"))}  # fmt: skip


MLM_STEPS = 4000  # optimizer steps of MLM pretraining: minutes of one CPU core for the text recipe's model
