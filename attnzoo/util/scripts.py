"""Which writing system texts are in, where a choice depends on it: words of a script written without spaces between
them (Chinese, Japanese, Thai, ...) are not what a whitespace split finds, so the classical baseline reads characters
of such texts (`attnzoo.run.baseline`), and BLEU splits their references into characters (`bleu_tokenize`)."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

# scripts written without spaces between words (their Unicode character names start so); Korean (Hangul) has spaces
UNSPACED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HALFWIDTH KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN")
UNSPACED_SHARE = 0.3  # of the letters: above it, the texts are taken for such a script's
CHINESE_SHARE = 0.9  # of those letters: Chinese characters (no kana) above it, the texts are taken for Chinese


@functools.lru_cache(maxsize=1 << 16)
def _script(c: str) -> str | None:
    """The `UNSPACED_SCRIPTS` entry `c` is of, or None."""
    name = unicodedata.name(c, "")
    return next((s for s in UNSPACED_SCRIPTS if name.startswith(s)), None)


def _letters(texts: Sequence[str]) -> list[str]:
    """The letters (and combining marks) of up to 1,000 texts, 2,000 characters each."""
    return [c for text in texts[:1000] for c in text[:2000] if c.isalpha() or unicodedata.category(c) == "Mn"]


def unspaced(texts: Sequence[str]) -> bool:
    """Whether `texts` are mostly written in scripts without spaces between words (Chinese, Japanese, Thai, ...):
    more than `UNSPACED_SHARE` of the letters (and combining marks) of up to 1,000 texts are of `UNSPACED_SCRIPTS`."""
    letters = _letters(texts)
    return bool(letters) and sum(_script(c) is not None for c in letters) / len(letters) > UNSPACED_SHARE


def bleu_tokenize(texts: Sequence[str]) -> tuple[str, str]:
    """(sacreBLEU tokenization, why) for references like `texts`: "13a" (sacreBLEU's default, words split at spaces
    and punctuation) for spaced scripts; "zh" (each Chinese character a word, as sacreBLEU scores Chinese) for
    Chinese; "char" (every character a word) for the other unspaced scripts (Japanese, Thai, ...), whose words 13a
    cannot find: a whole sentence would be one word, and BLEU 0 even for a translation equal to its reference."""
    letters = _letters(texts)
    scripts = [s for s in map(_script, letters) if s is not None]
    if not letters or len(scripts) / len(letters) <= UNSPACED_SHARE:
        return "13a", "the targets are written with spaces between words: sacreBLEU's default tokenization"
    share = sum(s == "CJK" for s in scripts) / len(scripts)
    if share > CHINESE_SHARE:
        return "zh", f"the targets are Chinese ({share:.0%} of their unspaced letters are Chinese characters)"
    return "char", "the targets are in a script without spaces between words (Japanese, Thai, ...): characters"
