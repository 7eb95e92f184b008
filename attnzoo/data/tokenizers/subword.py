"""Subword tokenizers (Hugging Face `tokenizers`) trained on a training split, saved with a run as one JSON file.

Every kind shares one pipeline: NFKC normalization (optionally lowercased), words split at spaces with a "▁" marking
each word start (SentencePiece's Metaspace), optionally every digit made a piece of its own (`split_digits`, as
the tokenizers of LLaMA and Gemma do: "84,509" is "8 4 , 5 0 9", never an arbitrary merge such as "84" "50" "9", so
a model copies and translates numbers digit by digit), then subword pieces. Decoding joins the pieces and turns "▁"
back into spaces, so `decode(encode(text))` gives the normalized text back exactly, except for a leading space (the
one "▁" that every text starts with) and characters never seen in training (which become the unknown token). Kinds:

- `bpe`: byte-pair-encoding merges learned from the texts (Sennrich et al.), applied in merge order.
- `wordpiece`: the same learned vocabulary, applied greedily longest-match-first (BERT's WordPiece inference; HF's own
  WordPiece trainer also learns its vocabulary with BPE). Word starts are marked by "▁" instead of "##" on the rest.
- `unigram`: a unigram language model over pieces, pruned by EM (Kudo's SentencePiece unigram), Viterbi at encoding.

Special tokens come first, in the order of `SPECIALS`: [PAD]=0, [UNK]=1, [BOS]=2, [EOS]=3, [CLS]=4. `encode` never
adds them; the DataModules add bos/eos/cls where their task needs them.

Training is deterministic for the same texts in the same order. BPE is so by itself. The unigram trainer sums
floats in parallel and scores the characters it must keep in hash-set order, so its scores are rounded to 1e-6
and those characters share one score (see `_canonical_unigram`). WordPiece reuses BPE's trainer because HF's
WordPiece trainer assigns ids in hash order.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .specials import ALIASES, SPECIALS
from .tokenize import ByteTokenizer, token_id
from .vocab_files import TOKENIZER_FILE, read_tokenizer

log = logging.getLogger("attnzoo")

KINDS = ("bpe", "wordpiece", "unigram")
_ROUND = 6  # decimals kept of unigram log-probabilities
_TAIL_STEP = 1e-4  # the score step between characters the unigram trainer appends at the end


def _hf():
    try:
        import tokenizers
    except ImportError as err:  # a dependency of attnzoo; missing only in a broken install
        raise ImportError("subword tokenizers need the `tokenizers` package (pip install tokenizers)") from err
    return tokenizers


class SubwordTokenizer:
    """A trained or loaded `tokenizers.Tokenizer` with the special-token ids a model needs.

    Build with `SubwordTokenizer.train(texts, ...)` or `SubwordTokenizer.load(path)`.

    Args:
        tokenizer: the `tokenizers.Tokenizer`.
        name: what logs and `describe()` call it (the kind, or the file it came from).
        kind: "bpe", "wordpiece", "unigram" (the model type), or "file" for another model type.
    """

    def __init__(self, *, tokenizer: Any, name: str, kind: str) -> None:
        self.tok = tokenizer
        padding = self.padding = self.tok.padding  # the file's padding settings, if any (`save` writes them back)
        self.tok.no_padding()
        self.tok.no_truncation()  # the DataModules cut or drop long texts, and log how many
        self.name, self.kind = name, kind
        # the rows an embedding table needs: one past the largest id (a file's ids may leave gaps), not their count
        ids_end = max(self.tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        self.vocab_size = max(self.tok.get_vocab_size(with_added_tokens=True), ids_end)
        ids = {role: token_id(self.tok, names) for role, names in ALIASES.items()}
        if ids["pad"] is None and padding and padding.get("pad_id") is not None:  # a padding token of another name
            ids["pad"] = int(padding["pad_id"])
        borrowed = [role for role in ("pad", "bos") if ids[role] is None and ids["eos"] is not None]
        if borrowed:  # GPT-2's convention: one end-of-text token starts, ends and pads (padding is masked by position)
            log.info("%s: no %s token; its end-of-text token %r stands in", name, " or ".join(borrowed),
                     self.tok.id_to_token(ids["eos"]))  # fmt: skip
            ids.update(dict.fromkeys(borrowed, ids["eos"]))
        if ids["pad"] is None:
            raise ValueError(
                f"{name}: the tokenizer has no padding token (none of {list(ALIASES['pad'])}) and no end-of-text "
                f"token to pad with (none of {list(ALIASES['eos'])}); add one"
            )
        self.pad_id: int = ids["pad"]
        self.unk_id: int | None = ids["unk"]
        self.bos_id: int | None = ids["bos"]
        self.eos_id: int | None = ids["eos"]
        self.cls_id: int | None = ids["cls"]

    def require(self, *roles: str, what: str) -> None:
        """Raise unless the tokenizer has a token for each role ("bos", "eos", ...) that `what` needs."""
        missing = [r for r in roles if getattr(self, f"{r}_id") is None]
        if missing:
            names = {r: list(ALIASES[r]) for r in missing}
            raise ValueError(
                f"{self.name}: {what} needs {missing} tokens, which the tokenizer lacks (looked for {names})"
            )

    # ------------------------------------------------------------------------------------------------ building

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        kind: str = "bpe",
        vocab_size: int = 8000,
        min_frequency: int = 2,
        lowercase: bool = False,
        split_digits: bool = False,
    ) -> SubwordTokenizer:
        """Learn a vocabulary of at most `vocab_size` tokens (specials included) from `texts`.

        Args:
            kind: "bpe", "wordpiece" or "unigram".
            min_frequency: BPE/WordPiece merge only pairs seen at least this often.
            lowercase: lowercase before everything else (for classification; translation keeps case).
            split_digits: every digit a token of its own (no merge joins a digit with anything).
        """
        if kind not in KINDS:
            from ...util.names import suggest

            raise ValueError(f"subword tokenizer kind {kind!r} is unknown; valid: {list(KINDS)}{suggest(kind, KINDS)}")
        if vocab_size <= len(SPECIALS):
            raise ValueError(f"data.vocab_size ({vocab_size}) must exceed the {len(SPECIALS)} special tokens")
        if min_frequency < 1:
            raise ValueError(f"data.min_frequency ({min_frequency}) must be >= 1")
        hf = _hf()
        texts = list(texts)
        if not any(t.strip() for t in texts):
            raise ValueError(
                f"data.tokenizer {kind!r} is learned from the training texts, and all {len(texts)} of them are empty: "
                "give texts, or data.tokenizer=bytes (a fixed tokenizer, nothing to learn)"
            )
        specials = list(SPECIALS.values())
        if kind == "unigram":
            model = hf.models.Unigram()
            trainer = hf.trainers.UnigramTrainer(
                vocab_size=vocab_size, special_tokens=specials, unk_token=SPECIALS["unk"], show_progress=False
            )
        else:
            model = hf.models.BPE(unk_token=SPECIALS["unk"])
            trainer = hf.trainers.BpeTrainer(
                vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, show_progress=False
            )
        tok = _pipeline(hf.Tokenizer(model), lowercase=lowercase, split_digits=split_digits)
        tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
        if kind == "wordpiece":
            wordpiece = hf.models.WordPiece(
                vocab=tok.get_vocab(), unk_token=SPECIALS["unk"], continuing_subword_prefix=""
            )
            tok = _pipeline(hf.Tokenizer(wordpiece), lowercase=lowercase, split_digits=split_digits)
            tok.add_special_tokens(specials)
        elif kind == "unigram":
            tok = _canonical_unigram(tok, specials)
        out = cls(tokenizer=tok, name=kind, kind=kind)
        if out.vocab_size < vocab_size:
            log.info(
                "data: the %s tokenizer has %d tokens (asked for %d): its trainer found no more in the texts",
                kind,
                out.vocab_size,
                vocab_size,
            )
        return out

    @classmethod
    def load(cls, path: str | Path) -> SubwordTokenizer:
        """A tokenizer JSON file: one `save` wrote, or any `tokenizers` file with a padding token (or a model folder's
        `vocab.txt` / `vocab.json`, `attnzoo.data.tokenizers.vocab_files`)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no tokenizer file {str(path)!r}")
        tok = read_tokenizer(path)
        kind = json.loads(tok.to_str())["model"].get("type", "").lower()
        return cls(tokenizer=tok, name=str(path), kind=kind if kind in KINDS else "file")

    def save(self, path: str | Path) -> Path:
        """Write the tokenizer as `tokenizers` JSON, with the padding settings of the file it was read from (which may
        be all that names its padding token)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.padding:
            self.tok.enable_padding(**self.padding)
        try:
            self.tok.save(str(path), pretty=True)
        finally:
            self.tok.no_padding()
        return path

    # ------------------------------------------------------------------------------------------------ use

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The pieces of `text`, as strings (for display)."""
        return self.tok.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens (padding, bos, eos, unknown, ...) left out."""
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def id_to_token(self, token_id: int) -> str | None:
        return self.tok.id_to_token(token_id)

    def to_str(self) -> str:
        """The tokenizer as `tokenizers` JSON (two tokenizers with equal strings tokenize identically)."""
        return self.tok.to_str()

    def describe(self) -> dict[str, Any]:
        ids = {f"{role}_id": getattr(self, f"{role}_id") for role in SPECIALS}
        return {"kind": self.kind, "name": self.name, "vocab_size": self.vocab_size, **ids}

    def __repr__(self) -> str:
        return f"SubwordTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, name={self.name!r})"


def _pipeline(tok: Any, *, lowercase: bool, split_digits: bool = False) -> Any:
    hf = _hf()
    norm = [hf.normalizers.NFKC()] + ([hf.normalizers.Lowercase()] if lowercase else [])
    tok.normalizer = hf.normalizers.Sequence(norm)
    tok.pre_tokenizer = hf.pre_tokenizers.Metaspace()
    if split_digits:  # after Metaspace: "▁1995" -> "▁" "1" "9" "9" "5", which decodes back to " 1995"
        tok.pre_tokenizer = hf.pre_tokenizers.Sequence(
            [hf.pre_tokenizers.Metaspace(), hf.pre_tokenizers.Digits(individual_digits=True)]
        )
    tok.decoder = hf.decoders.Metaspace()
    return tok


def _canonical_unigram(tok: Any, specials: list[str]) -> Any:
    """The trained unigram tokenizer without run-to-run noise: scores rounded, ties in sorted order.

    The trainer gives the characters it must keep but learned no score for the lowest score plus 0, 1, 2, ... times
    `_TAIL_STEP`, in hash-set order; here they all get the lowest score (a change of a few thousandths in a
    log-probability).
    """
    hf = _hf()
    record = json.loads(tok.to_str())
    vocab = record["model"]["vocab"]
    head, pieces = vocab[: len(specials)], vocab[len(specials) :]
    low = min(s for _, s in pieces)

    def appended(piece: str, score: float) -> bool:
        steps = (score - low) / _TAIL_STEP
        return len(piece) == 1 and abs(steps - round(steps)) < 1e-5 and round(steps) < len(pieces)

    pieces = [(p, round(low if appended(p, s) else s, _ROUND)) for p, s in pieces]
    pieces.sort(key=lambda x: (-x[1], x[0]))
    model = hf.models.Unigram([tuple(x) for x in head] + pieces, unk_id=record["model"]["unk_id"], byte_fallback=False)
    out = _pipeline(hf.Tokenizer(model), lowercase=_lowercases(record), split_digits=_splits_digits(record))
    out.add_special_tokens(specials)
    return out


def _lowercases(record: dict[str, Any]) -> bool:
    norm = record.get("normalizer") or {}
    return any(n.get("type") == "Lowercase" for n in norm.get("normalizers", []))


def _splits_digits(record: dict[str, Any]) -> bool:
    pre = record.get("pre_tokenizer") or {}
    return any(p.get("type") == "Digits" for p in pre.get("pretokenizers", []))


def tokenizer_digest(tok: Any) -> str:
    """sha256 of what a tokenizer is: its `tokenizers` JSON (a subword or file tokenizer), else its description
    (bytes, a fixed word list). Equal digests tokenize identically; a run's checkpoints record it."""
    inner = getattr(tok, "tok", None)  # the `tokenizers.Tokenizer` of a subword or file tokenizer
    text = inner.to_str() if inner is not None else json.dumps(tok.describe(), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_run_tokenizer(tok: Any, run_dir: Path) -> tuple[list[Path], dict[str, Any]]:
    """Write a sequence tokenizer that has a file (a subword one) as `run_dir/tokenizer.json`, which `run_tokenizer`
    reads back; returns (the paths written, the tokenizer's description for the run's record, with its
    `tokenizer_digest` as `sha256`)."""
    saved = [tok.save(run_dir / TOKENIZER_FILE)] if hasattr(tok, "save") else []
    return saved, tok.describe() | ({"file": TOKENIZER_FILE} if saved else {}) | {"sha256": tokenizer_digest(tok)}


def encode_user_text(tok: Any, text: str, unknown: list[str] | None = None) -> list[int]:
    """Ids of text a user typed (a sentence to translate, a prompt): special-token strings in it ("[EOS]",
    "[PAD]", ...) are encoded as the plain text they are, never as special ids. The pieces of `text` that become
    the unknown token (characters the tokenizer never saw in training) are appended to `unknown` when given."""
    inner = getattr(tok, "tok", None)
    if inner is None:  # bytes: every string is plain text already
        return tok.encode(text)
    unk_id = getattr(tok, "unk_id", None)  # None: a tokenizers file of the user's own may have no unknown token
    inner.encode_special_tokens = True
    try:
        ids = tok.encode(text)
        typed = {i for i, t in inner.get_added_tokens_decoder().items() if t.special} - {unk_id}
        if typed & set(ids):  # a unigram or wordpiece vocabulary holds "[EOS]" as a piece of its model too
            ids = _typed_specials_unknown(inner, text, ids, typed, unk_id, unknown)
        elif unknown is not None and unk_id is not None and unk_id in ids:
            encoding = inner.encode(text, add_special_tokens=False)
            unknown += [text[a:b] for i, (a, b) in zip(encoding.ids, encoding.offsets, strict=True) if i == unk_id]
    finally:
        inner.encode_special_tokens = False
    return ids


def encode_prompt(tok: Any, text: str, unknown: list[str] | None = None) -> list[int]:
    """Ids that start a document with the user's `text` (bos first), to generate its continuation: stripped as
    training strips its documents (a trailing space would be a token the model never saw), read as `encode_user_text`
    reads it."""
    return [tok.bos_id, *encode_user_text(tok, text.strip(), unknown)]


def _typed_specials_unknown(
    inner: Any, text: str, ids: list[int], specials: set[int], unk_id: int | None, unknown: list[str] | None
) -> list[int]:
    """`ids` with each special token that the vocabulary matched in `text` itself (a piece spanning typed
    characters, not one the tokenizer's template placed) made the unknown token, or left out for a tokenizer without
    one: typed text never ends or pads. The pieces not read as typed are appended to `unknown`."""
    for add in (False, True):  # the encoding `ids` came from: without or with the file's template
        encoding = inner.encode(text, add_special_tokens=add)
        if encoding.ids == ids:
            spans = encoding.offsets
            unk = [i == unk_id or i in specials and b > a for i, (a, b) in zip(ids, spans, strict=True)]
            if unknown is not None:
                unknown += [text[a:b] for u, (a, b) in zip(unk, spans, strict=True) if u]
            if unk_id is None:
                return [i for i, u in zip(ids, unk, strict=True) if not u]
            return [unk_id if u else i for i, u in zip(ids, unk, strict=True)]
    return ids


def unknown_note(unknown: Sequence[str], shown: int = 10) -> str:
    """What to tell a user whose text held `unknown` pieces (see `encode_user_text`): the distinct ones, quoted."""
    distinct = list(dict.fromkeys(unknown))
    more = f" and {len(distinct) - shown} more" if len(distinct) > shown else ""
    return (
        f"{', '.join(map(repr, distinct[:shown]))}{more}, which the run's tokenizer cannot encode (it never saw them "
        "in training): the model reads each as its unknown token"
    )


def log_unknown(tok: Any, ids: Sequence[Sequence[int]], what: str) -> None:
    """Log how many of the tokens `ids` of `what` ("train", "val source", ...) are the tokenizer's unknown token:
    a warning from 1% on (a tokenizer that comes with pretrained weights, or a file, never saw much of this text),
    an info line below."""
    unk = getattr(tok, "unk_id", None)
    total = sum(len(x) for x in ids)
    count = sum(list(x).count(unk) for x in ids) if unk is not None else 0
    if count:
        share = count / total
        (log.warning if share >= 0.01 else log.info)(
            "data: %d of %d %s tokens (%.2f%%) are unknown to the tokenizer%s", count, total, what, 100 * share,
            f" ({getattr(tok, 'name', 'its file')}): characters it never saw read as one unknown token"
            if share >= 0.01 else "",
        )  # fmt: skip


def decode_generated(tok: Any, ids: Sequence[int]) -> str:
    """Text of generated ids: up to the first eos, bos and padding left out."""
    ids = list(ids)
    if ids and ids[0] == tok.bos_id:  # a leading bos, also where it is the eos token (GPT-2)
        ids = ids[1:]
    if tok.eos_id in ids:
        ids = ids[: ids.index(tok.eos_id)]
    return tok.decode(ids)


def run_tokenizer(run_dir: str | Path, spec: str) -> Any:
    """The tokenizer a run used: its saved `tokenizer.json`, else the fixed tokenizer `spec` names ("bytes")."""
    saved = Path(run_dir) / TOKENIZER_FILE
    if saved.is_file():
        return SubwordTokenizer.load(saved)
    if spec == "bytes":
        return ByteTokenizer(bos_eos=True)
    raise ValueError(f"{run_dir}: no {TOKENIZER_FILE} (the run's data.tokenizer is {spec!r})")
