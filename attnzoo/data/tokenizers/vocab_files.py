"""Hugging Face model folders whose tokenizer is saved without a `tokenizer.json`: a WordPiece `vocab.txt` (BERT and
its kin) or a byte-level BPE `vocab.json` + `merges.txt` (RoBERTa, BART, GPT-2), as older `transformers` versions and
many shared checkpoints save it. Read into a `tokenizers.Tokenizer` built as `transformers` builds its tokenizer from
the same files, with the settings of the folder's `tokenizer_config.json` and `special_tokens_map.json`
(`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`, `add_prefix_space`, `add_bos_token`, the special tokens
and `added_tokens_decoder` with their options); ids tested equal to `transformers`'. Reading runs no code: the files
are text and JSON.
"""

from __future__ import annotations

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
# tokenizer_config.json's tokenizer_class that a vocab.txt is read for: BERT's WordPiece, [CLS] text [SEP]
WORDPIECE_CLASSES = {"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer", "MobileBertTokenizer",
                     "SqueezeBertTokenizer", "LayoutLMTokenizer"}  # fmt: skip
# the special tokens a folder's settings may name (added as special tokens: never split, left out of decoded text)
SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "bos_token", "eos_token")
TOKEN_OPTIONS = ("lstrip", "rstrip", "single_word", "normalized")  # an AddedToken's, as transformers saves them
OPTIONS = "__token_options__"  # `_settings`' key for the options of the special tokens it names


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
    from ...util.files import read_json_object

    try:
        return read_json_object(file)
    except ValueError as err:
        raise ValueError(f"{str(file)!r} {err}") from None


def _settings(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json's settings, with special_tokens_map.json's token names over them; a token given as an
    AddedToken object ({"content": "<mask>", "lstrip": true, ...}) becomes its text, its options kept under
    `OPTIONS` (content -> options)."""
    settings = _json(folder / "tokenizer_config.json")
    named = (*SPECIAL_KEYS, "additional_special_tokens")
    settings |= {k: v for k, v in _json(folder / "special_tokens_map.json").items() if k in named}
    options: dict[str, dict[str, bool]] = {}

    def text(token: Any) -> Any:
        if not isinstance(token, dict):
            return token
        if isinstance(token.get("content"), str):
            options[token["content"]] = {k: bool(token[k]) for k in TOKEN_OPTIONS if k in token}
        return token.get("content")

    for key in SPECIAL_KEYS:
        settings[key] = text(settings.get(key))
    extra = settings.get("additional_special_tokens")
    settings["additional_special_tokens"] = [text(t) for t in extra] if isinstance(extra, list) else []
    settings[OPTIONS] = options
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
    name = str(settings.get("tokenizer_class") or "BertTokenizer").removesuffix("Fast")
    if name not in WORDPIECE_CLASSES:
        raise ValueError(
            f"{str(file)!r}: tokenizer_class {name!r} (tokenizer_config.json) is not read from a vocab.txt, which is "
            f"read as BERT's WordPiece for {sorted(WORDPIECE_CLASSES)}; write the tokenizer as tokenizer.json where "
            "`transformers` is installed (AutoTokenizer.from_pretrained(dir).save_pretrained(dir))"
        )
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
    _add_specials(tok, settings, ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), vocab, file)
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
        _add_specials(tok, settings, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"), vocab, file)
    else:
        _wrap_bos_eos(tok, settings, vocab, file)
        _add_specials(tok, settings, ("<|endoftext|>",), vocab, file)
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


def _wrap_bos_eos(tok: Any, settings: dict[str, Any], vocab: dict[str, int], file: Path) -> None:
    """GPT-2's tokenizer adds nothing to a text, but a folder's `add_bos_token` / `add_eos_token` (OPT's) put its
    bos / eos token first / last, as `transformers` does."""
    from tokenizers import processors

    first = _token(settings, "bos_token", "<|endoftext|>", vocab, file) if settings.get("add_bos_token") else None
    last = _token(settings, "eos_token", "<|endoftext|>", vocab, file) if settings.get("add_eos_token") else None
    if first is None and last is None:
        return
    single = " ".join([*([f"{first[0]}:0"] if first else []), "$A:0", *([f"{last[0]}:0"] if last else [])])
    pair = " ".join([single, *([f"{first[0]}:1"] if first else []), "$B:1", *([f"{last[0]}:1"] if last else [])])
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=sorted({t for t in (first, last) if t is not None})
    )


def _add_specials(
    tok: Any, settings: dict[str, Any], defaults: tuple[str, ...], vocab: dict[str, int], file: Path
) -> None:
    """The folder's added tokens as `tok`'s, as a `transformers` tokenizer holds them: those tokenizer_config.json's
    `added_tokens_decoder` lists, with its ids and options (a RoBERTa `<mask>` that takes the space before it:
    `lstrip`), then the special tokens its settings name (`additional_special_tokens` too) and the family's that
    the vocabulary holds (never split, never normalized, left out of decoded text). A token the vocabulary lacks
    takes the next id, as it does in `transformers`; ValueError naming the file when a listed id is not the one it
    gets."""
    from tokenizers import AddedToken

    declared = settings.get("added_tokens_decoder") or {}
    if not isinstance(declared, dict):
        raise ValueError(f"{str(file.parent / 'tokenizer_config.json')!r}: added_tokens_decoder is not an object")
    listed = set()
    for key in sorted(declared, key=lambda k: int(k) if str(k).lstrip("-").isdigit() else -1):
        entry = declared[key]
        if not str(key).isdigit() or not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise ValueError(f"{str(file.parent / 'tokenizer_config.json')!r}: added_tokens_decoder entry {key!r} is "
                             "not an id and a token with its content")  # fmt: skip
        special = bool(entry.get("special", False))
        options = {k: bool(entry[k]) for k in TOKEN_OPTIONS if k in entry}
        options.setdefault("normalized", not special)
        added = AddedToken(entry["content"], special=special, **options)
        (tok.add_special_tokens if special else tok.add_tokens)([added])
        if tok.token_to_id(entry["content"]) != int(key):
            raise ValueError(
                f"{str(file.parent / 'tokenizer_config.json')!r}: added token {entry['content']!r} has id {key} there "
                f"and {tok.token_to_id(entry['content'])} after the {len(vocab)} tokens of {file.name}"
            )
        listed.add(entry["content"])
    # set in the folder's settings: added even where the vocabulary lacks them
    named = [*(settings.get(k) for k in SPECIAL_KEYS), *settings.get("additional_special_tokens", [])]
    names = [n for n in dict.fromkeys(named) if isinstance(n, str) and n not in listed]
    names += [n for n in defaults if n in vocab and n not in listed and n not in names]
    ordered = [*sorted((n for n in names if n in vocab), key=vocab.get), *(n for n in names if n not in vocab)]
    options = settings.get(OPTIONS, {})  # a special token is never normalized, unless its own options say so
    tok.add_special_tokens([AddedToken(n, special=True, **{"normalized": False, **options.get(n, {})})
                            for n in ordered])  # fmt: skip
