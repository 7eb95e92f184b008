"""ImageDataModule: embedded MNIST subset, image folders, torchvision datasets on disk, batch contract, errors."""

import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DistributedSampler
from torchvision.transforms import v2

from attnzoo.data import DATAMODULES, ImageDataModule
from attnzoo.data.modules import defaults
from attnzoo.data.modules.batching import EpochShuffle
from attnzoo.data.modules.image import load_mnist5k
from tests.helpers import runs_inside


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


def test_a_data_root_one_level_above_the_class_folders_names_the_folder_to_give(tmp_path, monkeypatch):
    # photos/<class>/ under data.root: one class "photos", every image decoded, then "num_classes (1) must be >= 2"
    _write_folder(tmp_path / "photos")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=16, val_fraction=0.25)
    monkeypatch.setattr("attnzoo.data.formats.image_io.unreadable_images", lambda paths: pytest.fail("decoded"))
    with pytest.raises(ValueError, match=r"has one class folder, photos, which holds folders itself \(cat; dog\): "
                                         rf".*did you mean data\.root={tmp_path}/photos\?"):  # fmt: skip
        data.setup()
    # images of one class: "task.objective (multiclass): num_classes (1) must be >= 2", naming no folder
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "photos" / "cat"), img_size=16, val_fraction=0.25)
    (tmp_path / "photos" / "cat" / "tabby").mkdir()
    for image in list((tmp_path / "photos" / "cat").glob("*.png")):
        image.rename(tmp_path / "photos" / "cat" / "tabby" / image.name)
    with pytest.raises(ValueError, match=r"data\.root: .*cat has one class folder, tabby: classification needs two or "
                       r"more classes, one folder each"):  # fmt: skip
        data.setup()


def test_image_folder_with_train_val_test_subfolders(tmp_path):
    for split, n in (("train", 4), ("val", 2), ("test", 3)):
        _write_folder(tmp_path / split, n=n)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
    data.setup()
    assert [len(data.splits[s]) for s in ("train", "val", "test")] == [8, 4, 6]


def test_split_folders_are_found_in_any_letter_case_and_validation_is_val(tmp_path):
    # Train/ Val/ Test/ were read as three classes of a folder without splits (the model learned the split)
    for split, n in (("Train", 4), ("validation", 2), ("TEST", 3)):
        _write_folder(tmp_path / split, n=n)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
    data.setup()
    assert data.class_names == ["cat", "dog"]
    assert [len(data.splits[s]) for s in ("train", "val", "test")] == [8, 4, 6]
    _write_folder(tmp_path / "val", n=1)
    with pytest.raises(ValueError, match=r"both val/ and validation/ name the val split"):
        ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8).setup()
    # a class of vehicles named Train (images, no class folders inside) is a class of a folder without splits
    _write_folder(tmp_path / "vehicles", classes=("Bus", "Car", "Train"), n=2)
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "vehicles"), img_size=8)
    data.setup()
    assert data.class_names == ["Bus", "Car", "Train"]
    # beside a train/ of class folders, a val/ of loose images is a split without class folders: named, not skipped
    _write_folder(tmp_path / "loose" / "train")
    (tmp_path / "loose" / "val").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "loose" / "val" / "0.png")
    with pytest.raises(ValueError, match="expected one subfolder of images per class"):
        ImageDataModule(dataset="folder", root=str(tmp_path / "loose"), img_size=8).setup()


def test_folders_beside_split_folders_are_refused_and_loose_images_are_named(tmp_path, caplog):
    # vehicles/{bus, car, train/{old, new}}: a class named train holding folders made the root a split layout, and
    # bus/ and car/ were left out without a word (a 2-class model of old and new); so were images in no class folder
    _write_folder(tmp_path / "veh", classes=("bus", "car"), n=2)
    _write_folder(tmp_path / "veh" / "train", classes=("old", "new"), n=2)
    beside = (
        r"holds split folders \(train/\) and, beside them, 2 folder\(s\) of data files that no split reads: bus; car\. "
    )
    with pytest.raises(ValueError, match=beside + r".* if a class of yours is named like a split"):
        ImageDataModule(dataset="folder", root=str(tmp_path / "veh"), img_size=8).setup()
    # folders of no images beside the splits are not data: runs (run.dir inside the data's folder), labels, empty
    _write_folder(tmp_path / "ok" / "train", n=2)
    (tmp_path / "ok" / "runs" / "vit" / "20250101-120000" / "viz").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "ok" / "runs" / "vit" / "20250101-120000" / "viz" / "map.png")
    (tmp_path / "ok" / "labels").mkdir()
    (tmp_path / "ok" / "labels" / "train.csv").write_text("file,label\n")
    (tmp_path / "ok" / "extra").mkdir()
    for where in ("ok", "ok/train"):
        Image.new("RGB", (8, 8)).save(tmp_path / where / "stray.PNG")
    (tmp_path / "ok" / "notes.txt").write_text("not an image")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        data = ImageDataModule(dataset="folder", root=str(tmp_path / "ok"), img_size=8)
        data.setup()
    assert data.class_names == ["cat", "dog"]
    assert "2 image(s) lie outside the class folders, so no class reads them: stray.PNG; train/stray.PNG" in caplog.text


def test_kaggle_split_names_are_splits_and_split_folders_without_train_are_refused(tmp_path):
    # training/ validation/ test/ (and Training/ Testing/) were read as the classes: the model learned the split
    for split, n in (("Training", 4), ("Testing", 3)):
        _write_folder(tmp_path / "kaggle" / split, n=n)
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "kaggle"), img_size=8)
    data.setup()
    assert data.class_names == ["cat", "dog"] and len(data.splits["test"]) == 6
    for split in ("VALID", "test"):
        _write_folder(tmp_path / "no_train" / split, n=2)
    with pytest.raises(ValueError, match=r"holds split folders \(VALID/ \(val\), test/ \(test\)\) but no train split"):
        ImageDataModule(dataset="folder", root=str(tmp_path / "no_train"), img_size=8).setup()


def test_evaluate_on_a_folder_of_test_alone_or_of_one_image_scores_it(tmp_path):
    # test/ alone was read as a class named "test"; a folder of one image crashed with an IndexError
    _write_folder(tmp_path / "run_data", n=2)
    (saved,) = ImageDataModule(dataset="folder", root=str(tmp_path / "run_data"), img_size=8).save_artifacts(tmp_path)
    _write_folder(tmp_path / "only_test" / "test", n=2)
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "only_test"), img_size=8, labels=str(saved))
    data.setup()
    assert sorted(int(data.splits["test"][i]["label"]) for i in range(4)) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"holds no train split \(test only\): nothing to train on"):
        data.train_dataloader()  # a fit given data.labels must not train on the test images (review)
    _write_folder(tmp_path / "one", classes=("dog",), n=1)
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "one"), img_size=8, labels=str(saved))
    data.setup()
    assert [int(data.splits["val"][i]["label"]) for i in range(len(data.splits["val"]))] == [1]
    with pytest.raises(ValueError, match=r"holds one image: nothing to train on"):
        data.train_dataloader()


def test_transparent_and_exif_turned_images_are_read_as_viewers_show_them(tmp_path):
    from attnzoo.data.formats.image_io import load_rgb

    ink = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # black ink on a transparent background (icons, signatures)
    ink.putpixel((3, 3), (0, 0, 0, 255))
    ink.save(tmp_path / "ink.png")
    got = np.asarray(load_rgb(str(tmp_path / "ink.png")))
    assert (got[3, 3] == 0).all() and (got[0, 0] == 255).all()  # dropping alpha made every pixel black
    photo = Image.new("RGB", (4, 2), (0, 0, 255))
    photo.paste((255, 0, 0), (0, 0, 2, 2))  # stored: red left half
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: red on top
    photo.save(tmp_path / "turned.jpg", exif=exif, quality=100)
    shown = np.asarray(load_rgb(str(tmp_path / "turned.jpg")))
    assert shown.shape == (4, 2, 3) and shown[0, :, 0].min() > 200 and shown[-1, :, 0].max() < 60


def test_files_of_other_formats_in_class_folders_are_named_in_a_warning(tmp_path, caplog):
    # .gif and .jfif files were left out without a word (18 of 36 images in one user's folder)
    _write_folder(tmp_path)
    Image.new("RGB", (8, 8)).save(tmp_path / "cat" / "x.gif")
    (tmp_path / "dog" / "y.jfif").write_bytes(b"\xff\xd8")
    (tmp_path / "dog" / ".DS_Store").write_bytes(b"")
    (tmp_path / "dog" / "Thumbs.db").write_bytes(b"\xd0\xcf")  # Windows' thumbnails: not data, not named
    (tmp_path / "cat" / "desktop.ini").write_text("[.ShellClassInfo]\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
        data.setup()
    assert "2 file(s) in the class folders are not read" in caplog.text
    assert "x.gif (gif)" in caplog.text and "y.jfif (jfif)" in caplog.text and ".DS_Store" not in caplog.text
    assert "Thumbs.db" not in caplog.text and "desktop.ini" not in caplog.text


def test_a_runs_class_names_are_saved_and_another_folder_is_matched_to_them_by_name(tmp_path):
    # evaluate on a folder of classes b/ c/ scored them as the model's a and b (by position), and one of b/ c/ d/
    # without a word; the run now saves its class names and evaluate passes them as data.labels
    _write_folder(tmp_path / "run_data", classes=("a", "b", "c"), n=2)
    trained = ImageDataModule(dataset="folder", root=str(tmp_path / "run_data"), img_size=8)
    (saved,) = trained.save_artifacts(tmp_path / "run")
    assert json.loads(saved.read_text())["class_names"] == ["a", "b", "c"]
    _write_folder(tmp_path / "other", classes=("b", "c"), n=3)
    other = ImageDataModule(dataset="folder", root=str(tmp_path / "other"), img_size=8, labels=str(saved))
    other.setup()
    assert other.class_names == ["a", "b", "c"] and other.num_classes == 3
    labels = sorted(int(other.splits[s][i]["label"]) for s in ("train", "val") for i in range(len(other.splits[s])))
    assert labels == [1, 1, 1, 2, 2, 2]
    _write_folder(tmp_path / "other", classes=("d",), n=1)
    with pytest.raises(ValueError, match=r"classes that the run's model was not trained on: \['d'\]"):
        ImageDataModule(dataset="folder", root=str(tmp_path / "other"), img_size=8, labels=str(saved)).setup()
    with pytest.raises(ValueError, match=r"data.labels \['x'\] are not the classes of mnist5k"):
        ImageDataModule(labels=["x"]).setup()


def test_a_val_folder_without_a_rare_class_keeps_trains_numbering_and_an_unknown_class_is_named(tmp_path):
    _write_folder(tmp_path / "train", classes=("cat", "dog", "fox"), n=2)
    _write_folder(tmp_path / "val", classes=("cat", "fox"), n=2)  # no dog: before, "classes ... differ from train's"
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
    data.setup()
    assert data.class_names == ["cat", "dog", "fox"]
    assert sorted(data.splits["val"][i]["label"] for i in range(4)) == [0, 0, 2, 2]
    _write_folder(tmp_path / "test", classes=("cat", "owl"), n=1)
    with pytest.raises(ValueError, match=r"test has classes that .*train lacks: \['owl'\]"):
        ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8).setup()


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
        (dict(dataset="mnist5K"), "needs data.root.*did you mean 'mnist5k'"),
        # data.root without data.dataset=folder: the embedded digits would train, the folder unread
        (dict(root="/tmp"), "'/tmp' is not read by data.dataset 'mnist5k'.*add data.dataset=folder"),
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


def test_mixup_gives_mixed_batches_with_soft_labels(tmp_path):
    _write_folder(tmp_path, n=6, size=(40, 40))
    data = ImageDataModule(
        dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, trivial_augment=True, mixup_alpha=0.2
    )
    batch = next(iter(data.train_dataloader()))
    assert batch["image"].shape == (4, 3, 40, 40) and batch["label"].shape == (4, 2)
    torch.testing.assert_close(batch["label"].sum(1), torch.ones(4))  # mixed one-hot labels
    assert not torch.equal(batch["label"], batch["label"].round())  # soft: two images mixed
    assert next(iter(data.val_dataloader()))["label"].dtype == torch.long  # evaluation is never mixed


AUTO = dict(augment="auto", crop_scale="auto", trivial_augment="auto", mixup_alpha="auto", cutmix_alpha="auto",
            ink="auto")  # fmt: skip


def _symbols(root, size=64, n=8, seed=0):
    """A folder of drawn symbols: a bar or a ring per class, light-on-dark or dark-on-light at random."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    for label in ("bar", "ring"):
        (root / label).mkdir(parents=True)
        for i in range(n):
            light = i % 2 == 0
            img = Image.new("RGB", (size, size), (230, 230, 220) if light else (20, 30, 20))
            ink = (10, 10, 40) if light else (240, 240, 200)
            x, y, r = (int(v) for v in rng.integers(size // 4, size // 2, 3))
            draw = ImageDraw.Draw(img)
            if label == "bar":
                draw.line((x - r // 2, y, x + r // 2, y), fill=ink, width=3)
            else:
                draw.ellipse((x - r // 2, y - r // 2, x + r // 2, y + r // 2), outline=ink, width=3)
            img.save(root / label / f"{i}.png")


def _photos(root, size=64, n=8, seed=0):
    """A folder of textured (noise) images, two classes told apart by their tint."""
    rng = np.random.default_rng(seed)
    for c, label in enumerate(("warm", "cool")):
        (root / label).mkdir(parents=True)
        for i in range(n):
            noise = rng.integers(0, 160, (size, size, 3))
            noise[..., 0 if c == 0 else 2] += 90
            Image.fromarray(noise.astype(np.uint8)).save(root / label / f"{i}.png")


@pytest.mark.parametrize("size", [48, 64, 96, 128])
def test_auto_never_picks_a_label_changing_augmentation_for_drawings(tmp_path, size):
    from attnzoo.data.modules.image_kind import LABEL_CHANGING, SafeTrivialAugment

    _symbols(tmp_path, size=size)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, **AUTO)
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert chosen["data.trivial_augment"] == "safe" and chosen["data.crop_scale"] >= 0.8  # symbols are not cut out
    assert chosen["data.mixup_alpha"] == 0.0 and chosen["data.cutmix_alpha"] == 0.0
    assert chosen["data.ink"] is True  # both polarities in every class
    ops = [t for t in data.splits["train"].transform.transforms if isinstance(t, v2.TrivialAugmentWide)]
    assert len(ops) == 1 and isinstance(ops[0], SafeTrivialAugment)
    assert not set(ops[0]._AUGMENTATION_SPACE) & set(LABEL_CHANGING)
    assert not any(isinstance(t, v2.RandomInvert | v2.RandomSolarize | v2.RandomPosterize)
                   for t in data.splits["train"].transform.transforms)  # fmt: skip
    grid = size // chosen["model.patch_size"]
    assert grid * grid <= defaults.MAX_TOKENS and grid >= 6  # within the token budget, and not a coarse grid


def test_safe_trivial_augment_keeps_a_drawing_inside_and_its_polarity():
    from attnzoo.data.modules.image_kind import SafeTrivialAugment

    image = torch.zeros(3, 64, 64, dtype=torch.uint8)
    image[:, 24:40, 24:40] = 255  # a light square in the middle of a dark image
    augment = SafeTrivialAugment()
    torch.manual_seed(0)
    for _ in range(200):
        out = augment(image)
        assert out[:, 28:36, 28:36].float().mean() > 100  # the middle stays light: no inversion, not shifted out
        corners = torch.cat([out[:, :4, :4].flatten(), out[:, -4:, -4:].flatten()])
        assert corners.float().mean() < 100  # the background stays dark
    # dark strokes on white paper: what a shift or rotation uncovers is paper, not black bars that read as strokes
    paper = torch.full((3, 48, 48), 250, dtype=torch.uint8)
    paper[:, 20:28, 8:40] = 0  # one black stroke across the middle
    torch.manual_seed(0)
    for _ in range(200):
        out = augment(paper)
        border = torch.cat(
            [out[:, :2].flatten(), out[:, -2:].flatten(), out[:, :, :2].flatten(), out[:, :, -2:].flatten()]
        )
        assert (border < 128).float().mean() < 0.02, "black fill at the border"
    # the fill is each call's own: a batch, a float image or a PIL grey image after a colour one work as before
    for _ in range(20):
        assert augment(paper.expand(4, -1, -1, -1)).shape == (4, 3, 48, 48)  # 12 border colours were 12 fills
        assert augment(torch.full((3, 8, 8), 0.5)).max() <= 1.0  # a float image took the last uint8 image's 250
        assert augment(Image.new("L", (8, 8), 200)).mode == "L"  # one channel took three fills


def test_ink_makes_both_polarities_alike():
    from attnzoo.data.modules.image_kind import Ink

    dark = torch.full((3, 16, 16), 20, dtype=torch.uint8)
    dark[:, 6:10, 2:14] = 220
    light = 240 - dark  # the same bar, dark on light
    torch.testing.assert_close(Ink()(dark), Ink()(light))
    assert Ink()(dark)[0, 8, 8] == 200 and Ink()(dark)[0, 0, 0] == 0


def test_photographs_get_crops_and_safe_trivial_augment_but_no_ink(tmp_path):
    _photos(tmp_path)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, **AUTO)
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert chosen["data.ink"] is False and chosen["data.trivial_augment"] == "safe"
    assert 0.35 < chosen["data.crop_scale"] < 0.8 and chosen["data.mixup_alpha"] == 0.0
    assert chosen["model.patch_size"] == 8  # 64x64: an 8x8 grid


@pytest.mark.parametrize("side, patch", [(8, 1), (28, 4), (32, 4), (48, 6), (64, 8), (96, 12), (128, 16), (224, 28),
                                         (100, 20), (36, 6)])  # fmt: skip
def test_the_patch_grid_stays_within_the_token_budget(side, patch):
    assert defaults.patch_size(side) == patch
    assert (side // patch) ** 2 <= defaults.MAX_TOKENS


def test_an_odd_folder_size_is_resized_to_a_multiple_of_8(tmp_path):
    _symbols(tmp_path, size=100)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, **AUTO)
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert chosen["data.img_size"] == 96 and chosen["model.patch_size"] == 12  # an 8x8 grid


@pytest.mark.parametrize("side, fitted, patch", [(31, 30, 5), (29, 28, 4), (23, 21, 3), (17, 16, 2), (9, 8, 1),
                                                 (28, 28, 4), (25, 25, 5)])  # fmt: skip
def test_a_small_side_without_a_patch_grid_is_resized_to_one_that_has_it(tmp_path, side, fitted, patch):
    # 31 px images got model.patch_size 31: a 1x1 grid, one token for the whole image
    _symbols(tmp_path, size=side, n=2)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.25, batch_size=4, **AUTO)
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert (chosen["data.img_size"], chosen["model.patch_size"]) == (fitted, patch)
    assert 4 <= fitted // patch <= 8


def test_tiny_images_get_gentle_augmentation_only():
    data = ImageDataModule(augment="auto", crop_scale="auto", trivial_augment="auto", mixup_alpha="auto")
    data.setup()
    assert (data.augment, data.trivial_augment, data.mixup_alpha) == (False, False, 0.0)  # the embedded digits
    chosen = {k: v for k, (v, _) in defaults.image_data(embedded=False, img_size=28).items()}
    assert chosen["data.augment"] is True and chosen["data.crop_scale"] == 0.8 and chosen["data.mixup_alpha"] == 0.0


def test_augment_false_turns_off_every_augmentation_left_to_auto(tmp_path):
    _symbols(tmp_path)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.25, **{**AUTO, "augment": False})
    chosen = {k: v for k, (v, _) in data.auto_values().items()}
    assert chosen["data.trivial_augment"] is False and chosen["data.mixup_alpha"] == 0.0
    assert "data.augment is false" in data.auto_values()["data.trivial_augment"][1]
    assert chosen["data.ink"] is True  # not an augmentation: the input as the model reads it


def test_what_tools_leave_beside_the_data_is_neither_a_class_nor_an_image(tmp_path):
    # a Jupyter .ipynb_checkpoints/ folder was trained on as a third class, and macOS's ._0.png copies of a file's
    # metadata stopped the run as unreadable images
    _write_folder(tmp_path)
    for folder in (".ipynb_checkpoints", "__MACOSX", "cat/.ipynb_checkpoints"):
        (tmp_path / folder).mkdir()
        Image.new("RGB", (8, 8)).save(tmp_path / folder / "9.png")
    (tmp_path / "dog" / "._0.png").write_bytes(b"\x00\x05\x16\x07 not an image")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.25)
    data.setup()
    assert data.class_names == ["cat", "dog"]
    assert len(data.splits["train"]) + len(data.splits["val"]) == 8 and not data.skipped


def test_runs_made_inside_the_data_folder_are_not_a_class(tmp_path, caplog):
    # `data.root=.` in the folder of cat/ and dog/: the second run trained a third class, runs/, on the first one's
    # plots (ImageFolder reads a class folder to any depth)
    _write_folder(tmp_path)
    runs_inside(tmp_path)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.25)
        data.setup()
    assert data.class_names == ["cat", "dog"]
    assert len(data.splits["train"]) + len(data.splits["val"]) == 8
    assert f"{tmp_path / 'runs'} holds attnzoo runs or ablations" in caplog.text
    for split in ("train", "val"):  # the split layout: runs/ beside train/ and val/ is no class folder left unread
        _write_folder(tmp_path / "split" / split)
    runs_inside(tmp_path / "split")
    data = ImageDataModule(dataset="folder", root=str(tmp_path / "split"), img_size=8)
    data.setup()
    assert data.class_names == ["cat", "dog"] and len(data.splits["val"]) == 8


def test_a_class_folder_holding_a_config_of_its_own_is_still_a_class(tmp_path):
    _write_folder(tmp_path)
    (tmp_path / "cat" / "config.yaml").write_text("camera: x100\n")  # no run wrote it, and no run's files beside it
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.25)
    data.setup()
    assert data.class_names == ["cat", "dog"]


def test_an_empty_class_folder_is_a_class_val_lacks_and_an_error_in_train(tmp_path, caplog):
    # an empty val/dog/ stopped the run ("Found no valid file for the classes dog"), which a val folder lacking dog
    # does not; an empty train class got the same message, not naming the split nor the .gif files it held
    _write_folder(tmp_path / "train")
    _write_folder(tmp_path / "val", classes=("cat",), n=2)
    (tmp_path / "val" / "dog").mkdir()
    (tmp_path / "val" / "owl").mkdir()  # a class train lacks, but empty: nothing to refuse
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
    data.setup()
    assert data.class_names == ["cat", "dog"] and len(data.splits["val"]) == 2
    for name in ("cat", "dog"):  # every class folder of test/ empty: no test split, not a crash in stacking
        (tmp_path / "test" / name).mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8)
        data.setup()
    assert "test" not in data.splits and "holds no image (its class folders are empty): no test split" in caplog.text
    (tmp_path / "train" / "fox").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "fox" / "0.gif")
    with pytest.raises(ValueError, match=r"train/fox'?\]? of the train split hold no image .*there: 0\.gif"):
        ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8).setup()


def test_skipping_every_image_of_a_class_is_an_error_naming_it(tmp_path):
    _write_folder(tmp_path)
    (tmp_path / "fox").mkdir()
    (tmp_path / "fox" / "0.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"fox'?\]? of the train split hold no image that can be read"):
        ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, on_bad_image="skip").setup()


def test_an_image_of_too_many_pixels_is_named_and_can_be_skipped(tmp_path, monkeypatch):
    # PIL's DecompressionBombError is no OSError: it left setup as a traceback naming no file, skip or not
    import PIL.Image

    _write_folder(tmp_path, size=(8, 8))
    Image.new("1", (64, 64)).save(tmp_path / "cat" / "huge.png")
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)  # 4096 pixels: more than twice the limit
    with pytest.raises(ValueError, match=r"huge\.png \(DecompressionBombError"):
        ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8).setup()
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, on_bad_image="skip")
    data.setup()
    assert data.skipped == [str(tmp_path / "cat" / "huge.png")]


def test_the_held_out_val_part_keeps_each_class_its_share_and_its_last_image_in_train(tmp_path, caplog):
    # the val fraction was drawn over all images: a class of one image could land in it (the model kept an output
    # training never saw), and with 9 cats and 9 dogs a val part of 2 could hold two cats and no dog
    _write_folder(tmp_path, classes=("cat", "dog"), n=9)
    (tmp_path / "owl").mkdir()
    Image.new("RGB", (20, 12), (200, 10, 10)).save(tmp_path / "owl" / "0.png")
    parts = set()
    for seed in range(20):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attnzoo"):
            data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, seed=seed)
            data.setup()
        val = sorted(int(data.splits["val"][i]["label"]) for i in range(len(data.splits["val"])))
        assert val == [0, 1] and len(data.splits["train"]) == 17  # one cat and one dog; the owl trains
        assert "held-out val part" not in caplog.text
        parts.add(tuple(round(float(data.splits["val"][i]["image"].sum()), 3) for i in range(2)))
    assert len(parts) > 5  # which cat and which dog: the seed's
    for c, name in enumerate(("a", "b", "c")):  # a class of one image each: val must take one training then lacks
        (tmp_path / "ones" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8), (80 * c, 10, 10)).save(tmp_path / "ones" / name / "0.png")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        ImageDataModule(dataset="folder", root=str(tmp_path / "ones"), img_size=8).setup()
    assert "are all in the held-out val part" in caplog.text


@pytest.mark.parametrize("size, side", [((200, 150), 128), ((100, 100), 96), ((40, 300), 40), ((52, 52), 48)])
def test_the_side_chosen_from_64_px_is_a_multiple_of_32_whose_patch_a_conv_stem_reads(tmp_path, size, side):
    # 200x150 photos got 144 px and patch 18, read by a linear map: strided convolutions need a patch of 4k
    from attnzoo.data.modules import defaults

    _write_folder(tmp_path, n=3, size=size)
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.3)
    data.setup()
    assert data.img_size == side
    stem = defaults.image_stem(side, defaults.auto_patch_size(side))[0]
    assert stem == ("conv" if side >= 64 else "patch")


def test_an_image_size_set_far_above_the_images_is_warned_about_with_the_memory_of_a_batch(tmp_path, caplog):
    # data.img_size=4096 for 96 px images: the run was killed for memory in its first validation, without a word
    _write_folder(tmp_path, n=3, size=(96, 80))
    fine = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=160, val_fraction=0.3)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        fine.setup()
        fine.check_given_size()
    assert "img_size" not in caplog.text  # less than twice the side: fine
    big = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=4096, val_fraction=0.3, batch_size=64)
    big.in_chans, big._raw_train = 3, big._load()["train"]  # as setup leaves them (it would resize to 4096 px)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        big.check_given_size()
    assert "data.img_size 4096 is 43x the largest side of the images (96 px, of 6 looked at)" in caplog.text
    assert "a batch of 64 is 12.0 GiB of pixels before the model" in caplog.text


def test_a_patch_that_does_not_divide_the_side_chosen_from_the_images_names_the_data_as_its_source(tmp_path):
    # "does not divide the images' side, 96 px (set in recipes/vit.yaml)": the recipe leaves it null; the images chose
    from pathlib import Path

    from attnzoo.config import ConfigError, load
    from attnzoo.run import build

    _write_folder(tmp_path, n=3, size=(96, 96))
    vit = Path(__file__).resolve().parents[2] / "recipes" / "vit.yaml"
    cfg = load([vit], ["data.dataset=folder", f"data.root={tmp_path}", "model.patch_size=200"])
    with pytest.raises(ConfigError, match=r"the images' side, 96 px \(set in the run, chosen from the data \(auto"):
        build(cfg)


def test_a_patch_size_set_keeps_the_side_of_a_multiple_of_8_that_it_divides(tmp_path):
    # 120 px images with model.patch_size=10 built at 120 px; rounded to 96 for a conv stem, the patch was refused
    from pathlib import Path

    from attnzoo.config import load
    from attnzoo.run import build

    _write_folder(tmp_path, n=3, size=(120, 120))
    vit = Path(__file__).resolve().parents[2] / "recipes" / "vit.yaml"
    folder = ["data.dataset=folder", f"data.root={tmp_path}", "model.depth=1", "run.baseline=false"]
    data, task, cfg = build(load([vit], [*folder, "model.patch_size=10"]))
    assert cfg.section("data")["img_size"] == 120 and task.net.grid_size == (12, 12)
    data, task, cfg = build(load([vit], folder))  # the patch left to auto: 96 px, 12-pixel patches, a conv stem
    assert cfg.section("data")["img_size"] == 96 and cfg.section("model")["stem"] == "conv"


def test_a_side_set_by_a_starts_weights_is_not_warned_about_as_one_set_by_hand(tmp_path, caplog):
    # a 96 px timm ViT fine-tuned on 32 px images: "data.img_size 96 is 3x ... leave data.img_size out", which it was
    from pathlib import Path

    import timm

    from attnzoo.config import load
    from attnzoo.run import build

    _write_folder(tmp_path / "imgs", n=3, size=(32, 32))
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=96, depth=1, num_classes=10)
    torch.save(net.state_dict(), tmp_path / "vit_tiny_patch16_96.pth")
    vit = Path(__file__).resolve().parents[2] / "recipes" / "vit.yaml"
    folder = ["data.dataset=folder", f"data.root={tmp_path / 'imgs'}", "run.baseline=false", "data.batch_size=4"]
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        build(load([vit], [*folder, f"model.init_from={tmp_path / 'vit_tiny_patch16_96.pth'}"]))
    assert "largest side of the images" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="attnzoo"):  # the same size set by hand is
        build(load([vit], [*folder, "data.img_size=96", "model.patch_size=16", "model.depth=1"]))
    assert "data.img_size 96 is 3x the largest side of the images (32 px" in caplog.text


@pytest.mark.parametrize("on_disk", [False, True])
def test_training_crops_are_taken_from_the_image_evaluation_sees_in_memory_or_from_disk(tmp_path, monkeypatch, on_disk):
    # over 1 GiB (read from disk every epoch) a training crop was cut from the original 4:1 image, where evaluation
    # squashed the whole of it: a strip at the left edge that tells the class never reached training
    monkeypatch.setattr("attnzoo.data.modules.image.MEMORY_BYTES", 0 if on_disk else 2**30)
    for split in ("train", "val"):
        for c, name in enumerate(["red", "green"]):
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(6):
                pixels = np.full((16, 64, 3), 30, np.uint8)
                pixels[:, :8, c] = 250  # the left eighth of the width
                Image.fromarray(pixels).save(tmp_path / split / name / f"{i}.png")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=16, augment=True, crop_scale=0.5,
                           hflip=False, trivial_augment=False, ink=False)  # fmt: skip
    data.setup()
    torch.manual_seed(0)
    seen = 0
    for _ in range(8):
        for i in range(len(data.splits["train"])):
            item = data.splits["train"][i]
            channel = ["red", "green"].index(data.class_names[item["label"]])
            seen += int(item["image"][channel, :, 0].mean() > 0)  # the class's strip at the left column
    assert seen >= 8 * len(data.splits["train"]) // 4, seen  # kept in about half the crops (it was in none)


def test_photos_of_many_sizes_take_their_median_side_not_that_of_a_few_that_match(tmp_path):
    # 14 photos of sizes all their own and 4 thumbnails of 48x36: img_size 32 ("4 of 18 train images are 48x36"),
    # every photo shrunk to 32 px
    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(7):
            Image.new("RGB", (160 + 8 * i + c, 120 + 4 * i), color=(40 * c, 10, 200)).save(tmp_path / name / f"{i}.png")
        for i in range(2):
            Image.new("RGB", (48, 36), color=(40 * c, 10, 200)).save(tmp_path / name / f"thumb{i}.png")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.01)
    data.setup()
    assert data.img_size == 128 and "the median shorter side of 17 train images of" in data.chosen["data.img_size"][1]


def test_drawings_are_told_from_photos_alike_in_memory_and_read_from_disk(tmp_path, monkeypatch):
    # read from disk, the inspection looked at the originals (not resized as training sees them): scans of drawings
    # on grainy paper were "photographs" there (crop scale 0.5) and drawings in memory (0.8)
    rng = np.random.default_rng(0)
    for c, name in enumerate(["ring", "bar"]):
        (tmp_path / name).mkdir()
        for i in range(6):
            pixels = np.clip(200 + rng.normal(0, 40, (480, 640, 3)), 0, 255).astype(np.uint8)  # grainy paper
            pixels[200 + 10 * i : 260 + 10 * i, 100 + 80 * c : 400 + 80 * c] = 0  # a dark stroke
            Image.fromarray(pixels).save(tmp_path / name / f"{i}.png")
    chosen = {}
    for on_disk in (False, True):
        monkeypatch.setattr("attnzoo.data.modules.image.MEMORY_BYTES", 0 if on_disk else 2**30)
        data = ImageDataModule(dataset="folder", root=str(tmp_path), val_fraction=0.2, augment="auto",
                               crop_scale="auto", trivial_augment="auto", ink="auto")  # fmt: skip
        data.setup()
        chosen[on_disk] = data.crop_scale
    assert chosen[True] == chosen[False] == 0.8


def test_one_mean_and_std_value_normalizes_every_channel_and_two_for_three_channels_are_refused():
    # a folder of grey files is read as RGB: data.mean=[0.13] data.std=[0.31] (MNIST's) was refused as "one value per
    # channel (3)"
    from attnzoo.data.modules.image import normalization

    assert normalization(3, [0.13], [0.31]) == ([0.13] * 3, [0.31] * 3)
    assert normalization(1, [0.13], [0.31]) == ([0.13], [0.31])
    with pytest.raises(ValueError, match=r"need one value per channel \(3\)"):
        normalization(3, [0.1, 0.2], [0.3, 0.4])
