"""`TranslationDataModule`: parallel text for encoder-decoder models.

Data: TSV or JSONL files (`attnzoo.data.formats.parallel_files`), or, with no `train`, the embedded
English/German/French phrases built from CLDR and num2words (`attnzoo.data.embedded.cldr_pairs`): real language, no
download, deterministic from the seed, and no sentence of val or test (on either side) occurs in train.

Batches (B batch, S longest source, T longest target + 1), padded per batch, similar lengths batched together:

    src               [B, S] long   source ids, `pad_id` after the end
    src_padding_mask  [B, S] bool   True = padding
    tgt_in            [B, T] long   bos + target ids (decoder input, teacher forcing)
    tgt_padding_mask  [B, T] bool   True = padding
    labels            [B, T] long   target ids + eos, -100 (`IGNORE_INDEX`) at padding
    src_text, tgt_text  list[str]   the pair as text (references for BLEU/chrF, examples to log)
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, Dataset

from ...util.files import same_file
from ...util.scripts import bleu_tokenize
from ..embedded.cldr_pairs import LANGS, generate_pairs
from ..formats.parallel_files import PairFormat, read_pairs
from ..tokenizers.factory import make_tokenizer
from ..tokenizers.subword import decode_generated, log_unknown
from . import defaults
from .base import DataModule
from .batching import IGNORE_INDEX, sequence_loader

log = logging.getLogger("attnzoo")

Tensor = torch.Tensor
EMBEDDED = {"src_lang": "en", "tgt_lang": "de", "num_train": 15000, "num_val": 500, "num_test": 1000}
ARTIFACT = "translation.json"


class TokenPairDataset(Dataset):
    """Token ids of (source, target) pairs, with their text."""

    def __init__(self, src: Sequence[Tensor], tgt: Sequence[Tensor], texts: Sequence[tuple[str, str]]) -> None:
        if not len(src) == len(tgt) == len(texts):
            raise ValueError(f"{len(src)} sources, {len(tgt)} targets and {len(texts)} texts")
        self.src, self.tgt, self.texts = list(src), list(tgt), list(texts)
        self.lengths = [max(len(s), len(t) + 1) for s, t in zip(self.src, self.tgt, strict=True)]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, str, str]:
        return self.src[i], self.tgt[i], *self.texts[i]


class Seq2SeqCollate:
    """Pads pairs into the batch dict of the module docstring (lengths rounded up to `multiple`)."""

    def __init__(self, *, pad_id: int, bos_id: int, eos_id: int, multiple: int = 1) -> None:
        if multiple < 1:
            raise ValueError(f"pad_to_multiple ({multiple}) must be >= 1")
        self.pad_id, self.bos_id, self.eos_id, self.multiple = pad_id, bos_id, eos_id, multiple

    def _round(self, n: int) -> int:
        return -(-n // self.multiple) * self.multiple

    def __call__(self, items: list[tuple[Tensor, Tensor, str, str]]) -> dict[str, Any]:
        src_len = torch.tensor([len(s) for s, *_ in items])
        tgt_len = torch.tensor([len(t) + 1 for _, t, *_ in items])  # with bos (input) or eos (labels)
        S, T = self._round(int(src_len.max())), self._round(int(tgt_len.max()))
        src = torch.full((len(items), S), self.pad_id, dtype=torch.long)  # [B, S]
        tgt_in = torch.full((len(items), T), self.pad_id, dtype=torch.long)  # [B, T]
        labels = torch.full((len(items), T), IGNORE_INDEX, dtype=torch.long)  # [B, T]
        for row, (s, t, *_) in enumerate(items):
            src[row, : len(s)] = s
            tgt_in[row, 0] = self.bos_id
            tgt_in[row, 1 : len(t) + 1] = t
            labels[row, : len(t)] = t
            labels[row, len(t)] = self.eos_id
        return {
            "src": src,
            "src_padding_mask": torch.arange(S)[None, :] >= src_len[:, None],  # [B, S]
            "tgt_in": tgt_in,
            "tgt_padding_mask": torch.arange(T)[None, :] >= tgt_len[:, None],  # [B, T]
            "labels": labels,
            "src_text": [x[2] for x in items],
            "tgt_text": [x[3] for x in items],
        }


class TranslationDataModule(DataModule):
    """Parallel text for translation, with one tokenizer (a shared vocabulary) for source and target.

    Args:
        train, val, test: TSV or JSONL files of pairs. With no `train`, the embedded CLDR phrases. With `train` but no
            `val` (or `test`), `val_fraction` (`test_fraction`) of the train file's distinct sources are held out,
            every pair of a source in the same split.
        format: "auto" (from the suffix: .tsv/.txt/.tab or .jsonl), "tsv" or "jsonl".
        src_column, tgt_column: TSV column indices of the two sides (Tatoeba pair downloads: 1 and 3).
        src_key, tgt_key: JSONL keys of the two sides.
        on_bad_line: "error" (stop, naming file and line) or "skip" (leave the line out, count it, log it).
        src_lang, tgt_lang: the embedded data's languages, two of en, de, fr (default en -> de); for files, a label.
        num_train, num_val, num_test: the embedded data's split sizes (default 15000, 500, 1000).
        tokenizer: a subword kind learned from the train split's sources and targets ("bpe", "wordpiece",
            "unigram"), "bytes" (UTF-8 bytes), or a `tokenizers` JSON file (e.g. a run's `tokenizer.json`).
        vocab_size, min_frequency: subword vocabulary size (special tokens included) and least pair count to merge.
        split_digits: a learned subword vocabulary splits numbers into single digits ("1995" is 4 tokens), so that
            numbers are copied digit by digit; no effect on "bytes" or a tokenizer file. "auto": for files, not for
            the embedded phrases (`attnzoo.data.modules.defaults.sequence_data`).
        bleu_tokenize: how BLEU (model and translation memory) splits hypotheses and references into words, as
            sacreBLEU's `tokenize`: "13a" (its default), "zh" (Chinese), "char" (every character), "intl", "none".
            "auto": from the train targets' script (`attnzoo.util.scripts.bleu_tokenize`), 13a for spaced ones.
        max_len: the most tokens of a source, and of a target with bos or eos. Longer train pairs are left out, longer
            val/test pairs cut (both counted in the log; `tgt_text` keeps the whole reference).
        bucket, bucket_pool: batch pairs of similar lengths (pools of `bucket_pool` batches).
        pad_to_multiple: round padded lengths up to a multiple of this.
    """

    def __init__(
        self,
        *,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        format: Literal["auto", "tsv", "jsonl"] = "auto",
        src_column: int = 0,
        tgt_column: int = 1,
        src_key: str = "src",
        tgt_key: str = "tgt",
        on_bad_line: Literal["error", "skip"] = "error",
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        num_train: int | None = None,
        num_val: int | None = None,
        num_test: int | None = None,
        tokenizer: str = "bpe",
        vocab_size: int = 4000,
        min_frequency: int = 2,
        split_digits: bool | Literal["auto"] = "auto",
        bleu_tokenize: Literal["auto", "13a", "zh", "char", "intl", "none"] = "auto",
        max_len: int = 128,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        bucket: bool = True,
        bucket_pool: int = 50,
        pad_to_multiple: int = 1,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if max_len < 2 or batch_size < 1:
            raise ValueError(f"data.max_len ({max_len}) must be >= 2 and data.batch_size ({batch_size}) >= 1")
        for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0.0 < frac < 1.0:
                raise ValueError(f"data.{name} ({frac}) must be in (0, 1)")
        if train is None and (val is not None or test is not None):
            raise ValueError(f"data.val ({val}) / data.test ({test}) given without data.train; set data.train too")
        sizes = {"num_train": num_train, "num_val": num_val, "num_test": num_test}
        if train is not None and any(v is not None for v in sizes.values()):
            given = [k for k, v in sizes.items() if v is not None]
            raise ValueError(f"data.{given[0]} sizes the embedded data, but data.train ({train}) is given; remove it")
        self.files = {"train": train, "val": val, "test": test}
        self.pair_format = PairFormat(
            format=format,
            src_column=src_column,
            tgt_column=tgt_column,
            src_key=src_key,
            tgt_key=tgt_key,
            on_bad_line=on_bad_line,
        )
        embedded = train is None
        self.src_lang = src_lang or (EMBEDDED["src_lang"] if embedded else None)
        self.tgt_lang = tgt_lang or (EMBEDDED["tgt_lang"] if embedded else None)
        if embedded and (self.src_lang not in LANGS or self.tgt_lang not in LANGS or self.src_lang == self.tgt_lang):
            raise ValueError(
                f"data.src_lang ({self.src_lang!r}) and data.tgt_lang ({self.tgt_lang!r}) must be two different "
                f"languages of the embedded data: {list(LANGS)}"
            )
        self.sizes = {k.removeprefix("num_"): v if v is not None else EMBEDDED[k] for k, v in sizes.items()}
        self.tokenizer_spec, self.vocab_size, self.min_frequency = tokenizer, vocab_size, min_frequency
        self.split_digits, self.bleu_tokenize = split_digits, bleu_tokenize
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.max_len = max_len
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.bucket, self.bucket_pool, self.pad_to_multiple = bucket, bucket_pool, pad_to_multiple
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.num_workers, self.seed = num_workers, seed
        self.pairs: dict[str, list[tuple[str, str]]] = {}
        self.sources: dict[str, str] = {}
        self.skipped: dict[str, list[tuple[int, str]]] = {}
        self.datasets: dict[str, TokenPairDataset] = {}
        self.tokenizer: Any = None

    # ------------------------------------------------------------------------------------------------------------
    # building the splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        embedded = self.files["train"] is None
        self.pairs = self._embedded_splits() if embedded else self._file_splits()
        if self.split_digits == "auto":
            what = "the embedded CLDR phrases"
            self.chosen.update(defaults.sequence_data(embedded=embedded, what=what, tokenizer=self.tokenizer_spec))
            self.split_digits = self.chosen["data.split_digits"][0]
        if self.bleu_tokenize == "auto":  # the test split's references are of the train targets' language
            self.chosen["data.bleu_tokenize"] = bleu_tokenize([t for _, t in self.pairs["train"]])
            self.bleu_tokenize = self.chosen["data.bleu_tokenize"][0]
        texts = [side for pair in self.pairs["train"] for side in pair]
        self.tokenizer = make_tokenizer(
            self.tokenizer_spec,
            texts=texts,
            vocab_size=self.vocab_size,
            min_frequency=self.min_frequency,
            split_digits=self.split_digits,
            generates="translation (bos starts the decoder input, eos ends the labels)",
        )
        for split, pairs in self.pairs.items():
            self.datasets[split] = self._encode(split, pairs)
        sizes = ", ".join(f"{k} {len(v)}" for k, v in self.datasets.items())
        log.info(
            "data: %s pairs (%s); %s -> %s; tokenizer %s, %d tokens",
            sizes,
            self.sources["train"],
            self.src_lang or "source",
            self.tgt_lang or "target",
            self.tokenizer.name,
            self.tokenizer.vocab_size,
        )

    def _embedded_splits(self) -> dict[str, list[tuple[str, str]]]:
        pairs = generate_pairs(self.sizes, src_lang=self.src_lang, tgt_lang=self.tgt_lang, seed=self.seed)
        self.sources = {split: f"embedded CLDR {self.src_lang}-{self.tgt_lang} {split}" for split in pairs}
        return pairs

    def _file_splits(self) -> dict[str, list[tuple[str, str]]]:
        read = {}
        for split, path in self.files.items():
            if path is not None:
                text = read_pairs(path, self.pair_format)
                read[split], self.skipped[split], self.sources[split] = text.pairs, text.skipped, str(path)
        missing = [s for s in ("test", "val") if s not in read]
        if missing:
            read.update(self._hold_out(read, missing))
        for split in ("val", "test"):
            # a split read from the train file itself (`evaluate` of a run whose train file is elsewhere) is no leak
            if self.files[split] is not None and not same_file(self.files[split], self.files["train"]):
                train_sources = {s for s, _ in read["train"]}
                seen = sum(s in train_sources for s, _ in read[split])
                if seen:
                    log.warning(
                        "data: %d of %d %s pairs have a source that also occurs in train", seen, len(read[split]), split
                    )
        self._say_val_is_not_held_out(read)
        return {split: read[split] for split in ("train", "val", "test")}

    def _say_val_is_not_held_out(self, read: dict[str, list[tuple[str, str]]]) -> None:
        """Warn when val is the test split, or the train file while test is not (val then holds every train pair
        and the pairs held out for test): the best checkpoint would be picked on pairs it trained on or is tested on.
        One file for all three is `evaluate` scoring a run whose train file is elsewhere."""
        val, train, test = self.files["val"], self.files["train"], self.files["test"]
        if val is None:
            return
        val_is_train = train is not None and same_file(val, train)
        if val_is_train and not (test is not None and same_file(test, train)):
            log.warning(
                "data: data.val is the train file: val holds the train pairs and the ones held out for test, so "
                "val/bleu and the best checkpoint are picked on pairs the model trains or is tested on; give data.val "
                "a file of its own"
            )
        elif not val_is_train and read["val"] == read["test"]:
            log.warning(
                "data: the val split is identical to the test split: the best checkpoint would be picked on test "
                "data; give data.val a file of its own"
            )

    def _hold_out(self, read: dict[str, list[tuple[str, str]]], missing: list[str]) -> dict[str, list]:
        """`missing` splits carved out of train by distinct source (a fixed draw from `seed`)."""
        path = self.files["train"]
        by_source: dict[str, list[tuple[str, str]]] = {}
        for src, tgt in read["train"]:
            by_source.setdefault(src, []).append((src, tgt))
        order = list(by_source)
        random.Random(self.seed).shuffle(order)
        out, start = {}, 0
        for split in missing:
            n = max(1, round(getattr(self, f"{split}_fraction") * len(order)))
            out[split] = [pair for src in order[start : start + n] for pair in by_source[src]]
            self.sources[split] = f"{path} (held-out {split} part)"
            start += n
        if start >= len(order):
            raise ValueError(
                f"{path}: too few distinct sources ({len(order)}) to hold out {' and '.join(missing)}: give "
                f"{' and '.join(f'data.{m}=<file>' for m in missing)}, or more pairs"
            )
        out["train"] = [pair for src in order[start:] for pair in by_source[src]]
        self.sources["train"] = f"{path} (train part)"
        held = ", ".join(f"{len(out[s])} {s}" for s in missing)
        log.info(
            "data: no data.%s; held out %s pairs of %s by source (fractions of data)", "/".join(missing), held, path
        )
        return out

    def _encode(self, split: str, pairs: list[tuple[str, str]]) -> TokenPairDataset:
        encode = getattr(self.tokenizer, "encode_batch", None) or (lambda xs: [self.tokenizer.encode(x) for x in xs])
        src_ids = encode([s for s, _ in pairs])
        tgt_ids = encode([t for _, t in pairs])
        keep = []
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
            if not s or not t:
                raise ValueError(f"{self.sources[split]}: the pair {pairs[i]!r} has a side with no tokens")
            keep.append(i)
        too_long = [i for i in keep if len(src_ids[i]) > self.max_len or len(tgt_ids[i]) + 1 > self.max_len]
        if too_long and split == "train":
            log.warning(
                "data: left out %d of %d train pairs longer than max_len %d", len(too_long), len(pairs), self.max_len
            )
            drop = set(too_long)
            keep = [i for i in keep if i not in drop]
            if not keep:
                raise ValueError(f"{self.sources[split]}: every pair is longer than data.max_len ({self.max_len})")
        elif too_long:
            log.warning(
                "data: cut %d of %d %s pairs to max_len %d tokens", len(too_long), len(pairs), split, self.max_len
            )
        log_unknown(self.tokenizer, [src_ids[i] for i in keep] + [tgt_ids[i] for i in keep], split)
        as_tensor = lambda ids, n: torch.tensor(ids[:n], dtype=torch.int32)
        return TokenPairDataset(
            [as_tensor(src_ids[i], self.max_len) for i in keep],
            [as_tensor(tgt_ids[i], self.max_len - 1) for i in keep],
            [pairs[i] for i in keep],
        )

    # ------------------------------------------------------------------------------------------------------------
    # what models and tasks need

    AUTO_KEYS = defaults.SEQUENCE_KEYS

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and values for `AUTO_KEYS`
        (used where the config says auto)."""
        self._require_setup()
        embedded, num_train = self.files["train"] is None, len(self.datasets["train"])
        chosen = defaults.translation_model(embedded=embedded, num_train=num_train, batch_size=self.step_batch_size)
        return {**self.chosen, **chosen}

    def model_inputs(self) -> dict[str, Any]:
        self._require_setup()
        tok = self.tokenizer
        return {
            "vocab_size": tok.vocab_size,
            "pad_id": tok.pad_id,
            "bos_id": tok.bos_id,
            "eos_id": tok.eos_id,
            "max_len": self.max_len,
            "bleu_tokenize": self.bleu_tokenize,
        }

    def baseline_pairs(self, split: str) -> list[tuple[str, str]] | None:
        """The split's (source, target) texts for a translation memory (`attnzoo.run.translation_memory`)."""
        self._require_setup()
        return list(self.datasets[split].texts) if split in self.datasets else None

    def scored(self, text: str) -> str:
        """`text` as the model can write it, to score its translations against: the tokenizer's normalization
        (NFKC: "…" as "...", "²" as "2", no-break spaces as spaces), stripped. Against the raw reference a perfect
        translation of text holding such characters lost BLEU and chrF that a lookup of raw train targets kept."""
        self._require_setup()
        normalizer = getattr(getattr(self.tokenizer, "tok", None), "normalizer", None)
        return (normalizer.normalize_str(text) if normalizer is not None else text).strip()

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Text of generated ids: up to the first eos, bos and padding left out."""
        self._require_setup()
        return decode_generated(self.tokenizer, ids.tolist() if isinstance(ids, Tensor) else ids)

    def encode_source(self, text: str) -> list[int]:
        """Ids of a source sentence as the model reads it (cut to `max_len`)."""
        self._require_setup()
        return self.tokenizer.encode(text)[: self.max_len]

    # ------------------------------------------------------------------------------------------------------------
    # loaders and artifacts

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        self._require_setup()
        ds, tok = self.datasets[split], self.tokenizer
        batch_size = self.batch_size if train else self.eval_batch_size
        return sequence_loader(
            ds,
            batch_size=batch_size,
            train=train,
            drop_last=train and self.full_batches(len(ds), batch_size),
            num_workers=self.num_workers,
            collate_fn=Seq2SeqCollate(
                pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, multiple=self.pad_to_multiple
            ),
            seed=self.seed,
            bucket=self.bucket,
            pool=self.bucket_pool,
        )

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """Write the tokenizer (`tokenizer.json`, for a subword one) and what the data was (`translation.json`)."""
        return self.save_record(
            run_dir,
            ARTIFACT,
            {
                "src_lang": self.src_lang,
                "tgt_lang": self.tgt_lang,
                "sources": self.sources,
                "sizes": {k: len(v) for k, v in self.datasets.items()},
                "max_len": self.max_len,
                "skipped": {k: [{"line": n, "reason": r} for n, r in v] for k, v in self.skipped.items() if v},
            },
        )


__all__ = ["IGNORE_INDEX", "Seq2SeqCollate", "TokenPairDataset", "TranslationDataModule"]
