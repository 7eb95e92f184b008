"""`TextDataModule`: text classification from CSV/TSV/JSONL files, or the embedded ListOps task.

Batches: {"tokens": [B, L] long, "padding_mask": [B, L] bool (True = pad), "label": [B] long}, padded to the
longest sequence of the batch, with batches of similar lengths (`bucket`).
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from ...util.checks import at_least
from ...util.files import same_file
from ...util.names import shortened, suggest
from ..embedded import listops
from ..formats.text_files import check_labels, label_vocabulary, read_text_file
from ..tokenizers.factory import make_tokenizer
from ..tokenizers.subword import KINDS as SUBWORD_KINDS
from ..tokenizers.subword import log_unknown, save_run_tokenizer
from ..tokenizers.tokenize import truncate
from . import defaults
from .base import STRATIFIED, DataModule, given_class_names, held_out, save_class_names, stratify_option
from .batching import PadCollate, TokenDataset, sequence_loader

log = logging.getLogger("attnzoo")

LISTOPS_DEFAULTS = {
    "num_train": 20000,
    "num_val": 2000,
    "num_test": 2000,
    "min_len": 4,
    "max_len": 40,
    "max_depth": 3,
    "max_args": 4,
    "seed": 0,
}


def _check_listops_length(longest: int, max_len: int) -> None:
    """ValueError when the embedded ListOps expressions (up to `longest` tokens) do not fit `max_len`."""
    if longest > max_len:
        raise ValueError(
            f"data.max_len ({max_len}) is shorter than the embedded ListOps expressions, data.listops.max_len "
            f"({longest}): they would be cut; raise data.max_len (or lower data.listops.max_len)"
        )


class TextDataModule(DataModule):
    """Text classification data.

    Args:
        train, val, test: CSV, TSV or JSONL files. With no `train`, the embedded ListOps task (`listops`) is used.
            With `train` but no `val`, `val_fraction` of train is held out (a fixed split from `seed`, stratified by
            label: `base.held_out`; `stratify: false` draws it over all examples, as runs made before did).
        text_column, label_column: column (or JSON key) names.
        labels: the class names in order (a list, or a `labels.json` saved with a run); default: the distinct
            labels of the train split, sorted.
        tokenizer: "bytes" (UTF-8 bytes), "listops" (ListOps words), a subword kind learned from the train split
            ("bpe", "wordpiece", "unigram"; saved with a run as `tokenizer.json`), a `tokenizers` JSON file, or
            "auto": chosen from the data (`attnzoo.data.modules.defaults.text_data`: listops for the embedded ListOps, a
            subword vocabulary for files).
        vocab_size: the subword vocabulary size (special tokens included).
        lowercase: lowercase texts before a subword tokenizer learns or applies its vocabulary (auto: for files).
        max_len: longer texts are cut to this many tokens (and how many were cut is logged).
        bucket: batch texts of similar lengths together (pools of `bucket_pool` batches).
        pad_to_multiple: round padded lengths up to a multiple of this (e.g. a sparse backend's block size).
        listops: ListOps options overriding `LISTOPS_DEFAULTS` (sizes, lengths in tokens, depth, arguments, seed).
    """

    def __init__(
        self,
        *,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        text_column: str = "text",
        label_column: str = "label",
        labels: list[str] | str | None = None,
        tokenizer: str = "auto",
        vocab_size: int = 8000,
        lowercase: bool | Literal["auto"] = False,
        max_len: int = 512,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        bucket: bool = True,
        bucket_pool: int = 50,
        pad_to_multiple: int = 1,
        val_fraction: float = 0.1,
        stratify: bool | Literal["auto"] = "auto",
        num_workers: int = 0,
        seed: int = 0,
        listops: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if max_len < 1 or batch_size < 1:
            raise ValueError(f"data.max_len ({max_len}) and data.batch_size ({batch_size}) must be >= 1")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"data.val_fraction ({val_fraction}) must be in (0, 1)")
        if train is None and (val is not None or test is not None):
            raise ValueError(f"data.val ({val}) / data.test ({test}) given without data.train; set data.train too")
        self.files = {"train": train, "val": val, "test": test}
        self.text_column, self.label_column = text_column, label_column
        self.labels = labels
        self.tokenizer_spec = tokenizer
        self.vocab_size, self.lowercase = vocab_size, lowercase
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.max_len = max_len
        self.batch_size = batch_size
        if eval_batch_size is not None and eval_batch_size < 1:
            raise ValueError(f"data.eval_batch_size ({eval_batch_size}) must be >= 1")
        self.eval_batch_size = eval_batch_size if eval_batch_size is not None else batch_size
        self.bucket, self.bucket_pool, self.pad_to_multiple = bucket, bucket_pool, pad_to_multiple
        self.val_fraction, self.num_workers, self.seed = val_fraction, num_workers, seed
        self.stratify, self.stratify_auto = stratify_option(stratify), stratify == "auto"
        self.listops = self._listops_options(listops or {})
        self.datasets: dict[str, TokenDataset] = {}
        self.texts: dict[str, list[str]] = {}  # split -> raw texts (for `baseline_features`)
        self.class_names: list[str] = []

    @staticmethod
    def _listops_options(given: dict[str, Any]) -> dict[str, Any]:
        for key in given:
            if key not in LISTOPS_DEFAULTS:
                valid = list(LISTOPS_DEFAULTS)
                raise ValueError(f"data.listops: unknown option {key!r}; valid: {valid}{suggest(key, valid)}")
        options = {**LISTOPS_DEFAULTS, **given}
        for key, least in (("num_train", 1), ("num_val", 1), ("num_test", 0)):  # no test: a run tests on val
            at_least(f"data.listops.{key}", options[key], least)
        return options

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def model_inputs(self) -> dict[str, Any]:
        self._require_setup()
        return {
            "num_classes": self.num_classes,
            "vocab_size": self.tokenizer.vocab_size,
            "pad_id": self.tokenizer.pad_id,
            "max_len": self.max_len,
        }

    # ------------------------------------------------------------------------------------------------------------
    # building the splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        use_listops = self.files["train"] is None
        for key, (value, why) in defaults.text_data(listops=use_listops, tokenizer=self.tokenizer_spec).items():
            name = key.split(".")[1]
            if getattr(self, "tokenizer_spec" if name == "tokenizer" else name) == "auto":
                self.chosen[key] = (value, why)
        spec = self.chosen.get("data.tokenizer", (self.tokenizer_spec,))[0]
        self.lowercase = self.chosen.get("data.lowercase", (self.lowercase,))[0]
        trained = spec in SUBWORD_KINDS
        self.tokenizer = None if trained else make_tokenizer(spec)
        splits = self._listops_splits() if use_listops else self._file_splits()
        if trained:  # learned from the train split only
            texts = splits["train"][0]
            self.tokenizer = make_tokenizer(spec, texts=texts, vocab_size=self.vocab_size, lowercase=self.lowercase)
        for name, (texts, labels, source) in splits.items():
            ids = [self._encode(text, source) for text in texts]
            log_unknown(self.tokenizer, ids, name)
            cut = sum(len(x) > self.max_len for x in ids)
            if cut:
                log.warning("data: cut %d of %d texts of %s to max_len %d tokens", cut, len(ids), source, self.max_len)
            index = {c: i for i, c in enumerate(self.class_names)}
            tensors = [torch.tensor(truncate(self.tokenizer, x, self.max_len), dtype=torch.int32) for x in ids]
            self.datasets[name] = TokenDataset(tensors, [index[y] for y in labels])
            self.texts[name] = list(texts)
        self._log_summary()

    def _encode(self, text: str, source: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        if not ids:
            raise ValueError(f"{source}: the text {text[:80]!r} has no tokens under tokenizer {self.tokenizer.name!r}")
        return ids

    def _listops_splits(self) -> dict[str, tuple[list[str], list[str], str]]:
        opts = dict(self.listops)
        if getattr(self.tokenizer, "name", None) == "listops":
            _check_listops_length(opts["max_len"], self.max_len)
        sizes = {"train": opts.pop("num_train"), "val": opts.pop("num_val"), "test": opts.pop("num_test")}
        generated = listops.generate_splits(sizes, **opts)
        self.class_names = [str(d) for d in range(10)]
        return {
            name: ([t for t, _ in ex], [str(v) for _, v in ex], f"ListOps {name}") for name, ex in generated.items()
        }

    def _file_splits(self) -> dict[str, tuple[list[str], list[str], str]]:
        cols = {"text_column": self.text_column, "label_column": self.label_column}
        read = {name: read_text_file(path, **cols) for name, path in self.files.items() if path is not None}
        train_texts, train_labels = read["train"]
        self.class_names = self._class_names(train_labels)
        if len(self.class_names) < 2:
            raise ValueError(
                f"{self.files['train']}: every label of column {self.label_column!r} is {self.class_names[0]!r}: "
                "classification needs at least 2 classes in the train split"
            )
        source = f"the train split {self.files['train']}"
        splits = {}
        for name, (texts, labels) in read.items():
            check_labels(labels, self.class_names, path=self.files[name], column=self.label_column, source=source)
            splits[name] = (texts, labels, str(self.files[name]))
        seen = set(train_texts)
        for name in [s for s in ("val", "test") if s in read and not same_file(self.files[s], self.files["train"])]:
            _say_shared(read[name][0], seen, name, self.files["train"])
        if "val" in read and "test" in read and same_file(self.files["val"], self.files["test"]):
            log.warning("data: data.val and data.test are one file, %s: the checkpoint val chose is scored on the "
                        "texts that chose it (test/ is optimistic); give data.test a file of its own for a held-out "
                        "score", self.files["test"])  # fmt: skip
        if "val" not in read:
            if len(train_texts) < 2:
                raise ValueError(f"{self.files['train']}: one example: too few to hold out a val split")
            train, val = held_out(train_labels, self.val_fraction, self.seed, stratify=self.stratify)
            if self.stratify_auto:  # recorded, and logged: a resume holds out the same part
                self.chosen["data.stratify"] = (self.stratify, STRATIFIED)
            log.info("data: no data.val; holding out %d of %d train examples (val_fraction, stratified by label)",
                     len(val), len(train_texts))  # fmt: skip
            pick = lambda idx, xs: [xs[i] for i in idx]
            name = self.files["train"]
            splits["train"] = (pick(train, train_texts), pick(train, train_labels), f"{name} (train part)")
            splits["val"] = (pick(val, train_texts), pick(val, train_labels), f"{name} (held-out val part)")
            _say_shared(splits["val"][0], set(splits["train"][0]), "held-out val", f"{name} (train part)")
            lost = sorted(set(pick(val, train_labels)) - set(pick(train, train_labels)))
            if lost:  # the model has an output for them that training never sees
                log.warning("data: class(es) %s of %s are all in the held-out val part: training sees none of them; "
                            "give data.val a file, or more examples of them", shortened(lost), name)  # fmt: skip
        return splits

    def _class_names(self, train_labels: list[str]) -> list[str]:
        if self.labels is None:
            return label_vocabulary(train_labels)
        names = given_class_names(self.labels)
        check_labels(train_labels, names, path=self.files["train"], column=self.label_column, source="data.labels")
        return names

    def _log_summary(self) -> None:
        val = self.datasets["val"]
        top, count = Counter(val.labels.tolist()).most_common(1)[0]
        sizes = ", ".join(f"{k} {len(v)}" for k, v in self.datasets.items())
        log.info(
            "data: %s; %d classes; majority class %r is %.1f%% of val; tokenizer %s",
            sizes,
            self.num_classes,
            self.class_names[top],
            100 * count / len(val),
            self.tokenizer.name,
        )

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """The embedded ListOps expressions must fit data.max_len (what `_listops_splits` refuses, known from the
        options alone)."""
        if options.get("train") is not None or options.get("tokenizer", "auto") not in ("auto", "listops"):
            return
        given = options.get("listops") or {}
        longest = given.get("max_len", LISTOPS_DEFAULTS["max_len"]) if isinstance(given, Mapping) else None
        max_len = options.get("max_len", inspect.signature(cls).parameters["max_len"].default)
        if isinstance(longest, int) and isinstance(max_len, int):
            _check_listops_length(longest, max_len)

    AUTO_KEYS = defaults.TEXT_KEYS

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and values for
        `AUTO_KEYS` (used where the config says auto)."""
        self._require_setup()
        listops = self.files["train"] is None
        num_train, batch_size = len(self.datasets["train"]), self.step_batch_size
        return {**self.chosen, **defaults.text_model(listops=listops, num_train=num_train, batch_size=batch_size)}

    def baseline_features(self, split: str) -> tuple[dict[str, Any], np.ndarray] | None:
        """The split's raw texts and class indices for a classical baseline (`attnzoo.run.baseline`)."""
        self._require_setup()
        if split not in self.datasets:
            return None
        return {"text": self.texts[split]}, self.datasets[split].labels.numpy()

    def majority_rate(self, split: str = "val") -> float:
        """The accuracy of always predicting the most frequent class of `split`."""
        self._require_setup()
        labels = self.datasets[split].labels
        return torch.bincount(labels).max().item() / len(labels)

    # ------------------------------------------------------------------------------------------------------------
    # loaders and artifacts

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        self._require_setup()
        if split not in self.datasets:
            raise ValueError(f"no {split} split: set data.{split} (a CSV, TSV or JSONL file)")
        return sequence_loader(
            self.datasets[split],
            batch_size=self.batch_size if train else self.eval_batch_size,
            train=train,
            drop_last=train and self.full_batches(len(self.datasets[split]), self.batch_size),
            num_workers=self.num_workers,
            collate_fn=PadCollate(pad_id=self.tokenizer.pad_id, multiple=self.pad_to_multiple),
            seed=self.seed,
            bucket=self.bucket,
            pool=self.bucket_pool,
        )

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """Write the label vocabulary and tokenizer description (`labels.json`) into `run_dir`, and a tokenizer
        learned from the train split, or a copy of the file given (`tokenizer.json`, which
        `data.tokenizer=<run>/tokenizer.json` reloads; `save_run_tokenizer`)."""
        self._require_setup()
        label_column = self.label_column if self.files["train"] else None
        labels = save_class_names(run_dir, self.class_names, self.files["train"] or "listops",
                                  label_column=label_column, tokenizer=self.tokenizer.describe())  # fmt: skip
        return [labels, *save_run_tokenizer(self.tokenizer, Path(run_dir))[0]]


def _say_shared(texts: list[str], seen: set[str], name: str, train: Any) -> None:
    """A warning when `texts` of split `name` also occur in the train split's (`seen`): the score measures memory."""
    shared = sum(text in seen for text in texts)
    if shared:
        log.warning("data: %d of %d %s texts (%.1f%%) also occur in the train split %s, word for word (after "
                    "whitespace is made one space): remove them from one file for a held-out score", shared,
                    len(texts), name, 100 * shared / len(texts), train)  # fmt: skip
