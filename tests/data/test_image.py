"""ImageDataModule: embedded MNIST subset, image folders, torchvision datasets on disk, batch contract, errors."""

import pytest
import torch
from PIL import Image
from torch.utils.data import DistributedSampler

from attnzoo.data import DATAMODULES, ImageDataModule
from attnzoo.data.modules import defaults
from attnzoo.data.modules.batching import EpochShuffle
from attnzoo.data.modules.image import load_mnist5k


def _indices(split):  # indices of a split's samples in the underlying dataset
    return set(split.base.indices)


def test_embedded_mnist_is_real_balanced_and_split_deterministically():
    images, labels = load_mnist5k()
    assert images.shape == (5000, 1, 28, 28) and images.dtype == torch.uint8
    assert torch.bincount(labels).tolist() == [500] * 10
    assert images.float().mean() > 20  # digits, not blank frames
    a, b = ImageDataModule(), ImageDataModule()
    a.setup(), b.setup()
    assert len(a.splits["train"]) == 4500 and len(a.splits["val"]) == 500
    assert _indices(a.splits["train"]).isdisjoint(_indices(a.splits["val"]))
    assert _indices(a.splits["val"]) == _indices(b.splits["val"])
    assert a.model_inputs() == {"num_classes": 10, "in_chans": 1, "img_size": 28}
    assert DATAMODULES["image"] is ImageDataModule


def test_batches_follow_the_contract_and_are_normalized():
    data = ImageDataModule(batch_size=32, img_size=32)
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"image", "label"}
    assert batch["image"].shape == (32, 1, 32, 32) and batch["image"].dtype == torch.float32
    assert batch["label"].dtype == torch.long and len(set(batch["label"].tolist())) > 3  # shuffled classes
    assert -1.0 <= batch["image"].min() and batch["image"].max() <= 1.0
    val = next(iter(data.val_dataloader()))["image"]
    torch.testing.assert_close(val, next(iter(data.val_dataloader()))["image"])  # eval is deterministic


def test_augmentation_changes_training_images_only():
    data = ImageDataModule(augment=True, crop_scale=0.5, hflip=True)
    data.setup()
    x1, x2 = data.splits["train"][0]["image"], data.splits["train"][0]["image"]
    assert x1.shape == (1, 28, 28) and not torch.equal(x1, x2)
    torch.testing.assert_close(data.splits["val"][0]["image"], data.splits["val"][0]["image"])


def _write_folder(root, classes=("cat", "dog"), n=4, size=(20, 12)):
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", size, color=(40 * c + i, 10, 200)).save(root / name / f"{i}.png")


def test_image_folder_with_one_subfolder_per_class(tmp_path):
    _write_folder(tmp_path)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=16, val_fraction=0.25, batch_size=3)
    assert data.model_inputs() == {"num_classes": 2, "in_chans": 3, "img_size": 16}
    assert data.class_names == ["cat", "dog"]
    assert len(data.splits["train"]) == 6 and len(data.splits["val"]) == 2
    batch = next(iter(data.train_dataloader()))
    assert batch["image"].shape == (3, 3, 16, 16)


def test_image_folder_with_train_val_test_subfolders(tmp_path):
    for split, n in (("train", 4), ("val", 2), ("test", 3)):
        _write_folder(tmp_path / split, n=n)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
    data.setup()
    assert [len(data.splits[s]) for s in ("train", "val", "test")] == [8, 4, 6]


def test_torchvision_dataset_on_disk(tmp_path):
    import numpy as np

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images, labels = load_mnist5k()

    def idx(path, array, magic):
        header = np.array([magic, *array.shape], dtype=">i4").tobytes()
        path.write_bytes(header + array.astype(np.uint8).tobytes())

    for prefix, sl in (("train", slice(0, 100)), ("t10k", slice(100, 150))):
        idx(raw / f"{prefix}-images-idx3-ubyte", images[sl, 0].numpy(), 2051)
        idx(raw / f"{prefix}-labels-idx1-ubyte", labels[sl].numpy(), 2049)
    data = ImageDataModule(dataset="MNIST", root=str(tmp_path), batch_size=10)
    data.setup()
    assert data.num_classes == 10 and len(data.splits["test"]) == 50 and len(data.splits["val"]) == 10
    torch.testing.assert_close(data.splits["test"][0]["label"], int(labels[100]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dataset="folder", root="/no/such/dir", img_size=8), "'/no/such/dir' does not exist"),
        (dict(dataset="folder", img_size=8), "data.root is required"),
        (dict(dataset="CIFAR10"), "needs data.root"),
        (dict(val_fraction=1.5), "val_fraction"),
        (dict(batch_size=0), "batch_size"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImageDataModule(**kwargs)


def test_unknown_or_missing_torchvision_dataset(tmp_path):
    with pytest.raises(ValueError, match="did you mean 'CIFAR10'"):
        ImageDataModule(dataset="CIFAR01", root=str(tmp_path)).setup()
    with pytest.raises(ValueError, match=f"cannot read torchvision CIFAR10 under '{tmp_path}'"):
        ImageDataModule(dataset="CIFAR10", root=str(tmp_path)).setup()


@pytest.mark.parametrize("epoch", [0, 3])
def test_one_process_order_is_the_union_of_distributed_ranks(epoch):
    data, b = list(range(50)), 4
    ours = EpochShuffle(data, seed=7)
    ours.set_epoch(epoch)
    ranks = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=7)
        sampler.set_epoch(epoch)
        ranks.append(list(sampler))
    first = list(ours)[: 2 * b]
    assert sorted(first) == sorted(ranks[0][:b] + ranks[1][:b])


def test_larger_images_get_trivial_augment_and_mixed_batches_with_soft_labels(tmp_path):
    _write_folder(tmp_path, n=6, size=(40, 40))
    data = ImageDataModule(
        dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, augment="auto", crop_scale="auto",
        trivial_augment="auto", mixup_alpha="auto", cutmix_alpha="auto",
    )  # fmt: skip
    data.setup()
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert chosen["data.img_size"] == 40 and chosen["data.trivial_augment"] is True
    assert chosen["data.mixup_alpha"] == 0.2 and chosen["data.crop_scale"] == 0.35
    assert chosen["model.patch_size"] == 4  # 40x40: a 10x10 grid, the closest to 14x14 among divisors of 40
    batch = next(iter(data.train_dataloader()))
    assert batch["image"].shape == (4, 3, 40, 40) and batch["label"].shape == (4, 2)
    torch.testing.assert_close(batch["label"].sum(1), torch.ones(4))  # mixed one-hot labels
    assert not torch.equal(batch["label"], batch["label"].round())  # soft: two images mixed
    assert next(iter(data.val_dataloader()))["label"].dtype == torch.long  # evaluation is never mixed


def test_tiny_images_get_gentle_augmentation_only():
    data = ImageDataModule(augment="auto", crop_scale="auto", trivial_augment="auto", mixup_alpha="auto")
    data.setup()
    assert (data.augment, data.trivial_augment, data.mixup_alpha) == (False, False, 0.0)  # the embedded digits
    chosen = {k: v for k, (v, _) in defaults.image_data(embedded=False, img_size=28).items()}
    assert chosen["data.augment"] is True and chosen["data.crop_scale"] == 0.8 and chosen["data.mixup_alpha"] == 0.0
