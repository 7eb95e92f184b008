"""`LMDataModule`: fixed-length blocks of subword tokens for causal language models.

Data: text files (UTF-8; every non-blank line a document, or every file one), or, with no `train`, the embedded
text: the Python Language Reference as Python's own `help()` shows it (`pydoc_data.topics`, ~80 topics such as
"if", "for", "class", "exceptions", ~460 kB of English). Why this text: it ships with every Python, so it needs
no download and no extra package; it is real, edited technical prose with code examples, the kind of text people
train small models on; and its size suits a CPU run of minutes. It is the text of the running Python, so
perplexities differ a little between Python versions (the run records the version).

Splits: given files, or documents held out of train (`val_fraction`, `test_fraction` of the characters, a fixed
draw from the seed). No leakage: a split holds whole documents, and any paragraph (text between blank lines) of a
val or test document that also occurs verbatim in train is removed from it (counted in the log).

Each document is encoded as bos + ids + eos and the documents of a split are joined into one stream, which is cut
into blocks of `block_size` inputs; the labels are the inputs shifted by one (the last block of a split is padded).

Batches (B batch, L = block_size):

    tokens        [B, L] long   input ids, `pad_id` after the end of the split
    labels        [B, L] long   the next token of each position, -100 (`IGNORE_INDEX`) at padding
    padding_mask  [B, L] bool   True = padding
"""

from __future__ import annotations

import logging
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, Dataset

from ...util.names import shortened
from ..formats.text_files import recode_hint, wide_unicode
from ..tokenizers.factory import make_tokenizer
from ..tokenizers.subword import decode_generated, encode_prompt, log_unknown
from . import defaults
from .base import DataModule
from .batching import IGNORE_INDEX, sequence_loader

log = logging.getLogger("attnzoo")

Tensor = torch.Tensor
DOCUMENTS = ("lines", "files")
ARTIFACT = "lm.json"
PARAGRAPH = re.compile(r"\r?\n[ \t]*\r?\n")


def embedded_documents() -> list[str]:
    """The Python Language Reference topics of the running Python, in sorted topic order."""
    try:
        from pydoc_data.topics import topics
    except ImportError as err:  # some Linux distributions package pydoc_data apart from Python
        raise ValueError(
            "the embedded LM text is Python's pydoc_data.topics, which this Python lacks; give data.train (text files)"
        ) from err
    return [topics[k].strip() for k in sorted(topics) if topics[k].strip()]


def _text_files(spec: str | Sequence[str], what: str) -> list[Path]:
    """The files of `spec`: each file as given, and the .txt files (any letter case; hidden ones and attnzoo's runs
    made inside left out) under each folder, which the log names with the files it leaves out. A CSV/TSV/JSONL file
    is an error: read as text, its header and labels would become text."""
    from ..formats.folders import run_output, under_hidden, within_run_here
    from ..formats.text_files import FORMATS

    specs = [spec] if isinstance(spec, str) else list(spec)
    files: list[Path] = []
    for s in specs:
        path = Path(s)
        if path.is_dir():
            tree = sorted(path.rglob("*"))
            # a run's examples.txt is no training text, nor anything in the run this process trains in
            runs = {d for d in tree if d.is_dir() and (run_output(d) or within_run_here(d))}
            every = [p for p in tree if p.is_file() and not under_hidden(p, path) and not runs.intersection(p.parents)]
            found = [p for p in every if p.suffix.lower() == ".txt"]
            other = [str(p.relative_to(path)) for p in every if p.suffix.lower() != ".txt"]
            if not found:
                held = f" (it holds {shortened(other)}: the text files must end in .txt)" if other else ""
                raise ValueError(f"data.{what}: no .txt files under {str(path)!r}{held}")
            log.info("data.%s: %d .txt file(s) under %s%s", what, len(found), path,
                     f"; not read (not .txt): {shortened(other)}" if other else "")  # fmt: skip
            files += found
        elif path.is_file() and path.suffix.lower() in FORMATS:
            raise ValueError(
                f"data.{what}: {str(path)!r} is a {path.suffix.lower()} file of columns, and this data reads plain "
                "text (.txt files or folders of them; each non-blank line a document): its header and every column "
                "would become text. Write its text column to a .txt file (recipes/mlm.yaml reads a column itself: "
                "data.text_column), or rename the file to .txt to read its lines as they are"
            )
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"data.{what}: no such file or directory {s!r}")
    return files


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    wide = wide_unicode(raw[:4], path.name)  # UTF-16 / UTF-32: every line would be "not UTF-8"
    if wide is not None:
        raise ValueError(f"{path}: {wide}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{path} line {line}: bytes that are not UTF-8 ({err.reason}); {recode_hint(raw, path.name)}"
        ) from None


SENTENCE_ENDS = tuple(".!?:;\"')»”。！？")  # how a line that ends a sentence or a paragraph ends


def read_documents(spec: str | Sequence[str], *, documents: str, what: str = "train") -> list[str]:
    """The documents of the files (or directories of .txt files) in `spec`: lines or whole files."""
    docs, empty = [], []
    for path in _text_files(spec, what):
        text = _decode(path)
        if documents == "files":
            docs += [text.strip()] if text.strip() else []
            empty += [] if text.strip() else [str(path)]
        else:
            docs += [line.strip() for line in text.splitlines() if line.strip()]
    if not docs:
        raise ValueError(f"data.{what}: no text in {spec!r}")
    if empty:
        log.warning("data.%s: %d empty or blank file(s) left out (data.documents=files): %s", what, len(empty),
                    shortened(empty, 5))  # fmt: skip
    if documents == "lines":
        _say_wrapped(docs, what)
    return docs


def _say_wrapped(lines: list[str], what: str) -> None:
    """Warn when the lines read as documents look hard-wrapped (most end mid-sentence, at a common width): each line
    one document splits the text's sentences, and its markers of a document's start and end fill the stream."""
    if len(lines) < 20:
        return
    open_ended = sum(not line.endswith(SENTENCE_ENDS) for line in lines) / len(lines)
    median = sorted(map(len, lines))[len(lines) // 2]
    if open_ended >= 0.6 and median <= 100:
        log.warning(
            "data.%s: %.0f%% of its %d lines end mid-sentence, %d characters long at the median: hard-wrapped text? "
            "Each line is a document (data.documents=lines), so sentences are cut at line ends; "
            "data.documents=files reads each file as one document", what, 100 * open_ended, len(lines), median,
        )  # fmt: skip


def remove_seen_paragraphs(docs: list[str], train: list[str]) -> tuple[list[str], int]:
    """`docs` without the paragraphs that occur verbatim in `train`, and how many were removed."""
    seen = {_paragraph_key(p) for doc in train for p in PARAGRAPH.split(doc)}
    out, removed = [], 0
    for doc in docs:
        paragraphs = PARAGRAPH.split(doc)
        kept = [p for p in paragraphs if _paragraph_key(p) not in seen]
        removed += len(paragraphs) - len(kept)
        if len(kept) == len(paragraphs):
            out.append(doc)  # as read (a CRLF file keeps its line breaks)
        elif kept:
            out.append("\n\n".join(kept))
    return out, removed


def _paragraph_key(paragraph: str) -> str:
    """A paragraph as compared across files: its line breaks written one way (CRLF files and LF files alike)."""
    return paragraph.replace("\r\n", "\n").strip()


def unseen_held_out(
    given: dict[str, list[str]],
    train: list[str],
    sources: dict[str, str],
    *,
    val_is_train: bool,
    one_file: bool = False,
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """({"train": train, "val": ..., "test": ...}, paragraphs removed per split): the val and test texts of `given`
    without the paragraphs that occur verbatim in `train` (logged), so held-out scores are not scores of training text;
    ValueError naming the split's source (`sources`) when nothing is left. A warning when val and test end up the same
    (`val_is_train`: data.val is the train file, and what train lacks is its held-out test part). `one_file`: the three
    splits are the test file (`test_only`): nothing is removed."""
    if one_file:
        log.info("data: %s is read as train and val too (test_only): nothing is compared with train", sources["test"])
        return {"train": train, **given}, {}
    out, counts = {"train": train}, {}
    for split in ("val", "test"):
        docs, removed = remove_seen_paragraphs(given[split], train)
        if removed:
            log.info("data: removed %d paragraphs of %s that occur verbatim in train", removed, split)
        if not docs:
            raise ValueError(f"data.{split}: every paragraph of {sources[split]} occurs in train")
        out[split], counts[split] = docs, removed
    if out["val"] == out["test"]:
        same = " (data.val is the train file)" if val_is_train else ""
        log.warning(
            "data: the val split is identical to the test split%s: the best checkpoint would be picked on test "
            "data; give data.val a file of its own",
            same,
        )
    return out, counts


class BlockDataset(Dataset):
    """Blocks of `block_size` tokens of one stream and their next-token labels; the last block padded."""

    def __init__(self, stream: Tensor, *, block_size: int, pad_id: int) -> None:
        if stream.ndim != 1 or len(stream) < 2:
            raise ValueError(f"a token stream needs at least 2 tokens, got shape {tuple(stream.shape)}")
        self.stream, self.block_size, self.pad_id = stream, block_size, pad_id

    def __len__(self) -> int:
        return -(-(len(self.stream) - 1) // self.block_size)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.block_size
        x = self.stream[start : start + self.block_size].long()
        y = self.stream[start + 1 : start + self.block_size + 1].long()
        n = len(y)  # real positions: those with a next token
        tokens = torch.full((self.block_size,), self.pad_id, dtype=torch.long)  # [L]
        labels = torch.full((self.block_size,), IGNORE_INDEX, dtype=torch.long)  # [L]
        tokens[:n], labels[:n] = x[:n], y
        return {"tokens": tokens, "labels": labels, "padding_mask": torch.arange(self.block_size) >= n}


def check_test_only(test_only: bool, train: Any, val: Any, test: Any) -> None:
    """ValueError unless `test_only` (the LM and MLM data's) comes with train, val and test all the test file."""
    if test_only and not (train == val == test and test is not None):
        raise ValueError(f"data.test_only: train ({train}), val ({val}) and test ({test}) must be the test file")


class LMDataModule(DataModule):
    """Causal language-model data.

    Args:
        train, val, test: text files or directories of .txt files (one path or a list). With no `train`, the
            embedded Python Language Reference. Without `val` (`test`), `val_fraction` (`test_fraction`) of the train
            documents' characters are held out, as whole documents.
        documents: "lines" (each non-blank line is a document) or "files" (each file is one).
        tokenizer: a subword kind learned from the train split ("bpe", "wordpiece", "unigram"), "bytes", or a
            `tokenizers` JSON file (e.g. a run's `tokenizer.json`).
        vocab_size, min_frequency: subword vocabulary size (special tokens included) and least pair count to merge.
        split_digits: a learned subword vocabulary splits numbers into single digits ("1995" is 4 tokens); no
            effect on "bytes" or a tokenizer file. "auto": for files, not for the embedded text
            (`attnzoo.data.modules.defaults.sequence_data`).
        block_size: tokens per training example (the model's context length).
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
        documents: Literal["lines", "files"] = "lines",
        tokenizer: str = "bpe",
        vocab_size: int = 4000,
        min_frequency: int = 2,
        split_digits: bool | Literal["auto"] = "auto",
        block_size: int = 128,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
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
        if block_size < 2 or batch_size < 1:
            raise ValueError(f"data.block_size ({block_size}) must be >= 2 and data.batch_size ({batch_size}) >= 1")
        for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0.0 < frac < 1.0:
                raise ValueError(f"data.{name} ({frac}) must be in (0, 1)")
        if train is None and (val is not None or test is not None):
            raise ValueError(f"data.val ({val}) / data.test ({test}) given without data.train; set data.train too")
        self.files = {"train": train, "val": val, "test": test}
        self.test_only = test_only
        self.documents = documents
        self.tokenizer_spec, self.vocab_size, self.min_frequency = tokenizer, vocab_size, min_frequency
        self.split_digits = split_digits
        self.chosen: dict[str, tuple[Any, str]] = {}  # data.* options chosen from the data (`auto_values`)
        self.block_size = block_size
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.num_workers, self.seed = num_workers, seed
        self.docs: dict[str, list[str]] = {}
        self.sources: dict[str, str] = {}
        self.removed: dict[str, int] = {}
        self.datasets: dict[str, BlockDataset] = {}
        self.tokenizer: Any = None

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.docs = self._splits()
        if self.split_digits == "auto":
            embedded = self.files["train"] is None
            self.chosen = defaults.sequence_data(
                embedded=embedded, what="the embedded Python Language Reference", tokenizer=self.tokenizer_spec
            )
            self.split_digits = self.chosen["data.split_digits"][0]
        self.tokenizer = make_tokenizer(
            self.tokenizer_spec,
            texts=self.docs["train"],
            vocab_size=self.vocab_size,
            min_frequency=self.min_frequency,
            split_digits=self.split_digits,
            generates="a language model (bos starts and eos ends each document)",
        )
        for split, docs in self.docs.items():
            self.datasets[split] = BlockDataset(
                self._stream(docs, split), block_size=self.block_size, pad_id=self.tokenizer.pad_id
            )
        sizes = ", ".join(f"{k} {len(self.docs[k])} docs / {len(v.stream)} tokens" for k, v in self.datasets.items())
        log.info(
            "data: %s (%s); tokenizer %s, %d tokens",
            sizes,
            self.sources["train"],
            self.tokenizer.name,
            self.tokenizer.vocab_size,
        )

    def _splits(self) -> dict[str, list[str]]:
        if self.files["train"] is None:
            train = embedded_documents()
            self.sources["train"] = f"Python {sys.version.split()[0]} Language Reference (pydoc_data.topics)"
        else:
            train = read_documents(self.files["train"], documents=self.documents)
            self.sources["train"] = str(self.files["train"])
        given = {}
        for split in ("val", "test"):
            if self.files[split] is not None:
                given[split] = read_documents(self.files[split], documents=self.documents, what=split)
                self.sources[split] = str(self.files[split])
        missing = [s for s in ("test", "val") if s not in given]
        if missing:
            held, train = self._hold_out(train, missing)
            given.update(held)
        out, self.removed = unseen_held_out(
            given, train, self.sources, val_is_train=self.files["val"] == self.files["train"], one_file=self.test_only
        )
        return out

    def _hold_out(self, docs: list[str], missing: list[str]) -> tuple[dict[str, list[str]], list[str]]:
        """`missing` splits of whole documents, each about its fraction of the characters (a draw from `seed`)."""
        order = list(range(len(docs)))
        random.Random(self.seed).shuffle(order)
        total = sum(len(d) for d in docs)
        held, left = {}, order
        for split in missing:
            want = getattr(self, f"{split}_fraction") * total
            taken = _near_share(left, [len(d) for d in docs], want)
            held[split] = [docs[i] for i in sorted(taken)]
            self.sources[split] = f"{self.sources['train']} (held-out {split} part)"
            chosen = set(taken)
            left = [i for i in left if i not in chosen]
        if not left:
            unit = "each non-blank line is one" if self.documents == "lines" else "each file is one"
            raise ValueError(
                f"{self.sources['train']}: too few documents ({len(docs)}) to hold out {' and '.join(missing)}: give "
                f"{' and '.join(f'data.{m}=<file>' for m in missing)}, or more documents (data.documents="
                f"{self.documents!r}: {unit})"
            )
        train = [docs[i] for i in sorted(left)]
        self.sources["train"] += " (train part)"
        return held, train

    def _stream(self, docs: list[str], split: str) -> Tensor:
        tok = self.tokenizer
        encode = getattr(tok, "encode_batch", None) or (lambda xs: [tok.encode(x) for x in xs])
        encoded = encode(docs)
        log_unknown(tok, encoded, split)  # unknown tokens are easy to predict: a perplexity too good to be true
        ids = [[tok.bos_id, *x, tok.eos_id] for x in encoded]
        return torch.tensor([i for doc in ids for i in doc], dtype=torch.int32)

    # ------------------------------------------------------------------------------------------------------------

    AUTO_KEYS = defaults.SEQUENCE_KEYS

    def auto_values(self) -> dict[str, tuple[Any, str]]:
        """{dotted config key: (value, why)}: the `data.*` options set to auto as chosen, and values for `AUTO_KEYS`
        (used where the config says auto)."""
        self._require_setup()
        embedded, blocks = self.files["train"] is None, len(self.datasets["train"])
        return {
            **self.chosen,
            **defaults.lm_model(embedded=embedded, num_blocks=blocks, batch_size=self.step_batch_size),
        }

    def model_inputs(self) -> dict[str, Any]:
        self._require_setup()
        tok = self.tokenizer
        return {
            "vocab_size": tok.vocab_size,
            "pad_id": tok.pad_id,
            "bos_id": tok.bos_id,
            "eos_id": tok.eos_id,
            "max_len": self.block_size,
        }

    def encode_prompt(self, text: str, unknown: list[str] | None = None) -> list[int]:
        """Ids that start a document with `text` (bos first), to generate its continuation (`subword.encode_prompt`);
        pieces the tokenizer cannot encode go to `unknown`."""
        self._require_setup()
        return encode_prompt(self.tokenizer, text, unknown)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Text of generated ids: up to the first eos, bos and padding left out."""
        self._require_setup()
        return decode_generated(self.tokenizer, ids.tolist() if isinstance(ids, Tensor) else ids)

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        self._require_setup()
        ds = self.datasets[split]
        batch_size = self.batch_size if train else self.eval_batch_size
        drop_last = train and self.full_batches(len(ds), batch_size)
        return sequence_loader(
            ds, batch_size=batch_size, train=train, drop_last=drop_last, num_workers=self.num_workers, seed=self.seed
        )

    def save_artifacts(self, run_dir: str | Path) -> list[Path]:
        """Write the tokenizer (`tokenizer.json`, for a subword one) and what the data was (`lm.json`)."""
        return self.save_record(
            run_dir,
            ARTIFACT,
            {
                "sources": self.sources,
                "documents": {k: len(v) for k, v in self.docs.items()},
                "tokens": {k: len(v.stream) for k, v in self.datasets.items()},
                "paragraphs_removed_as_seen_in_train": self.removed,
                "block_size": self.block_size,
            },
        )


def _near_share(order: list[int], sizes: list[int], want: float) -> list[int]:
    """Documents of `order` (a shuffled draw) whose sizes add up to about `want`: taken in turn, passing over one
    that would carry the sum past 1.5 `want` (two long lines of a corpus made half of it val); in turn regardless
    when those left are all that long. At least one."""
    taken, total = [], 0
    for i in order:
        if total >= want:
            break
        if total + sizes[i] <= 1.5 * want:
            taken.append(i)
            total += sizes[i]
    if not taken or total < 0.5 * want:  # the documents are long against the share: whole ones, in turn
        taken, total = [], 0
        for i in order:
            if taken and total >= want:
                break
            taken.append(i)
            total += sizes[i]
    return taken
