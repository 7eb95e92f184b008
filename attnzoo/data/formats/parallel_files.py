"""Reading parallel text (source, target pairs) from tab-separated and JSONL files.

- TSV (`.tsv`, `.txt`, `.tab`): one pair per line, fields split at tabs, no header and no quoting. Tatoeba/Anki
  exports read as they are: `source<TAB>target[<TAB>attribution]` (columns 0 and 1), and Tatoeba's sentence-pair
  downloads `id<TAB>source<TAB>id<TAB>target` with columns 1 and 3.
- JSONL (`.jsonl`): one object per line, e.g. `{"src": "...", "tgt": "..."}`, with the key names configurable.

Lines end at "\\n" or "\\r\\n", or at a lone "\\r" in a file without any "\\n" (old Mac Excel); a stray "\\r" inside
a line stays in it. Blank lines are ignored. Sides are stripped of surrounding whitespace. A bad line (too few
fields, an empty side, bad JSON, a missing key, a value that is not a string, bytes that are not UTF-8) raises an
error naming the file and the line, or, with `on_bad_line="skip"`, is left out, counted and logged. A TSV whose
first line looks like a header (`_header_like`) is read as it is, with a warning naming the line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .text_files import recode_hint, wide_unicode

log = logging.getLogger("attnzoo")

TSV_SUFFIXES = (".tsv", ".txt", ".tab")
# what the columns of a header row are called: a side of its first line that is one of these (or a language code)
HEADER_NAMES = ("id", "src", "source", "tgt", "target", "input", "output", "text", "sentence", "translation",
                "english", "german", "french", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
                "japanese")  # fmt: skip
JSONL_SUFFIXES = (".jsonl",)
FORMATS = ("auto", "tsv", "jsonl")
ON_BAD_LINE = ("error", "skip")


class BadLine(ValueError):
    """A line that does not hold a pair; the message names the file and the line."""


@dataclass
class ParallelText:
    """The pairs of one file, and the bad lines left out of it (line number, reason)."""

    path: Path
    pairs: list[tuple[str, str]]
    skipped: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PairFormat:
    """Where the two sides are: TSV column indices, JSONL keys; and what to do with a bad line."""

    format: str = "auto"
    src_column: int = 0
    tgt_column: int = 1
    src_key: str = "src"
    tgt_key: str = "tgt"
    on_bad_line: str = "error"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"data.format: {self.format!r} is not one of {list(FORMATS)}")
        if self.on_bad_line not in ON_BAD_LINE:
            raise ValueError(f"data.on_bad_line: {self.on_bad_line!r} is not one of {list(ON_BAD_LINE)}")
        if self.src_column < 0 or self.tgt_column < 0 or self.src_column == self.tgt_column:
            raise ValueError(
                f"data.src_column ({self.src_column}) and data.tgt_column ({self.tgt_column}) must be two different "
                "column indices >= 0"
            )
        if not self.src_key or not self.tgt_key or self.src_key == self.tgt_key:
            raise ValueError(f"data.src_key ({self.src_key!r}) and data.tgt_key ({self.tgt_key!r}) must differ")

    def format_of(self, path: Path) -> str:
        if self.format != "auto":
            return self.format
        suffix = path.suffix.lower()
        if suffix in TSV_SUFFIXES:
            return "tsv"
        if suffix in JSONL_SUFFIXES:
            return "jsonl"
        raise ValueError(
            f"{path}: cannot tell the format from the suffix {suffix!r}; name it {list(TSV_SUFFIXES + JSONL_SUFFIXES)} "
            "or set data.format to 'tsv' or 'jsonl'"
        )


def byte_lines(f: BinaryIO) -> Iterator[bytes]:
    r"""The lines of a binary file without their ends: "\n" or "\r\n", or a lone "\r" in a file with no "\n" at all
    (old Mac Excel's "Tab delimited text"). A stray "\r" inside a line of a file that has "\n" line ends (scraped
    text) stays in its line, so the lines are those `wc -l` counts. Lines stay bytes, so that a byte that is not UTF-8
    can be named by its line (neither "\r" nor "\n" occurs inside a UTF-8 character). A UTF-8 byte-order mark (as
    Excel writes) is dropped from the first line."""
    ended = False  # whether a "\n" has ended a line
    for n, raw in enumerate(f):  # split at b"\n" only
        if n == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if raw.endswith(b"\n"):
            ended = True
            yield raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        elif ended:  # the last line, without an end
            yield raw[:-1] if raw.endswith(b"\r") else raw
        else:  # no "\n" anywhere: the whole file, its lines ended by a lone "\r"
            yield from (raw[:-1] if raw.endswith(b"\r") else raw).split(b"\r")


def _lines(path: Path) -> Iterator[tuple[int, str | BadLine]]:
    """(line number, text) per line (`byte_lines`); a BadLine naming the bytes where they are not UTF-8."""
    with path.open("rb") as f:
        for n, raw in enumerate(byte_lines(f), start=1):
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start : err.end].hex(" ")
                yield (
                    n,
                    BadLine(f"byte(s) {bad} at column {err.start + 1} are not UTF-8; {recode_hint(raw, path.name)}"),
                )


def _tsv_pair(line: str, fmt: PairFormat) -> tuple[str, str]:
    fields = line.split("\t")
    need = max(fmt.src_column, fmt.tgt_column) + 1
    if len(fields) < need:
        what = "no tab" if len(fields) == 1 else f"{len(fields)} tab-separated fields"
        raise BadLine(
            f"{what}; expected at least {need} (source in column {fmt.src_column}, target in {fmt.tgt_column})"
        )
    return fields[fmt.src_column], fields[fmt.tgt_column]


def _jsonl_pair(line: str, fmt: PairFormat) -> tuple[str, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise BadLine(f"not valid JSON ({err})") from None
    if not isinstance(record, dict):
        raise BadLine(f"expected a JSON object, got {type(record).__name__}")
    sides = []
    for key, what in ((fmt.src_key, "src"), (fmt.tgt_key, "tgt")):
        if key not in record:
            raise BadLine(f"no key {key!r} (keys: {list(record)}; set data.{what}_key)")
        if not isinstance(record[key], str):
            raise BadLine(f"{key!r} is a {type(record[key]).__name__}, not a string")
        sides.append(record[key])
    return sides[0], sides[1]


def read_pairs(path: str | Path, fmt: PairFormat) -> ParallelText:
    """The (source, target) pairs of one file.

    Raises:
        ValueError: no such file, an unknown format, a UTF-16 or UTF-32 file, a bad line (unless
            `fmt.on_bad_line == "skip"`), or no pairs.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(
            f"{str(path)!r} is a folder: a parallel text is one file of pairs "
            f"({', '.join(TSV_SUFFIXES)}: source<TAB>target per line; {', '.join(JSONL_SUFFIXES)}: one object per line)"
        )
    if not path.is_file():
        raise ValueError(f"no such parallel text file: {str(path)!r}")
    with path.open("rb") as f:
        note = wide_unicode(f.read(4), path.name)
    if note is not None:  # every line would be "not UTF-8", or text with a NUL in every other byte
        raise ValueError(f"{path}: {note}")
    parse = _tsv_pair if fmt.format_of(path) == "tsv" else _jsonl_pair
    out = ParallelText(path=path, pairs=[])
    widths: dict[int, list[int]] = {}  # tab-separated fields -> the lines of that many (a TSV)
    for n, line in _lines(path):
        try:
            if isinstance(line, BadLine):
                raise line
            if not line.strip():
                continue
            if parse is _tsv_pair:
                widths.setdefault(line.count("\t") + 1, []).append(n)
            src, tgt = (side.strip() for side in parse(line, fmt))
            for side, what in ((src, "source"), (tgt, "target")):
                if not side:
                    raise BadLine(f"empty {what}")
        except BadLine as err:
            if fmt.on_bad_line == "error":
                raise BadLine(f"{path} line {n}: {err} (data.on_bad_line=skip leaves such lines out)") from None
            out.skipped.append((n, str(err)))
            continue
        out.pairs.append((src, tgt))
    if out.skipped:
        first = "; ".join(f"line {n}: {why}" for n, why in out.skipped[:3])
        log.warning(
            "data: skipped %d bad lines of %s (%s%s)", len(out.skipped), path, first, "; ..." * (len(out.skipped) > 3)
        )
    if not out.pairs:
        raise ValueError(f"{path}: no pairs" + (f" ({len(out.skipped)} bad lines skipped)" if out.skipped else ""))
    _say_extra_fields(path, widths, fmt)
    _refuse_id_columns(path, out.pairs, widths, fmt)
    if parse is _tsv_pair and _header_like(out.pairs):
        log.warning(
            "data: %s: its first pair %r looks like a header row; pair files have none, so it is read as a pair "
            "(remove the line if it names the columns)", path, out.pairs[0],
        )  # fmt: skip
    return out


def _say_extra_fields(path: Path, widths: dict[int, list[int]], fmt: PairFormat) -> None:
    """Warn when a few lines of a TSV hold more tab-separated fields than most do: a tab inside a text, which
    splits it (its first part read as the source, its second as the target), where the lines of most files agree
    (Tatoeba's 4 columns, a plain file's 2)."""
    if len(widths) < 2:
        return
    usual = max(widths, key=lambda w: len(widths[w]))
    more = sorted(n for w, lines in widths.items() if w > usual for n in lines)
    if more and len(more) * 20 <= sum(map(len, widths.values())):  # a few lines against the rest
        shown = ", ".join(map(str, more[:5])) + (", ..." if len(more) > 5 else "")
        log.warning(
            "data: %s: %d line(s) hold more tab-separated fields than the %d of most lines (lines %s): a tab inside a "
            "text? Those are read as columns %d and %d like the others, the rest of the line left out; replace the "
            "tab by a space where it is part of the text", path, len(more), usual, shown, fmt.src_column,
            fmt.tgt_column,
        )  # fmt: skip


def _refuse_id_columns(path: Path, pairs: list[tuple[str, str]], widths: dict[int, list[int]], fmt: PairFormat) -> None:
    """ValueError when most lines of a TSV hold 4 or more fields and a column read as a side holds a whole number on
    nearly every line: sentence ids (a Tatoeba export: id<TAB>text<TAB>id<TAB>text), which the model would learn to
    translate from or into. Two or three columns of numbers and words (numerals into words) are data."""
    if not widths or max(widths, key=lambda w: len(widths[w])) < 4:
        return
    for side, (what, key, column) in enumerate((("source", "src", fmt.src_column), ("target", "tgt", fmt.tgt_column))):
        numbers = sum(1 for pair in pairs if pair[side].isdigit())
        if numbers * 10 >= len(pairs) * 9:
            raise ValueError(
                f"{path}: column {column}, read as the {what} (data.{key}_column), is a whole number in {numbers} "
                f"of {len(pairs)} lines: ids, not text. Set data.src_column and data.tgt_column to the columns of the "
                "texts (counted from 0; a Tatoeba export, id<TAB>text<TAB>id<TAB>text: data.src_column=1 "
                "data.tgt_column=3)"
            )


def _header_like(pairs: list[tuple[str, str]]) -> bool:
    """Whether the first pair names columns rather than translating: both sides up to 3 words of letters, each
    naming a column or language (`HEADER_NAMES`: "source sentence", "English_text", "id"); or both sides one word
    of letters, and either language codes ("en", "de_DE") or the other pairs mostly sentences (3 words or more on
    both sides)."""
    if len(pairs) < 3:
        return False
    named = [side.lower().replace("_", " ").split() for side in pairs[0]]  # "source sentence", "English_text", "id"
    if all(1 <= len(words) <= 3 and all(re.fullmatch(r"[a-z][a-z0-9]*", w) for w in words)
           and any(w in HEADER_NAMES for w in words) for words in named):  # fmt: skip
        return True
    if not all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", side) for side in pairs[0]):
        return False
    if all(side.lower() in HEADER_NAMES or re.fullmatch(r"[a-z]{2}(_[A-Za-z]{2})?", side) for side in pairs[0]):
        return True
    words = sorted(min(len(src.split()), len(tgt.split())) for src, tgt in pairs[1:1001])
    return words[len(words) // 2] >= 3
