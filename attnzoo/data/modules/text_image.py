"""Image-text pairs: JSONL with images on disk, or generated scenes (the embedded default).

JSONL: one object a line, `{"image": "imgs/0001.png", "text": "is there a red circle?", "label": "yes"}`, the
image path relative to the JSONL file. Two tasks: `vqa` (the label is an answer from a fixed vocabulary) and
`match` (the label says whether the text fits the image: true/false, 1/0 or "match"/"mismatch"). Labels are
stripped of surrounding whitespace, as text classification strips its labels ("yes " is the answer "yes").

Batches: {"image": [B, C, H, W] float, "tokens": [B, L] long, "padding_mask": [B, L] bool (True = pad),
"label": [B] long}; texts are tokenized by `data.tokenizer` (UTF-8 bytes by default,
`attnzoo.data.tokenizers.tokenize`).
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from ..embedded.scenes import MATCH_ANSWERS, SceneGenerator
from ..formats.image_io import ImageFileError, load_rgb, unreadable_images
from ..formats.text_files import check_label_forms, read_utf8
from ..tokenizers.factory import make_tokenizer
from ..tokenizers.subword import KINDS as SUBWORD_KINDS
from ..tokenizers.subword import log_unknown, save_run_tokenizer
from ..tokenizers.tokenize import truncate
from . import defaults
from .base import DataModule, given_class_names, save_class_names
from .batching import EpochShuffle, loader_generator, run_seed
from .image import MEMORY_BYTES

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

TASKS = ("vqa", "match")
ON_BAD_IMAGE = ("error", "skip")


class Collate:
    """Stack images and labels; right-pad token ids with `pad_id` to the longest text of the batch."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Tensor]:
        lengths = torch.tensor([len(it["tokens"]) for it in items])
        # [B, L]; at least one position, all padding when every text of the batch is empty (a length of 0 has no
        # attention to run)
        tokens = torch.full((len(items), max(1, int(lengths.max()))), self.pad_id, dtype=torch.long)
        for i, it in enumerate(items):
            tokens[i, : len(it["tokens"])] = torch.as_tensor(it["tokens"], dtype=torch.long)
        return {
            "image": torch.stack([it["image"] for it in items]),  # [B, C, H, W]
            "tokens": tokens,
            "padding_mask": torch.arange(tokens.shape[1])[None, :] >= lengths[:, None],  # [B, L], True = pad
            "label": torch.tensor([it["label"] for it in items], dtype=torch.long),
        }


class PairDataset(Dataset):
    """Pairs of an image (uint8 array, or a file read on access) and a text, with a class index."""

    def __init__(
        self,
        images: np.ndarray | list[Path],
        texts: list[str],
        tokens: list[list[int]],
        labels: list[int],
        *,
        image_size: int,
        blank: bool,
        shift: int = 0,
    ) -> None:
        self.images, self.texts, self.tokens, self.labels = images, texts, tokens, labels
        self.image_size, self.blank, self.shift = image_size, blank, shift

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.blank:  # the text-only baseline: every image the same constant
            image = torch.zeros(3, self.image_size, self.image_size)
        else:
            pixels = self.images[i]
            if isinstance(pixels, Path):
                pixels = _read(pixels, self.image_size)
            image = torch.tensor(pixels).permute(2, 0, 1).float()  # [H, W, 3] -> [3, H, W]
            image = image / 127.5 - 1.0
            if self.shift:
                image = _shift(image, self.shift)
        return {"image": image, "tokens": self.tokens[i], "label": self.labels[i]}


def _shift(image: Tensor, most: int) -> Tensor:
    """[C, S, S] moved by up to `most` pixels along each axis, the border repeated into the gap. No flips and no
    colour changes: answers may say "left of" or name a colour."""
    dy, dx = (int(d) for d in torch.randint(-most, most + 1, (2,)))
    padded = torch.nn.functional.pad(image[None], (most, most, most, most), mode="replicate")[0]  # [C, S+2m, S+2m]
    s = image.shape[-1]
    return padded[:, most + dy : most + dy + s, most + dx : most + dx + s]


def _read(path: Path, image_size: int) -> np.ndarray:
    """uint8 [S, S, 3] of the image file, resized (16-bit and float images scaled, not clipped: `load_rgb`);
    errors name the file."""
    if not path.is_file():
        raise ImageFileError(f"cannot read image {path}: no such file")
    img = load_rgb(str(path))
    if img.size != (image_size, image_size):
        img = img.resize((image_size, image_size), Image.BILINEAR)
    return np.asarray(img)


class TextImageDataModule(DataModule):
    """Image-text classification data; the embedded default is generated scenes (`attnzoo.data.embedded.scenes`).

    Args:
        task: "vqa" (answer classification) or "match" (image-text matching).
        train, val, test: JSONL files; all None for generated scenes. `train` needs `val`.
        classes: the answer vocabulary for `vqa` JSONL, a list or a run's `labels.json` (default: the sorted labels of
            `train`). A run saves its own as `labels.json`, which `evaluate` passes, so other data's answers keep
            the model's numbering.
        image_size: images are resized to this square size.
        tokenizer: "bytes" (UTF-8 bytes), a subword kind learned from the train split's texts ("bpe", "wordpiece",
            "unigram"; saved with a run as `tokenizer.json`) or a `tokenizers` JSON file
            (`attnzoo.data.tokenizers.factory.make_tokenizer`).
        vocab_size: most tokens of a learned subword vocabulary (a question set's words mostly fit whole).
        lowercase: lowercase texts before a learned subword tokenizer learns or applies its vocabulary.
        max_len: texts are cut to this many tokens (how many were cut is logged).
        on_bad_image: "error" stops at a missing or unreadable image naming it; "skip" leaves the pair out
            and logs how many were skipped.
        blank_image: feed a constant image (the text-only baseline).
        augment: shift training images by up to 1/16 of their side (never flipped or recoloured: answers may say
            "left of" or name a colour); "auto": off for the generated scenes, on for files
            (`attnzoo.data.modules.defaults.text_image_data`).
        num_train, num_val: generated examples per split (test has `num_val`).
        grid, held_out: scene layout and colour/shape pairs never named in training texts.
        seed: the generated data follow from it.
    """

    def __init__(
        self,
        *,
        task: str = "vqa",
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        classes: str | list[str] | None = None,
        image_size: int = 48,
        tokenizer: str = "bytes",
        vocab_size: int = 2000,
        lowercase: bool = False,
        max_len: int = 64,
        on_bad_image: str = "error",
        blank_image: bool = False,
        augment: bool | Literal["auto"] = False,
        batch_size: int = 64,
        num_workers: int = 0,
        num_train: int = 6000,
        num_val: int = 1000,
        grid: int = 3,
        held_out: int = 3,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"data.task {task!r} is not one of {TASKS}")
        if on_bad_image not in ON_BAD_IMAGE:
            raise ValueError(f"data.on_bad_image {on_bad_image!r} is not one of {ON_BAD_IMAGE}")
        if (train is None) != (val is None):
            raise ValueError(f"data.train ({train}) and data.val ({val}) go together: give both JSONL files or neither")
        if test is not None and train is None:
            raise ValueError(f"data.test ({test}) needs data.train and data.val")
        for name, value in {"image_size": image_size, "max_len": max_len, "batch_size": batch_size}.items():
            if value < 1:
                raise ValueError(f"data.{name} ({value}) must be >= 1")
        self.task, self.files = task, {"train": train, "val": val, "test": test}
        self.tokenizer_spec, self.vocab_size, self.lowercase = tokenizer, vocab_size, lowercase
        # a learned kind is learned in setup, from the train split's texts
        self.tokenizer = None if tokenizer in SUBWORD_KINDS else make_tokenizer(tokenizer)
        classes = None if classes is None else given_class_names(classes, "data.classes")
        self.classes, self.image_size, self.max_len = classes, image_size, max_len
        self.on_bad_image, self.blank_image, self.augment = on_bad_image, blank_image, augment
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.batch_size, self.num_workers = batch_size, num_workers
        self.num_train, self.num_val, self.grid, self.held_out, self.seed = num_train, num_val, grid, held_out, seed
        self.class_names: list[str] = []
        self.datasets: dict[str, PairDataset] = {}
        self.skipped: dict[str, int] = {}  # split -> pairs left out for a bad image

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def model_inputs(self) -> dict[str, Any]:
        """What the model builder needs to know about this data."""
        self.setup()  # a learned tokenizer's vocabulary size is known once the train split is read
        return {
            "num_classes": self.num_classes,
            "img_size": self.image_size,
            "in_chans": 3,
            "vocab_size": self.tokenizer.vocab_size,
            "pad_id": self.tokenizer.pad_id,
            "max_len": self.max_len,
        }

    AUTO_KEYS = defaults.TEXT_IMAGE_KEYS

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and values for
        `AUTO_KEYS` (used where the config says auto)."""
        self.setup()
        embedded, num_train = self.files["train"] is None, len(self.datasets["train"])
        return {
            **self.chosen,
            **defaults.text_image_run(embedded=embedded, num_train=num_train, batch_size=self.step_batch_size),
        }

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.augment == "auto":
            self.augment, why = defaults.text_image_data(
                embedded=self.files["train"] is None, img_size=self.image_size
            )["data.augment"]
            self.chosen["data.augment"] = (self.augment, why)
        if self.files["train"] is None:
            self._setup_scenes()
        else:
            self._setup_jsonl()

    def _setup_scenes(self) -> None:
        gen = SceneGenerator(task=self.task, grid=self.grid, held_out=self.held_out, seed=self.seed)
        self.class_names = self._fixed_classes(gen.class_names, "the embedded scenes' answers")
        index = {name: i for i, name in enumerate(self.class_names)}
        for split, n in {"train": self.num_train, "val": self.num_val, "test": self.num_val}.items():
            examples = gen.examples(n, split=split)
            images = gen.images(examples, image_size=self.image_size, split=split)
            texts = [ex.text for ex in examples]
            labels = [index[ex.label] for ex in examples]
            self.datasets[split] = self._dataset(split, images, texts, labels)

    def _setup_jsonl(self) -> None:
        records = {split: _load_jsonl(Path(path)) for split, path in self.files.items() if path is not None}
        if self.task == "match":
            self.class_names = self._fixed_classes(list(MATCH_ANSWERS), "the answers of data.task=match")
        elif self.classes is not None:
            self.class_names = [str(c) for c in self.classes]
        else:
            first: dict[str, int] = {}
            for r in records["train"]:
                first.setdefault(_answer(r["label"]), r["line"])
            check_label_forms(first, f"{self.files['train']}: label")
            self.class_names = sorted(first)
        checked: dict[Path, str | None] = {}  # an image several questions or pairs share is decoded once
        decoded: dict[Path, np.ndarray] = {}  # and resized once, kept in memory up to MEMORY_BYTES
        for split, recs in records.items():
            path = Path(self.files[split])
            kept, images, labels = [], [], []
            for rec in recs:
                image = (path.parent / rec["image"]).resolve()
                if not rec["image"].strip():  # "" is the JSONL file's own folder
                    problem = f"path {rec['image']!r} is empty; give the image file, relative to {path.parent}"
                else:
                    if image not in checked:
                        checked[image] = self._decoded(image, decoded)
                    named = path.parent / rec["image"]  # as the line names it, not where links lead
                    problem = None if checked[image] is None else f"{named} {checked[image]}"
                if problem is not None:
                    if self.on_bad_image == "error":
                        raise ValueError(
                            f"{path}:{rec['line']}: image {problem} ({_bad_image_hint(path, rec['image'])})"
                        )
                    self.skipped[split] = self.skipped.get(split, 0) + 1
                    if self.skipped[split] == 1:
                        log.warning("%s:%d: image %s; skipping (data.on_bad_image=skip)", path, rec["line"], problem)
                    continue
                kept.append(rec["text"])
                images.append(image)
                labels.append(self._label(rec, path))
            if self.skipped.get(split):
                log.warning(
                    "%s: skipped %d of %d pairs with a missing or unreadable image",
                    path,
                    self.skipped[split],
                    len(recs),
                )
            if not kept:
                raise ValueError(f"{path}: no pair left with a readable image ({len(recs)} lines)")
            self.datasets[split] = self._dataset(split, self._in_memory(images, decoded), kept, labels)
        if decoded:
            read = {p for ds in self.datasets.values() for p in ds.images if isinstance(p, Path)}  # beyond the budget
            log.info("data: %d image files decoded and resized to %d px once, kept in memory (%.0f MiB)%s",
                     len(decoded), self.image_size, sum(a.nbytes for a in decoded.values()) / 2**20,
                     f"; {len(read)} others are read from disk each epoch" if read else "")  # fmt: skip

    def _decoded(self, image: Path, decoded: dict[Path, np.ndarray]) -> str | None:
        """What is wrong with `image` (None: nothing); one kept in memory is decoded and resized here, once, as the
        check (it was decoded twice: to check it, then to keep it)."""
        if not image.is_file() or not self._fits(decoded):
            return _check_image(image)
        try:
            decoded[image] = _read(image, self.image_size)
        except (ImageFileError, OSError, ValueError):
            return _check_image(image) or "cannot be read"  # named as the check names it
        return None

    def _fits(self, decoded: dict[Path, np.ndarray]) -> bool:
        """Whether one more resized image is kept in memory beside `decoded` (within `MEMORY_BYTES`; none for
        `blank_image`, whose pixels are never read)."""
        return not self.blank_image and (len(decoded) + 1) * self.image_size**2 * 3 <= MEMORY_BYTES

    def _in_memory(self, images: list[Path], decoded: dict[Path, np.ndarray]) -> list[Path | np.ndarray]:
        """`images` as their resized pixels (decoded once into `decoded`) while those fit in `MEMORY_BYTES`; a photo's
        file decoded at full size on every access made an epoch of photos many times slower than the model."""
        if self.blank_image:
            return list(images)
        for path in images:
            if path not in decoded and self._fits(decoded):
                decoded[path] = _read(path, self.image_size)
        return [decoded.get(path, path) for path in images]

    def _fixed_classes(self, names: list[str], what: str) -> list[str]:
        """`names`, the classes the data fixes; a `classes` list of others is an error (it was ignored), while a run's
        labels.json of the same (evaluate) is not."""
        if self.classes is not None and [str(c) for c in self.classes] != names:
            raise ValueError(
                f"data.classes {[str(c) for c in self.classes]} are not {what}, {names}: data.classes orders the "
                "answers of your own vqa JSONL files (data.train); leave it out here"
            )
        return names

    def _label(self, rec: dict[str, Any], path: Path) -> int:
        label = rec["label"]
        if self.task == "match":
            key = label.strip().lower() if isinstance(label, str) else label  # "true" as a string, as CSV tools write
            value = {True: 1, False: 0, "true": 1, "false": 0, "1": 1, "0": 0, "match": 1, "mismatch": 0}.get(key)
            if isinstance(label, float) or value is None:  # (1 and 0 hash as True and False)
                raise ValueError(
                    f"{path}:{rec['line']}: match label {label!r} is not one of true/false, 1/0, match/mismatch"
                )
            return value
        if _answer(label) not in self.class_names:
            valid = self.class_names if len(self.class_names) <= 20 else [*self.class_names[:20], "..."]
            raise ValueError(f"{path}:{rec['line']}: label {label!r} is not an answer class; valid: {valid}")
        return self.class_names.index(_answer(label))

    def _dataset(self, split: str, images: np.ndarray | list[Path], texts: list[str], labels: list[int]) -> PairDataset:
        if self.tokenizer is None:  # a learned kind: the train split comes first
            self.tokenizer = make_tokenizer(
                self.tokenizer_spec, texts=texts, vocab_size=self.vocab_size, lowercase=self.lowercase
            )
            log.info("data.tokenizer: %s learned from the %d training texts", self.tokenizer_spec, len(texts))
        ids = [self.tokenizer.encode(t) for t in texts]
        log_unknown(self.tokenizer, ids, split)
        long = sum(len(x) > self.max_len for x in ids)
        if long:
            log.warning("%s: cut %d of %d texts to data.max_len=%d tokens", split, long, len(ids), self.max_len)
        ids = [truncate(self.tokenizer, x, self.max_len) for x in ids]
        shift = max(1, self.image_size // 16) if self.augment and split == "train" else 0
        return PairDataset(images, texts, ids, labels, image_size=self.image_size, blank=self.blank_image, shift=shift)

    def patience_for(self, epochs: int) -> tuple[int, str]:
        return defaults.text_image_patience(epochs, embedded=self.files["train"] is None, given=True)

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """The answers in the model's order (`labels.json`: evaluate on other data numbers its answers alike, not
        from that data's train file), and a tokenizer learned from the train split, or a copy of the file given, as
        `run_dir/tokenizer.json` (what every command that loads the run reads: the weights need exactly these ids)."""
        self.setup()
        labels = save_class_names(run_dir, self.class_names, str(self.files.get("train") or "embedded"))
        return [labels, *save_run_tokenizer(self.tokenizer, Path(run_dir))[0]]

    def baseline_features(self, split: str) -> tuple[dict[str, Any], np.ndarray] | None:
        """The split's texts and pixels ([N, S * S * 3], as the model sees them) and class indices, for a classical
        baseline (`attnzoo.run.baseline`)."""
        self.setup()
        if split not in self.datasets:
            return None
        ds = copy.copy(self.datasets[split])
        ds.shift = 0  # never augmented
        pixels = np.stack([ds[i]["image"].flatten().numpy() for i in range(len(ds))])  # [N, 3 * S * S]
        return {"text": list(ds.texts), "pixels": pixels}, np.asarray(ds.labels)

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        if split not in self.datasets:
            raise ValueError(f"no {split} data: give data.{split} (a JSONL file)")
        data = self.datasets[split]
        return DataLoader(
            data,
            batch_size=self.batch_size,
            sampler=EpochShuffle(data, seed=run_seed(self.seed)) if train else None,
            num_workers=self.num_workers,
            collate_fn=Collate(self.tokenizer.pad_id),
            persistent_workers=self.num_workers > 0,
            generator=loader_generator(train, self.num_workers, self.seed),
        )


def _answer(label: Any) -> str:
    """The class name of a JSONL label, stripped as the text-classification reader strips its labels: "yes " is the
    class "yes", not a class of its own."""
    return str(label).strip()


def _load_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records with `image`, `text`, `label` and their line number; errors name the file and line."""
    if not path.is_file():
        raise ValueError(f"JSONL file not found: {path}")
    records, windows = [], []  # the line numbers of image paths written with backslashes
    with io.StringIO(read_utf8(path)) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({err.msg}){_jsonl_hint(path, line)}") from err
            if not isinstance(rec, dict):
                raise ValueError(
                    f"{path}:{line_no}: expected an object with image, text, label; got {type(rec).__name__}"
                )
            missing = [k for k in ("image", "text", "label") if k not in rec]
            if missing:
                raise ValueError(
                    f"{path}:{line_no}: missing key(s) {missing}; the line has {sorted(rec)}, each line needs image, "
                    "text and label (rename the keys in the file: the names are fixed)"
                )
            if not isinstance(rec["image"], str) or not isinstance(rec["text"], str):
                raise ValueError(f"{path}:{line_no}: image and text must be strings")
            if rec["label"] is None or isinstance(rec["label"], list | dict):  # would become a class "None"
                raise ValueError(
                    f"{path}:{line_no}: label {rec['label']!r} is not a label: give one string, number or true/false "
                    "per line (a question with several answers is one line per answer)"
                )
            if not _answer(rec["label"]):  # stripped, it would be a class ""
                raise ValueError(f"{path}:{line_no}: empty label {rec['label']!r}; give each line its answer")
            image = _posix_image(path, rec["image"])
            if image != rec["image"]:
                windows.append(line_no)
            records.append({**rec, "line": line_no, "image": image})
    if not records:
        raise ValueError(f"{path}: no records")
    if windows:
        log.info("%s: %d image paths written with backslashes (a Windows folder separator) read with /, as the "
                 "files are named here (first: line %d)", path, len(windows), windows[0])  # fmt: skip
    return records


def _posix_image(path: Path, image: str) -> str:
    """`image` of a JSONL line as a path here: one written on Windows (imgs\\0001.png) with / where only that
    form names a file."""
    if "\\" not in image or os.sep == "\\" or (path.parent / image).exists():
        return image
    posix = image.replace("\\", "/")
    return posix if (path.parent / posix).is_file() else image


def _jsonl_hint(path: Path, line: str) -> str:
    """What text-image data looks like, for a line that is not JSON in a file that may not be JSONL at all (a CSV)."""
    table = path.suffix.lower() in (".csv", ".tsv")
    if not table and line.lstrip().startswith("{"):
        return ""  # a JSONL line gone wrong: the JSON error says where
    other = f", not {path.suffix[1:].upper()}" if table else ""
    return (
        f"; text-image data is JSONL{other}: one JSON object a line "
        'with keys image (a path relative to the JSONL file), text and label, e.g. {"image": "imgs/0001.png", '
        '"text": "is there a red circle?", "label": "yes"}' + ("; write each row as such a line" if table else "")
    )


def _bad_image_hint(path: Path, image: str) -> str:
    """What to do about a JSONL line's missing or unreadable image: a path written relative to the folder the command
    runs in, not to the JSONL file's, is the usual cause of a missing one."""
    here = Path(image)
    if image.strip() and not here.is_absolute() and here.is_file() and not (path.parent / image).exists():
        return (
            f"image paths are relative to the JSONL file's folder, {path.parent}; {image} is a file relative to the "
            f"current folder, {Path.cwd()}: write the paths relative to {path.parent}, or absolute"
        )
    where = "" if (path.parent / image).exists() else "image paths are relative to the JSONL file's folder; "
    return f"{where}data.on_bad_image=skip leaves such pairs out"


def _check_image(path: Path) -> str | None:
    """None if `path` is a readable image, else what is wrong with it."""
    if path.is_dir():
        return "is a folder, not an image file"
    if not path.is_file():
        return "does not exist"
    bad = unreadable_images([str(path)])  # pixels decoded: a file cut short is found now, not mid-epoch
    return f"cannot be read ({bad[str(path)]})" if bad else None
