"""`MLMDataModule`: unlabeled text for masked-language-model pretraining of the text encoder.

Data: text files read as the language-model recipe reads them (a .txt file or a folder of them; every non-blank line
a text, or every file one: `attnzoo.data.modules.lm.read_documents`), or the text column of CSV, TSV or JSONL files
read as the text classification recipe reads them (`attnzoo.data.formats.text_files.read_texts`; a label column, if
any, is left unread: a classification train split serves as it is). With no `train`: the embedded Python Language
Reference of `recipes/lm.yaml` (`attnzoo.data.modules.lm.embedded_documents`), one text per paragraph.

Splits: the given files, or texts held out of train (`val_fraction`, `test_fraction` of them, a fixed draw from
`seed`); any paragraph of a val or test text that occurs verbatim in train is removed from it (counted in the
log), as the language-model recipe does (the embedded reference repeats ~40% of its held-out paragraphs elsewhere).
Tokenizer: as text classification chooses it for files (a lowercased unigram vocabulary learned from the train
split, `attnzoo.data.modules.defaults.text_data`), saved with the run as tokenizer.json, so a classifier that starts
from the run (`model.init_from`) reads the same ids. A text longer than `max_len` tokens is cut into pieces
of `max_len` (counted in the log).

Batches (masking: `attnzoo.data.modules.masking`; B batch, L the longest text in the batch):

    tokens        [B, L] long   input ids, 15% of the real tokens picked (80% masked, 10% random, 10% kept)
    labels        [B, L] long   the original token at picked positions, -100 (`IGNORE_INDEX`) elsewhere
    padding_mask  [B, L] bool   True = padding
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader

from ..formats.text_files import FORMATS, one_line, read_texts
from ..tokenizers.factory import make_tokenizer
from ..tokenizers.subword import KINDS as SUBWORD_KINDS
from ..tokenizers.subword import log_unknown
from . import defaults
from .base import DataModule
from .batching import TokenDataset, sequence_loader
from .lm import DOCUMENTS, PARAGRAPH, check_test_only, embedded_documents, read_documents, unseen_held_out
from .masking import MaskingCollate, mask_token_id, special_ids

log = logging.getLogger("attnzoo")

ARTIFACT = "mlm.json"
SPLITS = ("train", "val", "test")


def embedded_texts() -> list[str]:
    """The paragraphs of the embedded Python Language Reference, each on one line (wrapped lines joined)."""
    return [" ".join(p.split()) for doc in embedded_documents() for p in PARAGRAPH.split(doc) if p.strip()]


def read_unlabeled(spec: str | Sequence[str], *, documents: str, text_column: str, what: str) -> list[str]:
    """The texts of `spec`: CSV/TSV/JSONL files (their `text_column`), or .txt files and folders (`documents`)."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    texts: list[str] = []
    for s in specs:
        if Path(s).suffix.lower() in FORMATS:
            texts += [one_line(t) for t in read_texts(s, text_column=text_column)]
        else:
            texts += read_documents(s, documents=documents, what=what)
    return texts


class MLMDataModule(DataModule):
    """Masked-language-model data.

    Args:
        train, val, test: .txt files or folders of them, or CSV/TSV/JSONL files (one path or a list). With no
            `train`, the embedded Python Language Reference. Without `val` (`test`), `val_fraction` (`test_fraction`)
            of the train texts are held out.
        text_column: the column (JSON key) of the texts in CSV/TSV/JSONL files.
        documents: for .txt files, "lines" (each non-blank line is a text) or "files" (each file is one).
        tokenizer, vocab_size, lowercase: as `TextDataModule` ("auto": a lowercased unigram vocabulary learned from
            the train split); or a `tokenizers` JSON file with a mask or [CLS] token.
        max_len: longer texts are cut into pieces of this many tokens.
        mask_rate: the share of tokens picked for prediction (`attnzoo.data.modules.masking`).
        bucket, bucket_pool: batches of texts of similar lengths (pools of `bucket_pool` batches).
        test_only: train and val are the test file, read in their place (`attnzoo evaluate` of a run whose train
            file is not here, or given a test file with other columns): nothing is compared with train, which
            would remove every test paragraph.
    """

    def __init__(
        self,
        *,
        train: str | list[str] | None = None,
        val: str | list[str] | None = None,
        test: str | list[str] | None = None,
        text_column: str = "text",
        documents: Literal["lines", "files"] = "lines",
        tokenizer: str = "auto",
        vocab_size: int = 8000,
        lowercase: bool | Literal["auto"] = "auto",
        max_len: int = 512,
        mask_rate: float = 0.15,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        bucket: bool = True,
        bucket_pool: int = 50,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        num_workers: int = 0,
        seed: int = 0,
        test_only: bool = False,
    ) -> None:
        super().__init__()
        check_test_only(test_only, train, val, test)
        if documents not in DOCUMENTS:
            raise ValueError(f"data.documents: {documents!r} is not one of {list(DOCUMENTS)}")
        if max_len < 2 or batch_size < 1:
            raise ValueError(f"data.max_len ({max_len}) must be >= 2 and data.batch_size ({batch_size}) >= 1")
        if not 0.0 < mask_rate < 1.0:
            raise ValueError(f"data.mask_rate ({mask_rate}) must be in (0, 1)")
        for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0.0 < frac < 1.0:
                raise ValueError(f"data.{name} ({frac}) must be in (0, 1)")
        if train is None and (val is not None or test is not None):
            raise ValueError(f"data.val ({val}) / data.test ({test}) given without data.train; set data.train too")
        self.files = {"train": train, "val": val, "test": test}
        self.test_only = test_only
        self.text_column, self.documents = text_column, documents
        self.tokenizer_spec, self.vocab_size, self.lowercase = tokenizer, vocab_size, lowercase
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.max_len, self.mask_rate = max_len, mask_rate
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.bucket, self.bucket_pool = bucket, bucket_pool
        self.fractions = {"val": val_fraction, "test": test_fraction}
        self.num_workers, self.seed = num_workers, seed
        self.texts: dict[str, list[str]] = {}
        self.sources: dict[str, str] = {}
        self.datasets: dict[str, TokenDataset] = {}
        self.mask_id: int | None = None
        self.mask_token = ""
        self.specials: set[int] = set()
        self.removed: dict[str, int] = {}  # val / test paragraphs left out as seen in train

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.texts = self._splits()
        for key, (value, why) in defaults.text_data(listops=False, tokenizer=self.tokenizer_spec).items():
            name = key.split(".")[1]
            if getattr(self, "tokenizer_spec" if name == "tokenizer" else name) == "auto":
                self.chosen[key] = (value, why)
        spec = self.chosen.get("data.tokenizer", (self.tokenizer_spec,))[0]
        self.lowercase = self.chosen.get("data.lowercase", (self.lowercase,))[0]
        if spec in SUBWORD_KINDS:  # learned from the train split only
            self.tokenizer = make_tokenizer(
                spec, texts=self.texts["train"], vocab_size=self.vocab_size, lowercase=self.lowercase
            )
        else:
            self.tokenizer = make_tokenizer(spec)
        self.mask_id, self.mask_token = mask_token_id(self.tokenizer)
        self.specials = special_ids(self.tokenizer)
        for split, texts in self.texts.items():
            pieces, cut = self._pieces(texts)
            log_unknown(self.tokenizer, [p.tolist() for p in pieces], split)  # unknown tokens: an easy perplexity
            if cut:
                log.info("data: cut %d of %d texts of %s into pieces of max_len %d tokens", cut, len(texts),
                         self.sources[split], self.max_len)  # fmt: skip
            self.datasets[split] = TokenDataset(pieces, list(range(len(pieces))))  # label: the piece's index
        sizes = ", ".join(f"{k} {len(self.texts[k])} texts / {sum(v.lengths)} tokens" for k, v in self.datasets.items())
        log.info("data: %s (%s); tokenizer %s, %d tokens; masked positions read %s (id %d)", sizes,
                 self.sources["train"], self.tokenizer.name, self.tokenizer.vocab_size, self.mask_token,
                 self.mask_id)  # fmt: skip

    def _splits(self) -> dict[str, list[str]]:
        if self.files["train"] is None:
            texts = {"train": embedded_texts()}
            self.sources["train"] = f"Python {sys.version.split()[0]} Language Reference (pydoc_data.topics)"
        else:
            texts = {}
            for split in SPLITS:
                if self.files[split] is not None:
                    texts[split] = read_unlabeled(
                        self.files[split], documents=self.documents, text_column=self.text_column, what=split
                    )
                    self.sources[split] = str(self.files[split])
        missing = [s for s in ("val", "test") if s not in texts]
        if missing:
            train = texts["train"]
            order = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.seed)).tolist()
            sizes = {s: max(1, round(self.fractions[s] * len(train))) for s in missing}
            if sum(sizes.values()) >= len(train):
                raise ValueError(f"{self.sources['train']}: too few texts ({len(train)}) to hold out {missing}")
            start = 0
            for split in missing:
                texts[split] = [train[i] for i in sorted(order[start : start + sizes[split]])]
                self.sources[split] = f"{self.sources['train']} (held-out {split} part)"
                start += sizes[split]
            texts["train"] = [train[i] for i in sorted(order[start:])]
            self.sources["train"] += " (train part)"
            log.info("data: holding out %s of %d train texts", " and ".join(f"{n} ({s})" for s, n in sizes.items()),
                     len(train))  # fmt: skip
        val_is_train = self.files["val"] is not None and self.files["val"] == self.files["train"]
        out, self.removed = unseen_held_out(
            texts, texts["train"], self.sources, val_is_train=val_is_train, one_file=self.test_only
        )
        return out

    def _pieces(self, texts: list[str]) -> tuple[list[torch.Tensor], int]:
        """Each text's ids as pieces of at most `max_len` tokens, and how many texts were cut."""
        pieces, cut = [], 0
        for text in texts:
            ids = self.tokenizer.encode(text)
            cut += len(ids) > self.max_len
            pieces += [
                torch.tensor(ids[i : i + self.max_len], dtype=torch.int32) for i in range(0, len(ids), self.max_len)
            ]
        return pieces, cut

    # ------------------------------------------------------------------------------------------------------------

    AUTO_KEYS = defaults.SEQUENCE_KEYS

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and an epoch budget."""
        self._require_setup()
        num_train = len(self.datasets["train"])
        return {**self.chosen, **defaults.mlm_model(num_train=num_train, batch_size=self.step_batch_size)}

    def model_inputs(self) -> dict[str, Any]:
        self._require_setup()
        return {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.tokenizer.pad_id, "max_len": self.max_len}

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Text of ids, special tokens left out."""
        return self.tokenizer.decode(ids.tolist() if isinstance(ids, torch.Tensor) else list(ids))

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        self._require_setup()
        collate = MaskingCollate(
            pad_id=self.tokenizer.pad_id,
            mask_id=self.mask_id,
            vocab_size=self.tokenizer.vocab_size,
            specials=self.specials,
            rate=self.mask_rate,
            fixed_seed=None if train else self.seed,
        )
        ds = self.datasets[split]
        return sequence_loader(
            ds,
            batch_size=self.batch_size if train else self.eval_batch_size,
            train=train,
            drop_last=train and self.full_batches(len(ds), self.batch_size),
            num_workers=self.num_workers,
            collate_fn=collate,
            seed=self.seed,
            bucket=self.bucket,
            pool=self.bucket_pool,
        )

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """Write the tokenizer (`tokenizer.json`, which a classifier starting from this run reads) and what the data
        was (`mlm.json`)."""
        return self.save_record(
            run_dir,
            ARTIFACT,
            {
                "sources": self.sources,
                "texts": {k: len(v) for k, v in self.texts.items()},
                "paragraphs_removed_as_seen_in_train": self.removed,
                "tokens": {k: sum(v.lengths) for k, v in self.datasets.items()},
                "mask": {"token": self.mask_token, "id": self.mask_id, "rate": self.mask_rate},
                "max_len": self.max_len,
            },
        )
