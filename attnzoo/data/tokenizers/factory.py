"""`make_tokenizer`: the one place a `data.tokenizer` config value becomes a tokenizer, for every DataModule."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ...util.names import suggest
from .subword import KINDS, SubwordTokenizer
from .tokenize import TOKENIZERS, ByteTokenizer, FileTokenizer, Tokenizer

log = logging.getLogger("attnzoo")


def make_tokenizer(
    spec: str,
    *,
    texts: Sequence[str] | None = None,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    lowercase: bool = False,
    split_digits: bool = False,
    generates: str | None = None,
) -> Tokenizer:
    """A tokenizer from a name in `TOKENIZERS`, a subword kind trained on `texts`, or a `tokenizers` JSON file.

    Args:
        spec: "bytes", "listops", "bpe", "wordpiece", "unigram" or a file path.
        texts: the training split's texts, for a subword kind (`attnzoo.data.tokenizers.subword`).
        vocab_size, min_frequency, lowercase: subword options.
        split_digits: a learned subword vocabulary makes every digit a token of its own; no effect on a fixed
            tokenizer or a file (which keeps its own pre-tokenizer).
        generates: for a model that generates text, what it is (named in errors). The tokenizer then has bos/eos
            ids: "bytes" gains them, a file (a run's saved `tokenizer.json`) must define them, and the fixed word
            lists are not offered.
    """
    names = ["bytes"] if generates is not None else list(TOKENIZERS)
    if spec in KINDS:
        if texts is None:
            raise ValueError(
                f"data.tokenizer {spec!r} is trained on the train split's texts, which this data does not give; "
                f"valid here: {names} or a `tokenizers` .json file"
            )
        return SubwordTokenizer.train(
            texts,
            kind=spec,
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            lowercase=lowercase,
            split_digits=split_digits,
        )
    own_run = Path(spec).name == "tokenizer.json" and (Path(spec).parent / "config.yaml").is_file()
    if split_digits and not own_run:  # a run's own file was learned with the run's split_digits: nothing to say
        log.info(  # a run's own tokenizer.json splits digits if it was learned with split_digits: its pre-tokenizer
            "data.split_digits: no effect on data.tokenizer %r, which splits digits or not as it was made to", spec
        )
    if generates is not None:
        return _generating(spec, what=generates)
    if spec in TOKENIZERS:
        return TOKENIZERS[spec]()
    if spec.endswith(".json") or Path(spec).exists():
        return FileTokenizer(path=spec)
    raise _unknown(spec)


def check_tokenizer_spec(spec: str) -> None:
    """ValueError for a `data.tokenizer` value that names no tokenizer (neither a name, a subword kind nor an
    existing file), before any text is read."""
    if spec in TOKENIZERS or spec in KINDS or Path(spec).exists():
        return
    if spec.endswith(".json"):
        FileTokenizer(path=spec)  # its error names the file that is not there
    raise _unknown(spec)


def _unknown(spec: str) -> ValueError:
    valid = list(TOKENIZERS) + list(KINDS)
    return ValueError(
        f"data.tokenizer: unknown {spec!r}; valid: {list(TOKENIZERS)}, a subword kind trained on the train split "
        f"{list(KINDS)}, or a `tokenizers` .json file{suggest(spec, valid)}"
    )


def _generating(spec: str, *, what: str) -> Tokenizer:
    """A fixed tokenizer with bos/eos ids: "bytes" (UTF-8 bytes plus bos/eos), or a `tokenizers` JSON file that has
    them."""
    if spec == "bytes":
        return ByteTokenizer(bos_eos=True)
    if spec.endswith(".json") or Path(spec).exists():
        tok = SubwordTokenizer.load(spec)
        tok.require("bos", "eos", what=what)
        return tok
    valid = [*KINDS, "bytes"]
    raise ValueError(
        f"data.tokenizer: unknown {spec!r}; valid: {valid} or a `tokenizers` .json file{suggest(spec, valid)}"
    )
