"""Tokenizers that need no download: UTF-8 bytes (every language), a fixed word list, a subword vocabulary learned
from the train split (`attnzoo.data.tokenizers.subword`), or a user's file.

A tokenizer has `name`, `vocab_size`, `pad_id`, `encode(text) -> list[int]`, `decode(ids) -> str` and
`describe() -> dict` (saved with a run). `attnzoo.data.tokenizers.factory.make_tokenizer` builds one from the
`data.tokenizer` config value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..embedded import listops
from .specials import ALIASES


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    pad_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def describe(self) -> dict[str, Any]: ...


class ByteTokenizer:
    """UTF-8 bytes: id = byte + 1, id 0 is padding (257 ids); with `bos_eos`, ids 257 and 258 begin and end a
    sequence (259 ids), for translation and language models."""

    name = "bytes"
    pad_id = 0
    unk_id = None
    cls_id = None

    def __init__(self, *, bos_eos: bool = False) -> None:
        self.vocab_size = 259 if bos_eos else 257
        self.bos_id = 257 if bos_eos else None
        self.eos_id = 258 if bos_eos else None

    def encode(self, text: str) -> list[int]:
        return [b + 1 for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) - 1 for i in ids if 0 < int(i) < 257).decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        ids = {"bos_id": self.bos_id, "eos_id": self.eos_id} if self.bos_id is not None else {}
        return {"kind": self.name, "vocab_size": self.vocab_size, "pad_id": self.pad_id, **ids}


class WordTokenizer:
    """Whitespace-separated words from a fixed vocabulary (`vocab[0]` is padding); unknown words raise."""

    def __init__(self, *, vocab: Sequence[str], name: str = "words") -> None:
        if len(set(vocab)) != len(vocab):
            raise ValueError(f"{name} vocabulary has repeated words: {list(vocab)}")
        self.name = name
        self.vocab = list(vocab)
        self.ids = {w: i for i, w in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.pad_id = 0

    def encode(self, text: str) -> list[int]:
        try:
            return [self.ids[w] for w in text.split()]
        except KeyError as err:
            raise ValueError(
                f"word {err.args[0]!r} is not in the {self.name} vocabulary {self.vocab[1:]} (text: {text[:80]!r}); "
                "use data.tokenizer=bytes for free text"
            ) from None

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i != self.pad_id)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "vocab": self.vocab, "pad_id": self.pad_id}


class FileTokenizer:
    """A Hugging Face `tokenizers` JSON file the user already has (needs `pip install tokenizers`), or a model
    folder's `vocab.txt` / `vocab.json` (`attnzoo.data.tokenizers.vocab_files`).

    The padding id is the tokenizer's own padding token when it defines one, else the first of `PAD_TOKENS`
    (the padding names `SubwordTokenizer` reads too) in its vocabulary, and its unknown token the first of
    `ALIASES["unk"]` it has (user text that becomes it is named); special tokens ([CLS], [SEP], ...) are added as the
    file's post-processor says, and a text cut to a length keeps those it appends (`tail`, `truncate`).
    """

    PAD_TOKENS = ALIASES["pad"]

    def __init__(self, *, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            valid = list(TOKENIZERS)
            raise ValueError(f"data.tokenizer: no tokenizer file {str(self.path)!r}; valid: {valid} or a file path")
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError as err:
            raise ValueError(
                f"data.tokenizer {str(self.path)!r} needs the `tokenizers` package (pip install tokenizers), "
                "or use data.tokenizer=bytes"
            ) from err
        from .vocab_files import tokenizer_text

        self.text = tokenizer_text(self.path)  # what `save` copies: the file as it was read (a vocab.txt: as JSON)
        try:
            self.tok = HFTokenizer.from_str(self.text)
        except Exception as err:  # the Rust side raises its own exception type
            raise ValueError(f"{self.path}: not a `tokenizers` JSON file: {err}") from err
        padding = self.tok.padding  # the file's padding settings, if any (read before turning padding off)
        self.tok.no_padding()
        self.tok.no_truncation()  # the DataModule truncates, and logs how many texts it cut
        self.name = str(self.path)
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        self.pad_id = self._pad_id(padding)
        self.unk_id = token_id(self.tok, ALIASES["unk"])
        self.tail = appended_tokens(json.loads(self.tok.to_str()).get("post_processor"))  # [SEP], </s>: how many

    def _pad_id(self, padding: dict | None) -> int:
        if padding and padding.get("pad_id") is not None:
            return int(padding["pad_id"])
        found = token_id(self.tok, self.PAD_TOKENS)
        if found is not None:
            return found
        raise ValueError(
            f"{self.path}: the tokenizer has no padding token (none of {list(self.PAD_TOKENS)} and no padding "
            "settings); add one to the file"
        )

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def save(self, path: str | Path) -> Path:
        """Copy the file as it was read to `path` (a run's `tokenizer.json`: the run then loads without the file it
        was given, as its checkpoints' tokenizer digest expects); written whole, also over `self.path` itself."""
        from ...util.files import write_text

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, self.text)
        return path

    def describe(self) -> dict[str, Any]:
        return {"kind": "file", "path": str(self.path), "vocab_size": self.vocab_size, "pad_id": self.pad_id}


def token_id(tok: Any, names: Sequence[str]) -> int | None:
    """The id of the first of `names` that the `tokenizers.Tokenizer` `tok` has, or None."""
    return next((i for name in names if (i := tok.token_to_id(name)) is not None), None)


def appended_tokens(processor: Mapping[str, Any] | None) -> int:
    """How many ids a `tokenizers` post-processor (its JSON) appends after a single text: BERT's and RoBERTa's one
    ([SEP], </s>), a template's special tokens after `$A`, none for the others (GPT-2's byte-level one)."""
    if not processor:
        return 0
    kind = processor.get("type")
    if kind in ("BertProcessing", "RobertaProcessing"):
        return 1
    if kind == "Sequence":
        return sum(appended_tokens(p) for p in processor.get("processors") or [])
    if kind != "TemplateProcessing":
        return 0
    ids = {name: len(entry.get("ids") or [None]) for name, entry in (processor.get("special_tokens") or {}).items()}
    after = 0
    for piece in processor.get("single") or []:
        if "Sequence" in piece:
            after = 0
        elif "SpecialToken" in piece:
            after += ids.get(piece["SpecialToken"].get("id"), 1)
    return after


def truncate(tok: Any, ids: list[int], max_len: int) -> list[int]:
    """`ids` of `tok` cut to `max_len`, keeping the special tokens a file tokenizer's post-processor appended after
    the text (a BERT text's final [SEP], as Hugging Face's own truncation does)."""
    if len(ids) <= max_len:
        return ids
    tail = tok.tail if isinstance(tok, FileTokenizer) and tok.tail < max_len else 0
    return ids[: max_len - tail] + ids[len(ids) - tail :]


TOKENIZERS = {
    "bytes": ByteTokenizer,
    "listops": lambda: WordTokenizer(vocab=listops.VOCAB, name="listops"),
}
