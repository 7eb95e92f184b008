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


def _scripts(texts: Sequence[str]) -> tuple[int, list[str]]:
    """(how many letters and combining marks up to 1,000 texts of 2,000 characters hold, the `UNSPACED_SCRIPTS` entry
    of each of them that is of one)."""
    letters = [c for text in texts[:1000] for c in text[:2000] if c.isalpha() or unicodedata.category(c) == "Mn"]
    return len(letters), [s for s in map(_script, letters) if s is not None]


def unspaced(texts: Sequence[str]) -> bool:
    """Whether `texts` are mostly written in scripts without spaces between words (Chinese, Japanese, Thai, ...):
    more than `UNSPACED_SHARE` of the letters (and combining marks) of up to 1,000 texts are of `UNSPACED_SCRIPTS`."""
    return _unspaced(*_scripts(texts))


def _unspaced(letters: int, scripts: Sequence[str]) -> bool:
    """Whether more than `UNSPACED_SHARE` of `letters` are of the unspaced `scripts` (`_scripts`)."""
    return letters > 0 and len(scripts) / letters > UNSPACED_SHARE


def bleu_tokenize(texts: Sequence[str]) -> tuple[str, str]:
    """(sacreBLEU tokenization, why) for references like `texts`: "13a" (sacreBLEU's default, words split at spaces
    and punctuation) for spaced scripts; "zh" (each Chinese character a word, as sacreBLEU scores Chinese) for
    Chinese; "char" (every character a word) for the other unspaced scripts (Japanese, Thai, ...), whose words 13a
    cannot find: a whole sentence would be one word, and BLEU 0 even for a translation equal to its reference."""
    letters, scripts = _scripts(texts)
    if not _unspaced(letters, scripts):
        return "13a", "the targets are written with spaces between words: sacreBLEU's default tokenization"
    share = sum(s == "CJK" for s in scripts) / len(scripts)
    if share > CHINESE_SHARE:
        return "zh", f"the targets are Chinese ({share:.0%} of their unspaced letters are Chinese characters)"
    return "char", "the targets are in a script without spaces between words (Japanese, Thai, ...): characters"
