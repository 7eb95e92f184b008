"""Hugging Face model folders whose tokenizer is saved without a `tokenizer.json`: a WordPiece `vocab.txt` (BERT and
its kin) or a byte-level BPE `vocab.json` + `merges.txt` (RoBERTa, BART, GPT-2), as older `transformers` versions and
many shared checkpoints save it. Read into a `tokenizers.Tokenizer` built as `transformers` builds its tokenizer from
the same files, with the settings of the folder's `tokenizer_config.json` and `special_tokens_map.json`
(`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`, `add_prefix_space`, the special tokens' names). Reading
runs no code: the files are text and JSON.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("attnzoo")

TOKENIZER_FILE = "tokenizer.json"  # a run's, and a Hugging Face folder's, `tokenizers` JSON
WORDPIECE = "vocab.txt"
BPE_VOCAB, BPE_MERGES = "vocab.json", "merges.txt"
# tokenizer_config.json's tokenizer_class (or config.json's model_type) -> how a vocab.json + merges.txt wraps a text
BPE_WRAPS = {"roberta": "roberta", "bart": "roberta", "gpt2": "none"}
BPE_CLASSES = {"RobertaTokenizer": "roberta", "BartTokenizer": "roberta", "GPT2Tokenizer": "none"}
# tokenizer_config.json keys that only the `transformers` tokenizer class uses (no token is split otherwise)
SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "bos_token", "eos_token")


def is_vocab_file(path: str | Path) -> bool:
    """A `vocab.txt`, or a `vocab.json` with `merges.txt` beside it: a tokenizer `read_tokenizer` builds."""
    path = Path(path)
    return path.name == WORDPIECE or (path.name == BPE_VOCAB and (path.parent / BPE_MERGES).is_file())


def folder_tokenizer(folder: str | Path) -> Path | None:
    """The tokenizer file of a Hugging Face model folder: `tokenizer.json`, else `vocab.txt`, else `vocab.json`
    (with `merges.txt`); None when it has none of them."""
    folder = Path(folder)
    for name in (TOKENIZER_FILE, WORDPIECE, BPE_VOCAB):
        if (folder / name).is_file() and (name == TOKENIZER_FILE or is_vocab_file(folder / name)):
            return folder / name
    return None


def read_tokenizer(path: str | Path) -> Any:
    """The `tokenizers.Tokenizer` of a `tokenizers` JSON file, a `vocab.txt` or a `vocab.json` (+ `merges.txt`);
    ValueError naming the file when it cannot be read as one."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not is_vocab_file(path):
        try:
            return Tokenizer.from_file(str(path))
        except Exception as err:  # noqa: BLE001 (the Rust side raises its own exception type)
            raise ValueError(f"{path}: not a `tokenizers` JSON file: {err}") from None
    settings = _settings(path.parent)
    added = path.parent / "added_tokens.json"
    if added.is_file() and _json(added):
        raise ValueError(
            f"{str(added)!r}: tokens added to the vocabulary of {path.name} are not read; write the whole tokenizer "
            "as one file where `transformers` is installed (AutoTokenizer.from_pretrained(dir).save_pretrained(dir) "
            "writes tokenizer.json) and start from the folder again"
        )
    return _wordpiece(path, settings) if path.name == WORDPIECE else _byte_bpe(path, settings)


def tokenizer_text(path: str | Path) -> str:
    """The `tokenizers` JSON of a tokenizer file as `read_tokenizer` reads it: a JSON file's own text, a vocabulary
    file's tokenizer written as JSON (what a run keeps as its `tokenizer.json`)."""
    path = Path(path)
    if is_vocab_file(path):
        return read_tokenizer(path).to_str()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a `tokenizers` JSON file: {err}") from None


def _json(file: Path) -> dict[str, Any]:
    """A JSON object file of a model folder; {} when absent. ValueError naming the file when it is not one."""
    if not file.is_file():
        return {}
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{str(file)!r}: not a JSON file ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{str(file)!r}: expected a JSON object, got {type(value).__name__}")
    return value


def _settings(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json's settings, with special_tokens_map.json's token names over them; a token given as an
    AddedToken object ({"content": "[CLS]", ...}) becomes its text."""
    settings = _json(folder / "tokenizer_config.json")
    settings |= {k: v for k, v in _json(folder / "special_tokens_map.json").items() if k in SPECIAL_KEYS}
    for key in SPECIAL_KEYS:
        if isinstance(settings.get(key), dict):
            settings[key] = settings[key].get("content")
    return settings


def _token(settings: dict[str, Any], key: str, default: str, vocab: dict[str, int], file: Path) -> tuple[str, int]:
    """(name, id) of the special token `key` names; ValueError when the vocabulary lacks it."""
    name = settings.get(key) or default
    if not isinstance(name, str) or name not in vocab:
        raise ValueError(f"{str(file)!r} has no {key} {name!r} (the token the tokenizer's settings name)")
    return name, vocab[name]


def _wordpiece(file: Path, settings: dict[str, Any]) -> Any:
    """BERT's tokenizer of a `vocab.txt` (one token a line, the line number its id): BERT's normalizer (lowercase
    and accents as the settings say; `transformers` lowercases by default), its punctuation-splitting pre-tokenizer,
    WordPiece with `##` continuations, [CLS] text [SEP]."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    try:
        lines = file.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{str(file)!r}: not a UTF-8 vocabulary file ({err})") from None
    if lines and lines[-1] == "":  # the newline that ends the last token
        lines.pop()
    vocab: dict[str, int] = {}
    for number, token in enumerate(lines):
        vocab[token.rstrip("\r")] = number  # a token listed twice takes its last line's id, as transformers reads it
    if not vocab:
        raise ValueError(f"{str(file)!r} lists no token")
    unk = _token(settings, "unk_token", "[UNK]", vocab, file)[0]
    cls, sep = _token(settings, "cls_token", "[CLS]", vocab, file), _token(settings, "sep_token", "[SEP]", vocab, file)
    lowercase = bool(settings.get("do_lower_case", True))
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
        strip_accents=settings.get("strip_accents"),  # None: stripped when lowercased, as BERT's own tokenizer does
        lowercase=lowercase,
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls[0]}:0 $A:0 {sep[0]}:0",
        pair=f"{cls[0]}:0 $A:0 {sep[0]}:0 $B:1 {sep[0]}:1",
        special_tokens=[cls, sep],
    )
    _add_specials(tok, settings, ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), vocab)
    log.info("tokenizer: %s read as BERT's WordPiece (%d tokens, %s)", file, len(vocab),
             "lowercased" if lowercase else "case kept")  # fmt: skip
    return tok


def _byte_bpe(file: Path, settings: dict[str, Any]) -> Any:
    """The byte-level BPE of a `vocab.json` + `merges.txt`: GPT-2's (no token added to a text) or RoBERTa's and
    BART's (<s> text </s>), as the folder's tokenizer_config.json (`tokenizer_class`) or config.json (`model_type`)
    says."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = _json(file)
    if not vocab or not all(isinstance(v, int) for v in vocab.values()):
        raise ValueError(f"{str(file)!r}: expected a JSON object of token -> id")
    merges = []
    for line in (file.parent / BPE_MERGES).read_text(encoding="utf-8").splitlines():
        if line.startswith("#version") or not line.strip():
            continue
        pair = line.split(" ")
        if len(pair) != 2:
            raise ValueError(f"{str(file.parent / BPE_MERGES)!r}: line {line[:80]!r} is not two tokens")
        merges.append((pair[0], pair[1]))
    wraps = _bpe_wraps(file.parent, settings)
    prefix_space = bool(settings.get("add_prefix_space", False))
    tok = Tokenizer(models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    if wraps == "roberta":
        cls, sep = _token(settings, "cls_token", "<s>", vocab, file), _token(settings, "sep_token", "</s>", vocab, file)
        tok.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=prefix_space)
        _add_specials(tok, settings, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"), vocab)
    else:
        _add_specials(tok, settings, ("<|endoftext|>",), vocab)
    log.info("tokenizer: %s read as %s byte-level BPE (%d tokens, %d merges)", file,
             "RoBERTa's" if wraps == "roberta" else "GPT-2's", len(vocab), len(merges))  # fmt: skip
    return tok


def _bpe_wraps(folder: Path, settings: dict[str, Any]) -> str:
    """ "roberta" or "none": what the folder's tokenizer adds around a text; ValueError when it does not say."""
    name = str(settings.get("tokenizer_class") or "").removesuffix("Fast")
    if name in BPE_CLASSES:
        return BPE_CLASSES[name]
    model_type = _json(folder / "config.json").get("model_type")
    if model_type in BPE_WRAPS:
        return BPE_WRAPS[model_type]
    said = f"tokenizer_class {name!r}" if name else f"model_type {model_type!r}"
    raise ValueError(
        f"{str(folder / BPE_VOCAB)!r}: which tokens wrap a text is not known for {said}; a vocab.json + merges.txt is "
        f"read for tokenizer classes {sorted(BPE_CLASSES)} or model types {sorted(BPE_WRAPS)}"
    )


def _add_specials(tok: Any, settings: dict[str, Any], defaults: tuple[str, ...], vocab: dict[str, int]) -> None:
    """The special tokens of the vocabulary as special tokens of `tok` (never split, never normalized, left out of
    decoded text), as a `transformers` tokenizer holds them."""
    names = {settings.get(k) for k in SPECIAL_KEYS} | set(defaults)
    tok.add_special_tokens(sorted((n for n in names if isinstance(n, str) and n in vocab), key=vocab.get))
