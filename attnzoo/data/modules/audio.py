"""`AudioDataModule`: WAV clips from class folders or a CSV, or the embedded synthetic syllables.

Batches are `{"audio": [B, T] float waveforms at `sample_rate`, "label": ...}`: the model computes log-mel
features on its own device (`attnzoo.layers.audio_features.LogMel`), so features never go stale against the
model and run on the GPU when there is one. Labels are class indices [B] (long), or multi-hot [B, C] float
with `multilabel`; with mixup in training they are mixed one-/multi-hot [B, C] float.

Normalization statistics (mean and std of the log-mel features) come from the train split and reach the
model through `model_inputs()` (the model keeps them as buffers, so checkpoints carry them);
`save_artifacts(run_dir)` also writes them, with the feature settings, to `audio_stats.json`.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import logging
import math
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ...layers.audio_features import FEATURE_KINDS, LogMel
from ...util.names import shortened
from ..embedded import synth_audio
from ..formats.audio_io import CROPS, AudioFileError, fit_length, load_clip, probe_wav, read_clip
from ..formats.folders import (
    class_folders,
    refuse_one_class,
    require_train_split,
    say_loose_files,
    split_folders,
    under_hidden,
)
from ..formats.text_files import check_label_forms, read_utf8
from . import defaults
from .base import DataModule, given_class_names, save_class_names
from .batching import EpochShuffle, loader_generator, run_seed

# sound files, read (.wav) or named as not read: one lying outside the class folders is said to be left out
SOUND_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".aiff", ".aif")

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

SOURCES = ("synthetic", "folder", "csv")
BAD_FILE_POLICIES = ("error", "skip")
SPLITS = ("train", "val", "test")
STATS_FILE = "audio_stats.json"


class ClipDataset(Dataset):
    """Clips held in memory (`waves`) or decoded on access (`paths`), padded or cropped to `num_samples`, and
    shifted in time by up to `shift` samples either way (zeros fill in; 0 = no shift)."""

    def __init__(
        self,
        *,
        targets: Sequence[Any],
        num_samples: int,
        sample_rate: int,
        crop: str,
        paths: Sequence[Path] | None = None,
        waves: Sequence[Tensor] | None = None,
        shift: int = 0,
    ) -> None:
        self.targets, self.num_samples, self.sample_rate, self.crop = list(targets), num_samples, sample_rate, crop
        self.paths, self.waves, self.shift = paths, waves, shift

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        wave = self.waves[i] if self.waves is not None else load_clip(self.paths[i], sample_rate=self.sample_rate)
        wave = fit_length(wave, self.num_samples, self.crop)
        if self.shift:
            n = int(torch.randint(-self.shift, self.shift + 1, (1,)))
            wave = torch.roll(wave, n)  # a copy: cached clips stay as they are
            if n > 0:  # what rolled round from the other end becomes silence
                wave[:n] = 0.0
            elif n < 0:
                wave[n:] = 0.0
        return {"audio": wave, "label": self.targets[i]}


class Mixup:
    """Collate that mixes each batch with itself reversed, weight ~ Beta(alpha, alpha); labels become soft.

    Not timm's `Mixup` (which images use): the timm versions attnzoo supports (>= 1.0.9) build mixup targets by
    one-hot encoding class indices, so they cannot mix the multi-hot labels of multi-label audio (only recent timm
    takes `multi_label`).
    """

    def __init__(self, *, alpha: float, num_classes: int, multilabel: bool) -> None:
        self.beta = torch.distributions.Beta(alpha, alpha)
        self.num_classes, self.multilabel = num_classes, multilabel

    def __call__(self, items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        batch = torch.utils.data.default_collate(items)
        label = batch["label"]
        if not self.multilabel:
            label = torch.nn.functional.one_hot(label, self.num_classes)
        label = label.float()  # [B, C]
        lam = float(self.beta.sample())
        batch["audio"] = lam * batch["audio"] + (1 - lam) * batch["audio"].flip(0)
        batch["label"] = lam * label + (1 - lam) * label.flip(0)
        return batch


class AudioDataModule(DataModule):
    """Audio clips for classification: class folders, a CSV, or the embedded synthetic default.

    Args:
        source: "synthetic" (two-vowel syllables made in code, see `synth_audio`), "folder" (`root/<class>/*.wav`,
            the Speech Commands layout; `validation_list.txt` / `testing_list.txt` in `root` are honoured) or
            "csv" (rows of path, label and optionally fold, like ESC-50).
        root: the class folders ("folder"), or the directory CSV paths are relative to ("csv"; default: the
            CSV's own directory).
        csv: the CSV file ("csv").
        columns: CSV column names for `path`, `label` and `fold` (e.g. ESC-50: {path: filename, label: category}).
        label_sep: separator of several labels in one CSV cell (multi-label).
        multilabel: targets are sets of labels (BCE + mAP in the task) instead of one class.
        val_folds / test_folds: CSV folds held out for validation / test.
        val_fraction / test_fraction: held-out fractions when no list or fold says; assignment hashes each file's
            name (a Speech Commands speaker id before "_nohash_"), so it is stable when files are added.
        sample_rate: rate every clip is resampled to. Options set to auto (sample_rate, n_mels, mixup_alpha) are
            chosen from the source (`attnzoo.data.modules.defaults.audio_data`).
        clip_seconds: clips are padded with silence or cropped to this length.
        train_crop: part of a longer training clip to keep: "random", "start" or "center" (eval clips: "center").
        n_mels, win_ms, hop_ms, features: log-mel settings (`LogMel`), handed to the model.
        cache: decode every file once in `setup()` and keep the waveforms in memory; False decodes in the loader
            workers. Either way `setup()` checks every file before training (False: header and size, and float
            samples for NaN and infinity, read without keeping them; integer samples are always finite).
        on_bad_file: "error" stops naming every unreadable file; "skip" leaves them out, logs and counts them
            (`skipped`).
        mixup_alpha: mixup of training batches (0 = off).
        time_shift_ms: training clips are shifted in time by up to this much either way (0 = off).
        stats_clips: at most this many train clips for the normalization statistics.
        stats_file: reuse statistics from an `audio_stats.json` of an earlier run instead of computing them.
        labels: the class names in the model's order (a list, or a run's `labels.json`); default: the data's, sorted.
            `evaluate` passes the run's own, so another folder's or CSV's classes are matched by name (a class the
            run never trained on is an error naming it; one the data lacks is fine).
        synthetic: options of the synthetic set: per_class ({train, val, test} clips per class), vowels, snr_db.
    """

    def __init__(
        self,
        *,
        source: str = "synthetic",
        root: str | None = None,
        csv: str | None = None,
        columns: dict[str, str] | None = None,
        label_sep: str = ";",
        multilabel: bool = False,
        val_folds: Sequence[int] | int | None = None,
        test_folds: Sequence[int] | int | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        sample_rate: int | Literal["auto"] = 16000,
        clip_seconds: float = 1.0,
        train_crop: str = "random",
        n_mels: int | Literal["auto"] = 128,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        features: str = "fbank",
        cache: bool = True,
        on_bad_file: str = "error",
        mixup_alpha: float | Literal["auto"] = 0.0,
        time_shift_ms: float | Literal["auto"] = 0.0,
        stats_clips: int = 2000,
        stats_file: str | None = None,
        labels: str | Sequence[str] | None = None,
        synthetic: dict[str, Any] | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_choice("data.source", source, SOURCES)
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the source (`auto_values`)
        given = {"sample_rate": sample_rate, "n_mels": n_mels, "mixup_alpha": mixup_alpha}
        given["time_shift_ms"] = time_shift_ms
        for name, (value, why) in defaults.audio_data(synthetic=source == "synthetic").items():
            if given[name.split(".")[1]] == "auto":
                given[name.split(".")[1]] = value
                self.chosen[name] = (value, why)
        sample_rate, n_mels, mixup_alpha = given["sample_rate"], given["n_mels"], given["mixup_alpha"]
        if given["time_shift_ms"] < 0:
            raise ValueError(f"data.time_shift_ms ({given['time_shift_ms']}) must be >= 0")
        self.time_shift = int(round(given["time_shift_ms"] * sample_rate / 1000))  # samples
        _check_choice("data.on_bad_file", on_bad_file, BAD_FILE_POLICIES)
        _check_choice("data.train_crop", train_crop, CROPS)
        _check_choice("data.features", features, FEATURE_KINDS)
        if source == "synthetic" and (root is not None or csv is not None):  # a forgotten data.source: no file read
            key, value = ("root", root) if root is not None else ("csv", csv)
            raise ValueError(
                f"data.{key} {str(value)!r} is not read by data.source 'synthetic' (the embedded clips); for your own "
                f"clips add data.source={'folder' if key == 'root' else 'csv'}"
            )
        if source == "folder" and root is None:
            raise ValueError("data.root: source 'folder' needs root, the directory holding one folder per class")
        if source == "csv" and csv is None:
            raise ValueError("data.csv: source 'csv' needs csv, the CSV file of path,label[,fold] rows")
        if source == "folder" and multilabel:
            raise ValueError("data.multilabel: class folders give one label per clip; use source 'csv' for multi-label")
        if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(f"data.val_fraction ({val_fraction}) + test_fraction ({test_fraction}) must be in [0, 1)")
        if clip_seconds <= 0 or sample_rate <= 0:
            raise ValueError(f"data.clip_seconds ({clip_seconds}) and sample_rate ({sample_rate}) must be > 0")
        if mixup_alpha < 0:
            raise ValueError(f"data.mixup_alpha ({mixup_alpha}) must be >= 0")
        columns = {"path": "path", "label": "label", "fold": "fold", **(columns or {})}
        if set(columns) != {"path", "label", "fold"}:
            raise ValueError(f"data.columns: keys must be path, label, fold; got {sorted(columns)}")
        self.source, self.root, self.csv, self.columns = source, root, csv, columns
        self.label_sep, self.multilabel = label_sep, multilabel
        self.val_folds, self.test_folds = _folds(val_folds), _folds(test_folds)
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.sample_rate, self.clip_seconds, self.train_crop = sample_rate, clip_seconds, train_crop
        self.num_samples = int(round(sample_rate * clip_seconds))
        self.logmel = LogMel(sample_rate=sample_rate, n_mels=n_mels, win_ms=win_ms, hop_ms=hop_ms, kind=features)
        if self.logmel.num_frames(self.num_samples) < 1:
            raise ValueError(f"data.clip_seconds ({clip_seconds}) is shorter than one {win_ms} ms analysis window")
        empty = self.logmel.empty_bins()
        if empty * 20 > n_mels:  # more than 5% (the AST paper's 128 bins at 16 kHz leave one)
            fits = next((n for n in range(n_mels - 1, 3, -1) if not self.logmel.empty_bins(n)), 4)  # Kaldi: > 3
            log.warning(
                "data.n_mels %d at %d Hz (data.sample_rate) with %g ms windows: %d mel bins get no frequency of the "
                "spectrum and stay constant; at most %d bins fill (or a higher sample rate, or longer windows: "
                "data.win_ms)", n_mels, sample_rate, win_ms, empty, fits,
            )  # fmt: skip
        self.cache, self.on_bad_file, self.mixup_alpha = cache, on_bad_file, mixup_alpha
        self.stats_clips, self.stats_file = stats_clips, stats_file
        self.labels = None if labels is None else given_class_names(labels)
        self.synthetic = _synthetic_options(synthetic)
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.datasets: dict[str, ClipDataset] = {}
        self.class_names: list[str] = []
        self.skipped: list[tuple[str, str]] = []  # (path, reason) of files left out
        self.stats: dict[str, float] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    # ---- setup -------------------------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.source == "synthetic":
            self._setup_synthetic()
            if self.labels is not None and self.labels != self.class_names:
                raise ValueError(
                    f"data.labels {self.labels} are not the classes of the synthetic data: {self.class_names}"
                )
        else:
            entries = self._folder_entries() if self.source == "folder" else self._csv_entries()
            self._setup_files(entries)
        sizes = {name: len(ds) for name, ds in self.datasets.items()}
        log.info(
            "data: audio %s, %d classes, clips %s, %d skipped", self.source, self.num_classes, sizes, len(self.skipped)
        )
        if not len(self.datasets["train"]) and not self.scoring_only:
            raise ValueError(f"data: the train split of {self.read_from} has no clips")

    @property
    def read_from(self) -> str | None:
        """The file or folder the clips are listed in (named in messages): the CSV, or the class folders."""
        return self.csv if self.source == "csv" else self.root

    @property
    def scoring_only(self) -> bool:
        """Whether nothing is derived from the train split: the classes (`labels`) and the normalization statistics
        (`stats_file`) are a trained run's, as `evaluate` passes them. So a held-out folder whose lists put every
        clip in the test split can be scored; training on it still stops (`train_dataloader`)."""
        return self.labels is not None and self.stats_file is not None

    def _setup_synthetic(self) -> None:
        opts = self.synthetic
        self.class_names = synth_audio.class_names(opts["vowels"])
        for split in SPLITS:
            waves, labels = synth_audio.synthesize(
                split=split,
                per_class=opts["per_class"][split],
                sample_rate=self.sample_rate,
                clip_seconds=self.clip_seconds,
                vowels=opts["vowels"],
                snr_db=tuple(opts["snr_db"]),
                seed=self.seed,
            )
            self.datasets[split] = self._dataset(split, labels.tolist(), waves=list(waves))

    def _setup_files(self, entries: list[tuple[Path, list[str], str]]) -> None:
        """entries: (path, labels, split)."""
        names = sorted({name for _, labels, _ in entries for name in labels})
        if self.source == "folder":
            names = sorted({labels[0] for _, labels, _ in entries} | set(self.class_names))
        trained = {name for _, labels, split in entries if split == "train" for name in labels}
        unseen = [name for name in names if name not in trained]
        if self.labels is not None:  # the run's model's classes: the data's are matched to them by name
            unknown = sorted({name for _, labels, _ in entries for name in labels} - set(self.labels))
            if unknown:
                raise ValueError(
                    f"data: {self.read_from} has class(es) that the run's model was not trained on: "
                    f"{shortened(unknown)} (the model's: {shortened(self.labels)}); a model cannot predict a class it "
                    "never saw in training"
                )
            names, unseen = list(self.labels), []
        if trained and unseen:  # a class no training clip has could never be predicted (.flac-only folders too)
            where = sorted({split for _, labels, split in entries if set(labels) & set(unseen)})
            raise ValueError(
                f"data: class(es) {shortened(unseen)} have no training clip"
                + (
                    f" (only {'/'.join(where)} clips)"
                    if where
                    else " (no .wav file; folders named _* or .* are not classes)"
                )
                + "; a model cannot predict a class it never saw in training: add training clips (.wav), fix the "
                "label, or split otherwise (validation_list.txt and testing_list.txt in a folder, data.val_folds and "
                "data.test_folds for a CSV)"
            )
        self.class_names = names
        index = {name: i for i, name in enumerate(names)}
        per_split: dict[str, tuple[list, list]] = {split: ([], []) for split in SPLITS}
        rates: dict[str, list[int]] = {}  # class -> the native rates of its training clips
        for path, labels, split in entries:
            try:
                if not path.is_file():
                    raise AudioFileError(f"{path}: no such file")
                if self.cache:
                    wave, rate = read_clip(path, sample_rate=self.sample_rate)
                else:
                    wave = None
                    rate = probe_wav(path)
            except AudioFileError as err:  # every file is tried, so one message names them all
                self.skipped.append((str(path), str(err)))
                continue
            if split == "train":
                for label in labels:
                    rates.setdefault(label, []).append(rate)
            per_split[split][0].append((path, wave))
            per_split[split][1].append(self._target([index[name] for name in labels]))
        if self.skipped:
            shown = shortened([reason for _, reason in self.skipped])  # each reason starts with its file
            if self.on_bad_file == "error":
                raise AudioFileError(
                    f"{len(self.skipped)} unreadable audio file(s): {shown}; remove or replace them, or set "
                    "data.on_bad_file=skip to leave them out"
                )
            log.warning("data: skipped %d unreadable audio files (on_bad_file=skip): %s", len(self.skipped), shown)
            trained = {name for target in per_split["train"][1] for name in self._names(target)}
            left = [name for name in names if name not in trained]
            if trained and left and self.labels is None:
                raise ValueError(
                    f"data: class(es) {shortened(left)} have no training clip left: every one was unreadable and "
                    "skipped (data.on_bad_file=skip); a model cannot predict a class it never saw in training: "
                    "replace the files, or remove the class"
                )
        if not per_split["val"][0] and per_split["train"][0] and not self.scoring_only:  # (evaluate trains nothing)
            log.warning(
                "data: the val split has no clip: no validation runs, so early stopping and best.ckpt are off; give "
                "more clips, a validation_list.txt (folders) or data.val_folds (CSV)"
            )
        self._log_rates(rates)
        if self.cache:
            self._log_lengths([wave.shape[-1] for items, _ in per_split.values() for _, wave in items])
        for split, (items, targets) in per_split.items():
            paths = [path for path, _ in items]
            waves = [wave for _, wave in items] if self.cache else None
            self.datasets[split] = self._dataset(split, targets, paths=paths, waves=waves)

    def _log_rates(self, rates: dict[str, list[int]]) -> None:
        """Log the training clips' own sample rates; warn when every one is below `sample_rate` (resampled up, the
        mel bins above half their rate hold nothing) and when the classes were recorded at other rates (a model can
        tell them apart by the recording alone)."""
        every = [r for per_class in rates.values() for r in per_class]
        if not every:
            return
        counts = collections.Counter(every)
        log.info("data: the training clips' own sample rates: %s; resampled to data.sample_rate %d Hz",
                 ", ".join(f"{r} Hz ({n})" for r, n in counts.most_common(4)), self.sample_rate)  # fmt: skip
        top = max(counts)
        if top < self.sample_rate:
            log.warning("data: every training clip was recorded at %d Hz or less, and is resampled up to %d Hz "
                        "(data.sample_rate): the mel bins above %d Hz hold nothing; set data.sample_rate=%d",
                        top, self.sample_rate, top // 2, top)  # fmt: skip
        usual = {name: collections.Counter(r).most_common(1)[0][0] for name, r in rates.items()}
        if len(set(usual.values())) > 1:
            shown = "; ".join(f"{name}: {rate} Hz" for name, rate in sorted(usual.items())[:6])
            log.warning("data: the classes' training clips were mostly recorded at other sample rates (%s): a model "
                        "can tell the classes apart by how they were recorded (the band above half the lower rate is "
                        "empty after resampling), not by what they hold; check that new clips will come at the "
                        "same rates", shown)  # fmt: skip

    def _log_lengths(self, lengths: list[int]) -> None:
        """Log the clips' lengths against `clip_seconds`, and warn when most are cut: a clip longer than it is cropped
        (training: at random, val and test: its centre), so the model never hears the rest."""
        if not lengths:
            return
        seconds = np.asarray(lengths, dtype=np.float64) / self.sample_rate
        median, longest = float(np.median(seconds)), float(seconds.max())
        cropped, padded = float((seconds > self.clip_seconds).mean()), float((seconds < self.clip_seconds).mean())
        log.info("data: clips of %.2f s (median; %.2f s longest); data.clip_seconds %g: %.0f%% of them cropped to it "
                 "(train: %s, val and test: their centre), %.0f%% padded with silence", median, longest,
                 self.clip_seconds, 100 * cropped, self.train_crop, 100 * padded)  # fmt: skip
        if median > 1.5 * self.clip_seconds:
            whole = math.ceil(median * 10) / 10  # rounded up: the median clip fits
            log.warning("data: most clips are longer than data.clip_seconds (%g s; median %.2f s): the model hears "
                        "%g s of each and never the rest; set data.clip_seconds=%g to hear the median clip whole",
                        self.clip_seconds, median, self.clip_seconds, whole)  # fmt: skip

    def _names(self, target: Any) -> list[str]:
        """The class names of a `_target`."""
        indices = target.nonzero().flatten().tolist() if self.multilabel else [target]
        return [self.class_names[i] for i in indices]

    def _target(self, indices: list[int]) -> Any:
        if not self.multilabel:
            return indices[0]
        target = torch.zeros(self.num_classes)
        target[indices] = 1.0
        return target

    def _dataset(self, split: str, targets: list, **items: Any) -> ClipDataset:
        crop, shift = (self.train_crop, self.time_shift) if split == "train" else ("center", 0)
        return ClipDataset(
            targets=targets, num_samples=self.num_samples, sample_rate=self.sample_rate, crop=crop, shift=shift, **items
        )

    def _folder_entries(self) -> list[tuple[Path, list[str], str]]:
        root = Path(self.root)
        if not root.is_dir():
            raise ValueError(f"data.root: {root} is not a directory")
        split_dirs = split_folders(root, SOUND_SUFFIXES)
        say_loose_files(root, split_dirs, SOUND_SUFFIXES, "clip")
        if split_dirs:
            return self._split_folder_entries(root, split_dirs)
        classes = class_folders(root)
        if not classes:
            raise ValueError(f"data.root: {root} has no class folders (expected {root}/<class>/*.wav)")
        if self.labels is None:  # (a run's own classes: evaluate takes clips at any depth of a class folder)
            refuse_one_class(root, classes)  # data.root=clips for clips/audio/<class>/
        self.class_names = classes
        lists = {}
        for split, name in (("val", "validation_list.txt"), ("test", "testing_list.txt")):
            if (root / name).is_file():
                lists[split] = {_list_line(line) for line in read_utf8(root / name).splitlines() if line.strip()}
        log.info("data: %s split by %s", root, ", ".join(lists) + " lists" if lists else "file-name hash")
        entries, listed = [], {}  # listed: relative path -> split, of the clips the lists name
        for name, path in self._class_files(root, classes):
            rel = path.relative_to(root).as_posix()
            split = next((s for s, files in lists.items() if rel in files), None)
            if split is None:
                split = "train" if lists else self._hash_split(path.name)
            else:
                listed[rel] = split
            entries.append((path, [name], split))
        for split, name in (("val", "validation_list.txt"), ("test", "testing_list.txt")):
            unmatched = sorted(line for line in set(lists.get(split, ())) - set(listed) if not _dropped(line, root))
            if unmatched:
                log.warning(
                    "data: %d of %d line(s) of %s name no .wav file of a class folder, so they hold no clip out of "
                    "training: %s; a line is a path relative to %s (dog/0a2b_nohash_0.wav), and a clip no list names "
                    "is trained on",
                    len(unmatched),
                    len(lists[split]),
                    root / name,
                    shortened(unmatched),
                    root,
                )
        tested = sum(split == "test" for _, _, split in entries)
        if self.scoring_only and tested < len(entries):  # evaluate: the class folders' own split rule still holds
            log.warning(
                "data: %s: %d of its %d clips are the test split, and evaluate scores those only (the others fall to "
                "train and val as for training: by %s); to score every clip, give a folder of test/<class>/*.wav",
                root, tested, len(entries), ", ".join(lists) + " lists" if lists else "file-name hash",
            )  # fmt: skip
        return entries

    def _split_folder_entries(self, root: Path, split_dirs: dict[str, Path]) -> list[tuple[Path, list[str], str]]:
        """The clips of split folders (`root`/train/<class>/*.wav, val/, test/; `split_folders`), as for images."""
        if self.labels is None:  # evaluate (the run's classes given) scores a test/ alone
            require_train_split(root, split_dirs, "clips")
        if "train" in split_dirs:
            self.class_names = class_folders(split_dirs["train"])  # an empty one is an error; in val/ or test/ not
            if not self.class_names:
                raise ValueError(f"data.root: {split_dirs['train']} has no class folders (expected <class>/*.wav)")
            if self.labels is None:
                refuse_one_class(split_dirs["train"], self.class_names)
        drawn = "train" in split_dirs and "val" not in split_dirs  # a val split drawn from train/, by hash
        log.info("data: %s split by folders %s%s", root, ", ".join(f"{d.name}/ ({s})" for s, d in split_dirs.items()),
                 "; the val split drawn from train/ by file-name hash" if drawn else "")  # fmt: skip
        entries = []
        for split, folder in split_dirs.items():
            for name, path in self._class_files(folder, class_folders(folder)):
                if drawn and split == "train" and self._hash_split(path.name) == "val":
                    entries.append((path, [name], "val"))
                else:
                    entries.append((path, [name], split))
        return entries

    def _class_files(self, folder: Path, classes: list[str]) -> list[tuple[str, Path]]:
        """(class, path) of the .wav files under `folder`/<class>/, at any depth, in sorted order; the other files
        (not hidden ones) are logged as not read."""
        found, other = [], []
        for name in classes:
            for path in sorted((folder / name).rglob("*")):
                if under_hidden(path, folder) or not path.is_file():
                    continue  # .DS_Store, macOS's ._clip.wav, .ipynb_checkpoints/
                if path.suffix.lower() == ".wav":
                    found.append((name, path))
                else:
                    other.append(str(path))
        if other:
            log.warning(
                "data: %d file(s) in the class folders are not .wav and are not read: %s; convert them to WAV to "
                "train on them",
                len(other),
                shortened(other),
            )
        return found

    def _csv_entries(self) -> list[tuple[Path, list[str], str]]:
        csv_path = Path(self.csv)
        if not csv_path.is_file():
            raise ValueError(f"data.csv: {csv_path} is not a file")
        base = Path(self.root) if self.root is not None else csv_path.parent
        with io.StringIO(read_utf8(csv_path), newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            for key in ("path", "label"):
                if self.columns[key] not in header:
                    raise ValueError(
                        f"{csv_path}: no column {self.columns[key]!r} for data.columns.{key}; columns are {header}"
                    )
            has_fold = self.columns["fold"] in header
            if (self.val_folds or self.test_folds) and not has_fold:
                raise ValueError(f"{csv_path}: data.val_folds/test_folds need a {self.columns['fold']!r} column")
            folds: set[int] = set()  # the folds the rows name
            entries, first, lines = [], {}, []  # first: label -> the line it first occurs on; lines: each entry's
            start = 2  # the line the next row starts on
            for row in reader:
                line = reader.line_num  # the row's last line (a quoted field may span lines)
                begun, start = start, line + 1
                used = [self.columns[k] for k in ("path", "label", "fold") if self.columns[k] in header]
                if None in row or any(row[column] is None for column in used):
                    # DictReader: None for each field a row lacks, the extra fields under the key None
                    fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or ())
                    raise ValueError(
                        f"{csv_path}:{line}: {fields} field(s) where the header has {len(header)} "
                        f"({', '.join(header)}); quote a field that holds a comma"
                    )
                broken = [c for c in used if "\n" in row[c] or "\r" in row[c]]
                if broken:  # a quoted field over several lines: the rows between became one path or label
                    raise ValueError(
                        f"{csv_path}:{begun}: the {broken[0]!r} field runs on to line {line} "
                        f"({row[broken[0]][:60]!r}): a double quote that does not close where the field ends? A "
                        'field holding a double quote is quoted whole, with the quote doubled inside ("")'
                    )
                labels = (
                    [s.strip() for s in row[self.columns["label"]].split(self.label_sep)]
                    if self.multilabel
                    else [row[self.columns["label"]].strip()]
                )
                labels = [s for s in labels if s]
                if not labels or not row[self.columns["path"]]:
                    raise ValueError(f"{csv_path}:{line}: empty path or label in {row}")
                path = base / row[self.columns["path"]]
                split = self._hash_split(path.name)
                if self.val_folds or self.test_folds:
                    fold = _parse_fold(row[self.columns["fold"]], csv_path, line)
                    folds.add(fold)
                    split = "val" if fold in self.val_folds else "test" if fold in self.test_folds else "train"
                entries.append((path, labels, split))
                lines.append(line)
                for label in labels:
                    first.setdefault(label, line)
        for key, given in (("val_folds", self.val_folds), ("test_folds", self.test_folds)):
            # every row in train: no validation, and the check after it said to set the key that was set (evaluate
            # scores a CSV of its own, which may hold the test folds alone)
            if given and not set(given) & folds and not self.scoring_only:
                raise ValueError(
                    f"data.{key} {list(given)} names no fold of {csv_path} (column {self.columns['fold']!r}); its "
                    f"folds: {sorted(folds)}"
                )
        check_label_forms(first, f"{csv_path}: column {self.columns['label']!r}")
        self._check_repeats(csv_path, entries, lines)
        joined = [label for label in first if self.label_sep in label] if not self.multilabel else []
        if joined:
            log.warning(
                "%s: %d label(s) hold data.label_sep %r (%s): each is read as one class of its own; for clips of "
                "several labels, set data.multilabel=true",
                csv_path, len(joined), self.label_sep, ", ".join(repr(j) for j in joined[:3]),
            )  # fmt: skip
        how = f"folds val={self.val_folds} test={self.test_folds}" if self.val_folds or self.test_folds else "hash"
        log.info("data: %s split by %s", csv_path, how)
        return entries

    def _check_repeats(self, csv_path: Path, entries: list[tuple[Path, list[str], str]], lines: list[int]) -> None:
        """A clip the CSV lists twice: with other labels an error (one row per clip, its labels joined for
        multi-label data); in two splits a warning (a test clip trained on inflates test/acc); twice in one split
        a warning (it weighs double)."""
        seen: dict[Path, int] = {}
        other_split, twice = [], []
        for i, (path, labels, split) in enumerate(entries):
            j = seen.setdefault(path.resolve(), i)
            if j == i:
                continue
            (_, labels_before, split_before), line, before = entries[j], lines[i], lines[j]
            if sorted(labels) != sorted(labels_before):
                raise ValueError(
                    f"{csv_path}:{line}: {path} is on line {before} too, labelled {labels_before} there and {labels} "
                    "here: list each clip once"
                    + ("" if self.multilabel else f", with several labels joined by {self.label_sep!r} and "
                       "data.multilabel=true where it has several")
                )  # fmt: skip
            (other_split if split != split_before else twice).append(f"{path.name} (lines {before} and {line}, "
                                                                     f"{split_before} and {split})")  # fmt: skip
        if other_split:
            log.warning(
                "%s: %d clip(s) are listed in two splits, %s: a clip the model trains on and is scored on makes its "
                "score look better than it is; list each clip once",
                csv_path, len(other_split), shortened(other_split, 3),
            )  # fmt: skip
        if twice:
            log.warning("%s: %d clip(s) are listed twice in one split, %s: each copy weighs once more", csv_path,
                        len(twice), shortened(twice, 3))  # fmt: skip

    def _hash_split(self, file_name: str) -> str:
        group = file_name.split("_nohash_")[0]  # Speech Commands: keep a speaker's clips in one split
        u = zlib.crc32(group.encode()) / 2**32
        return "val" if u < self.val_fraction else "test" if u < self.val_fraction + self.test_fraction else "train"

    # ---- statistics and what the model needs ---------------------------------------------------------------------

    def compute_stats(self) -> dict[str, float]:
        """Mean and std of log-mel features over (up to `stats_clips`) train clips, uncropped at random."""
        self.setup()
        if self.stats_file is not None:
            saved = _read_stats(Path(self.stats_file))
            if saved.get("features") != self.logmel.config():
                raise ValueError(
                    f"data.stats_file: {self.stats_file} was computed for features "
                    f"{saved.get('features')}, but this run uses {self.logmel.config()}"
                )
            try:
                self.stats = {"mean": float(saved["mean"]), "std": float(saved["std"]), "clips": int(saved["clips"])}
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"data.stats_file: {self.stats_file} holds no statistics attnzoo wrote (numbers 'mean', 'std' and "
                    f"'clips'; it has {sorted(map(str, saved))[:6]}): remove the key to measure them on the train split"
                ) from None
            origin = saved.get("from")  # a checkpoint's statistics, which its weights were trained on
            how = (
                f"{origin}'s, which its weights were trained on"
                if origin
                else f"measured over {self.stats['clips']} clips"
            )
            log.info("data: log-mel mean %.4f std %.4f from %s (data.stats_file; %s)", self.stats["mean"],
                     self.stats["std"], self.stats_file, how)  # fmt: skip
            return self.stats
        train = self.datasets["train"]
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.seed))[: self.stats_clips]
        total, total_sq, count = 0.0, 0.0, 0
        for start in range(0, len(order), 64):
            waves = torch.stack(
                [fit_length(self._wave(train, int(i)), self.num_samples, "center") for i in order[start : start + 64]]
            )
            feats = self.logmel(waves).double()  # [b, F, N]
            total, total_sq, count = (
                total + feats.sum().item(),
                total_sq + feats.square().sum().item(),
                count + feats.numel(),
            )
        mean = total / count
        std = max(max(total_sq / count - mean**2, 0.0) ** 0.5, 1e-5)  # rounding: a constant feature's variance < 0
        self.stats = {"mean": mean, "std": std, "clips": len(order)}
        log.info("data: log-mel mean %.4f std %.4f over %d train clips", mean, std, len(order))
        return self.stats

    def _wave(self, ds: ClipDataset, i: int) -> Tensor:
        return ds.waves[i] if ds.waves is not None else load_clip(ds.paths[i], sample_rate=self.sample_rate)

    def model_inputs(self) -> dict[str, Any]:
        """What the model builder needs: classes, features, clip length in frames, normalization statistics."""
        self.setup()
        stats = self.stats or self.compute_stats()
        feats = self.logmel.config()
        return {
            "num_classes": self.num_classes,
            **{key: feats[key] for key in ("sample_rate", "n_mels", "win_ms", "hop_ms")},
            "features": feats["kind"],
            "target_frames": self.logmel.num_frames(self.num_samples),
            "feature_mean": stats["mean"],
            "feature_std": stats["std"],
            "multilabel": self.multilabel,
        }

    AUTO_KEYS = defaults.AUDIO_KEYS
    FILES_HINT = (
        "your clips: data.source=folder data.root=DIR (one subfolder of WAV files per class, or train/ val/ test/ of "
        "those), or data.source=csv data.csv=FILE (path,label rows)"
    )

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and values for
        `AUTO_KEYS` (used where the config says auto)."""
        self.setup()
        chosen = defaults.audio_model(
            synthetic=self.source == "synthetic",
            n_mels=self.logmel.n_mels,
            frames=self.logmel.num_frames(self.num_samples),
            num_train=len(self.datasets["train"]),
            batch_size=self.step_batch_size,
        )
        return {**self.chosen, **chosen}

    def normalized_as(self, mean: float, std: float, source: str) -> None:
        """audio_stats.json (what `data.stats_file` and `evaluate` read) records `mean` and `std`, the statistics the
        model normalizes with (a checkpoint's), in place of this data's."""
        self.stats = {**(self.stats or self.compute_stats()), "mean": float(mean), "std": float(std), "from": source}

    def save_artifacts(self, run_dir: str | Path) -> Path:
        """Write the normalization statistics, feature settings, classes and skipped files to `audio_stats.json`,
        and the class names to `labels.json` (what `evaluate` matches other data's classes to); returns the first."""
        stats = self.stats or self.compute_stats()
        out = Path(run_dir) / STATS_FILE
        out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            **stats,
            "features": self.logmel.config(),
            "clip_seconds": self.clip_seconds,
            "class_names": self.class_names,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }
        out.write_text(json.dumps(record, indent=2))
        where = str(Path(self.read_from).resolve()) if self.read_from else self.source
        save_class_names(run_dir, self.class_names, where)  # evaluate reads them
        return out

    def baseline_features(self, split: str) -> tuple[dict[str, Any], np.ndarray] | None:
        """Per clip the mean and std over time of each log-mel bin ([N, 2F], centre-cropped clips), and the
        targets, for a classical baseline (`attnzoo.run.baseline`); None for an empty split."""
        self.setup()
        ds = self.datasets[split]
        if not len(ds):
            return None
        stats = []
        for start in range(0, len(ds), 64):
            chunk = range(start, min(start + 64, len(ds)))
            waves = torch.stack([fit_length(self._wave(ds, i), self.num_samples, "center") for i in chunk])
            feats = self.logmel(waves)  # [b, F, N]
            stats.append(torch.cat([feats.mean(2), feats.std(2)], dim=1))  # [b, 2F]
        targets = torch.stack([torch.as_tensor(t) for t in ds.targets]).numpy()  # [N] or [N, K]
        return {"log-mel mean and std": torch.cat(stats).numpy()}, targets

    # ---- loaders -------------------------------------------------------------------------------------------------

    def _loader(self, split: str, *, train: bool, collate=None) -> DataLoader:
        self.setup()
        data = self.datasets[split]
        return DataLoader(
            data,
            batch_size=self.batch_size,
            sampler=EpochShuffle(data, seed=run_seed(self.seed)) if train else None,
            num_workers=self.num_workers,
            collate_fn=collate,
            drop_last=train and self.full_batches(len(self.datasets[split]), self.batch_size),
            persistent_workers=self.num_workers > 0,
            generator=loader_generator(train, self.num_workers, self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        self.setup()
        if not len(self.datasets["train"]):  # set up with a run's classes and statistics (`scoring_only`)
            raise ValueError(
                f"data: the train split of {self.read_from} has no clips: nothing to train on (set up only to "
                "score, as data.labels and data.stats_file were given)"
            )
        mixup = None
        if self.mixup_alpha > 0:
            mixup = Mixup(alpha=self.mixup_alpha, num_classes=self.num_classes, multilabel=self.multilabel)
        return self._loader("train", train=True, collate=mixup)


def _list_line(line: str) -> str:
    """A validation/testing list line as the relative path it names: Windows' backslashes as slashes, without a
    leading "./" (what `find . -name '*.wav'` writes)."""
    line = line.strip().replace("\\", "/")
    while line.startswith("./"):
        line = line[2:]
    return line


def _dropped(line: str, root: Path) -> bool:
    """Whether a validation/testing list line names a clip of a class folder `root` does not have (Speech
    Commands' lists with a subset of its keywords copied: no mistake), rather than a path written another way."""
    first, _, rest = line.partition("/")
    return bool(rest) and "\\" not in first and first not in (".", "..") and not (root / first).is_dir()


def _check_choice(key: str, value: Any, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ValueError(f"{key}: {value!r} is not one of {list(valid)}")


def _folds(folds: Sequence[int] | int | None) -> set[int]:
    if folds is None:
        return set()
    return {int(folds)} if isinstance(folds, int | str) else {int(f) for f in folds}


def _parse_fold(value: str, csv_path: Path, line: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{csv_path}:{line}: fold {value!r} is not an integer") from None


def _synthetic_options(options: dict[str, Any] | None) -> dict[str, Any]:
    defaults = {"per_class": {"train": 100, "val": 30, "test": 30}, "vowels": "aeiou", "snr_db": [0.0, 30.0]}
    options = dict(options or {})
    unknown = set(options) - set(defaults)
    if unknown:
        raise ValueError(f"data.synthetic: unknown option(s) {sorted(unknown)}; valid: {sorted(defaults)}")
    per_class = {**defaults["per_class"], **dict(options.pop("per_class", {}))}
    if set(per_class) != set(SPLITS):
        raise ValueError(f"data.synthetic.per_class: keys must be {list(SPLITS)}; got {sorted(per_class)}")
    return {**defaults, **options, "per_class": per_class}


def _read_stats(path: Path) -> dict[str, Any]:
    """The JSON object of a log-mel statistics file (`data.stats_file`), or a ValueError naming it."""
    from ...util.files import read_json_object

    try:
        return read_json_object(path)
    except ValueError as err:
        raise ValueError(f"data.stats_file: {path} {err}") from None
