"""What every attnzoo DataModule gives the run that builds it (`attnzoo.run.build`).

A DataModule is a LightningDataModule (dataloaders of dict batches) that, once `setup()` has run, also gives:

- `model_inputs()`: what the model and task builders need to know about the data, {argument name: value}
  (e.g. {"num_classes": 10, "in_chans": 1, "img_size": 28}); the run passes each to the builders that take it.
- `AUTO_KEYS` and `auto_values()`: the values the data proposes where the config says `auto`. `auto_values()`
  gives {dotted key: (value, why)} for the `data.*` options it resolved itself and for each key of `AUTO_KEYS`
  (the keys of other sections it may choose, e.g. `model.patch_size`, `trainer.max_epochs`). It proposes, and
  never writes: the run applies a proposal where the config says `auto` and logs it ("key: auto -> value (why)").
  The choices themselves live in `attnzoo.data.defaults`, one function per modality.
- `tokenizer`: for text data, the tokenizer the model's ids come from (None otherwise).
- `class_names`: for classification data, the class names in label order (None otherwise); a run started from
  another run's weights keeps that run's head only when they are the same (`attnzoo.run.start`).
- `save_artifacts(run_dir)`: what the data derived and a run must keep to be loaded again (a label vocabulary,
  a learned tokenizer, normalization statistics); the files written.
- `baseline_features(split)`: the split's inputs and labels for the classical baseline (`attnzoo.run.baseline`),
  or None for a split the data does not have; or, for data whose targets are text (translation),
  `baseline_pairs(split)`: its (source, target) pairs for the translation-memory baseline
  (`attnzoo.run.translation_memory`), scored with BLEU of `bleu_tokenize` words on texts as `scored(text)` gives
  them (the tokenizer's normalization). `baseline_kind()` says which one a DataModule gives.

The defaults below are for data that proposes nothing, saves nothing and has no baseline.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from torch.utils.data import DataLoader

Proposals = dict[str, tuple[Any, str]]  # dotted config key -> (value, why)


class DataModule(L.LightningDataModule):
    """The base of every attnzoo DataModule; see the module docstring for the contract."""

    AUTO_KEYS: ClassVar[tuple[str, ...]] = ()  # keys outside `data.*` that `auto_values()` may propose
    FILES_HINT: ClassVar[str | None] = None  # how the data kind reads files, for a config that tries data.train=...
    tokenizer: Any = None  # after setup: the tokenizer of text data (a run saves it and checkpoints its digest)
    class_names: list[str] | None = None  # after setup: classification data's class names, in label order
    bleu_tokenize: str = "13a"  # data with `baseline_pairs`: how BLEU finds the words of its targets (sacreBLEU)
    processes: int = 1  # training processes sharing each optimizer step (`attnzoo.run.build` sets it from the trainer)
    # {AUTO_KEYS key: value} the config (or a checkpoint) sets instead of auto (`attnzoo.run.build` sets it): a
    # proposal that depends on such a key follows the value given (a ViT's stem follows the patch size set)
    given: ClassVar[dict[str, Any]] = {}

    @property
    def step_batch_size(self) -> int:
        """Training examples one optimizer step reads over every process: the `auto` epoch budgets count steps of
        this size, so two processes of batch b train as many steps as one of batch 2b."""
        return self.batch_size * self.processes

    def model_inputs(self) -> dict[str, Any]:
        """{builder argument: value} that the model and task builders take from this data."""
        raise NotImplementedError(f"{type(self).__name__} must say what the model needs (model_inputs)")

    def auto_values(self) -> Proposals:
        """{dotted key: (value, why)}: `data.*` options resolved from the data, and a value for each `AUTO_KEYS`."""
        return {}

    def full_batches(self, size: int, batch_size: int) -> bool:
        """Whether a training loader of `size` examples drops its last partial batch: only when every process still
        gets a full one, so a smaller split trains on its partial batch (under DDP each of the trainer's processes
        reads its 1/world_size of the split: 48 examples in batches of 32 on 2 processes are 24 each)."""
        world = getattr(self.trainer, "world_size", 1) if self.trainer is not None else 1
        return -(-size // max(1, world)) > batch_size

    def patience_for(self, epochs: int) -> tuple[int, str] | None:
        """(value, why) of `run.early_stopping.patience` for a `trainer.max_epochs` the config sets, for data that
        proposes the patience from its own epoch budget; None: its proposal stands (the default)."""
        return None

    def normalized_as(self, mean: float, std: float, source: str) -> None:
        """The feature statistics the model normalizes with, where they are not this data's (a checkpoint's, named by
        `source`): what the data records (`save_artifacts`) should say so. Data without such statistics has nothing
        to record."""

    def check_given_size(self) -> None:
        """After setup, for a new run whose config set the input size (`data.img_size`): warn where it is far from
        the data's own. Data without a size to set has nothing to say."""

    def save_artifacts(self, run_dir: str | Path) -> Path | list[Path]:
        """Write what a run must keep to be loaded again into `run_dir`; the files written."""
        return []

    def save_record(self, run_dir: str | Path, name: str, record: dict[str, Any]) -> list[Path]:
        """Write the data's tokenizer (a subword one as `tokenizer.json`: `save_run_tokenizer`) and `record`, what the
        data was, with the tokenizer's description under "tokenizer", as `run_dir/name`; the files written."""
        from ...util.files import write_text
        from ..tokenizers.subword import save_run_tokenizer

        self._require_setup()
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        saved, tokenizer = save_run_tokenizer(self.tokenizer, run_dir)
        write_text(run_dir / name, json.dumps(record | {"tokenizer": tokenizer}, indent=2, ensure_ascii=False) + "\n")
        return [*saved, run_dir / name]

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        """The dataloader of `split` ("train", "val" or "test"); `train`: the training one (shuffled each epoch,
        its last partial batch dropped where every process still gets a full one)."""
        raise NotImplementedError(f"{type(self).__name__} must make its dataloaders (_loader)")

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def _require_setup(self) -> None:
        """RuntimeError unless `setup()` has made the splits (`self.datasets`)."""
        if not getattr(self, "datasets", None):
            raise RuntimeError(f"call {type(self).__name__}.setup() first")

    @classmethod
    def baseline_kind(cls) -> str | None:
        """ "features" (it overrides `baseline_features`), "pairs" (`baseline_pairs`), or None: no baseline."""
        if cls.baseline_features is not DataModule.baseline_features:
            return "features"
        if cls.baseline_pairs is not DataModule.baseline_pairs:
            return "pairs"
        return None

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Raise ValueError (its message starting with the key) for `data:` options that contradict each other
        whatever the files hold; config validation calls it, so an ablation's variants are checked before any runs."""

    @classmethod
    def image_side(cls, options: Mapping[str, Any]) -> int | None:
        """The side of the square images the model will be given, where the options alone say it (else None)."""
        return None

    @classmethod
    def has_baseline(cls) -> bool:
        """Whether this data has a classical baseline (`baseline_kind()` is not None)."""
        return cls.baseline_kind() is not None

    def baseline_features(self, split: str) -> tuple[dict[str, Any], Any] | None:
        """(parts, labels) of `split` for the classical baseline (`attnzoo.run.baseline`); None: no such split."""
        raise ValueError(
            f"{type(self).__name__} has no classical baseline (run.baseline is for classification data); "
            "set run.baseline=false"
        )

    def baseline_pairs(self, split: str) -> list[tuple[str, str]] | None:
        """(source, target) pairs of `split` for the translation-memory baseline; None: no such split."""
        raise ValueError(f"{type(self).__name__} has no translation-memory baseline; set run.baseline=false")

    def scored(self, text: str) -> str:
        """A target text as translations are scored against it (a tokenizer's normalization); here, stripped."""
        return text.strip()


def save_class_names(run_dir: str | Path, class_names: Sequence[str], source: str, **extra: Any) -> Path:
    """Write `run_dir/labels.json`: the class names in the model's order (what `given_class_names` reads back when
    `evaluate` passes it), where they come from, and `extra`; returns its path."""
    from ...util.files import write_json

    path = Path(run_dir) / "labels.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"class_names": list(class_names), "source": source, **extra})
    return path


def given_class_names(labels: str | Sequence[Any], key: str = "data.labels") -> list[str]:
    """The class names of `key`: a list, or a run's `labels.json` (its "class_names"); ValueError naming the key
    when the file is missing or not such a record, or a name repeats."""
    names: Any = labels
    if isinstance(labels, str):
        path = Path(labels)
        if not path.is_file():
            raise ValueError(f"{key}: no such file {labels!r} (give a list of class names or a labels.json)")
        from ...util.files import read_json_object

        try:  # read_json_object: a file nested too deep is a ValueError too, not a RecursionError
            names = read_json_object(path)["class_names"]
        except (ValueError, KeyError):
            raise ValueError(f"{key}: {labels!r} is not a labels.json of class names") from None
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"{key}: expected a list of class names, got {names!r}")
    names = [str(n) for n in names]
    if len(set(names)) != len(names):
        raise ValueError(f"{key} has repeated class names: {names}")
    return names


def held_out(
    labels: Sequence[int | str], fraction: float, seed: int, *, stratify: bool = True
) -> tuple[list[int], list[int]]:
    """(train, val) indices of a train split that holds out max(1, round(fraction * N)) examples for validation,
    stratified: each class gives its share (rounded, the remainders going to the classes with the largest), never
    its last example, so a class of 20 keeps its share in val and a class of one stays in train (a draw over all
    examples left a class out of val or out of train by chance). Which examples of a class: a permutation of
    `seed`. Fewer than `fraction` asks are held out only when too few classes have two examples or more. Without
    `stratify`: the first examples of that permutation, as runs made before (`data.stratify: false`) held them out."""
    n = len(labels)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = min(max(1, round(fraction * n)), n - 1)
    if not stratify:
        return order[n_val:], order[:n_val]
    counts = Counter(labels)
    share = {c: n_val * k / n for c, k in counts.items()}
    quota = {c: min(int(s), counts[c] - 1) for c, s in share.items()}
    by_remainder = sorted(counts, key=lambda c: (-(share[c] - int(share[c])), -counts[c], str(c)))
    while sum(quota.values()) < n_val:  # the rest, one each, largest remainder first; again while some is left
        room = [c for c in by_remainder if quota[c] < counts[c] - 1]
        if not room:
            break
        for c in room[: n_val - sum(quota.values())]:
            quota[c] += 1
    if sum(quota.values()) == 0:  # every class a single example: val takes examples training then lacks
        return order[n_val:], order[:n_val]
    val, taken = [], Counter()
    for i in order:
        if taken[labels[i]] < quota[labels[i]]:
            val.append(i)
            taken[labels[i]] += 1
    chosen = set(val)
    return [i for i in order if i not in chosen], val


def stratify_option(value: bool | str) -> bool:
    """`data.stratify` as a bool (auto: True); ValueError for another value."""
    if value not in (True, False, "auto"):
        raise ValueError(f"data.stratify {value!r} is not one of [true, false, 'auto']")
    return value is not False


STRATIFIED = "each class its share of the val part held out of train (runs made before drew it over all examples)"
